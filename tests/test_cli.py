"""The `lowerd` command end to end: real subprocesses on copies of the fixture projects.

Every build imports torch and ExecuTorch (several seconds), so the expensive runs are few and
module-scoped, and the tests share them:

- broken/: one `build --json` (at LOWERD_LOG_LEVEL=DEBUG, made once per session: conftest.py's
  broken_debug_build, which tests/test_cli_isolation.py reads too) and one table `build` (which
  also shows that torch's dump of a failed export is held back);
- basic/: a cold `build --json` (made once per session: conftest.py's basic_build, which
  tests/test_daemon_rpc.py and tests/test_cache_integrity.py share), then on a copy of its cache
  a warm one, a `--jobs 2` one, one after damaging two cache entries (each run after the one
  before, on one cache), and `build tiny_linear` on a fresh copy with no cache (conftest.py's
  named_build, which tests/test_cache_integrity.py reads too);
- examples/: one `build --json --no-daemon`, made once per session (conftest.py's
  examples_build, which tests/test_quiet_output.py reads too).

Config errors and the cache commands never import torch, so they get a subprocess each.
Lines the tests expect are found by their `# LINE-MARK: <name>` comments (tests/projects/README.md).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lowerd.cache.store import MAGIC

from helpers import (
    EXAMPLE_TARGETS,
    PROJECTS,
    TRACEBACK,
    Run,
    SharedBuild,
    copy_project,
    line_marks,
    lowerd,
    lowerd_without_torch,
    shas,
    without_timing,
)
from known_stock import files_digest, known_or_live
from stock import call_entry, forget_project_modules

pytestmark = pytest.mark.e2e


# Helpers -------------------------------------------------------------------------------------


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def by_name(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {target["name"]: target for target in document["targets"]}


def blob_files(cache: Path) -> list[Path]:
    return sorted(p for p in (cache / "blobs").rglob("*") if p.is_file())


def assert_built(run: Run, project: Path, names: list[str]) -> dict[str, Any]:
    """Exit 0, exactly `names` in order, each ok with its .pte on disk matching its sha256."""
    assert run.returncode == 0, run.log
    assert TRACEBACK not in run.stderr, run.log
    document = run.json()
    assert [t["name"] for t in document["targets"]] == names
    for target in document["targets"]:
        assert target["status"] == "ok", target
        assert target["error"] is None
        output = Path(target["output"])
        assert output == project / "build" / f"{target['name']}.pte"
        assert output.is_file()
        assert target["sha256"] == sha256_of(output)
    return document


BASIC_TARGETS = ["tiny_linear", "refused", "two_methods", "dynamic", "pkg"]


# broken/: every target fails, each at its line --------------------------------------------


@pytest.fixture(scope="module")
def broken(broken_debug_build: SharedBuild) -> Path:
    """The project the `--json` run built in (shared: read it only)."""
    return broken_debug_build.root


@pytest.fixture(scope="module")
def broken_marks(broken: Path) -> dict[str, tuple[str, int]]:
    return line_marks(broken)


@pytest.fixture(scope="module")
def broken_json(broken_debug_build: SharedBuild) -> Run:
    """`build --json`, made once per session with LOWERD_LOG_LEVEL=DEBUG (conftest.py's
    broken_debug_build: tests/test_cli_isolation.py reads torch's account of the failure on its
    stderr, rather than pay the imports of a run of its own): stdout is still the one document,
    and its errors are the table run's, made at the default level."""
    return broken_debug_build.run


@pytest.fixture(scope="module")
def broken_table(tmp_path_factory: pytest.TempPathFactory) -> Run:
    project = copy_project(PROJECTS / "broken", tmp_path_factory.mktemp("broken") / "project")
    return lowerd(project, tmp_path_factory.mktemp("broken-table-cache"), "build")


# target -> (error kind, LINE-MARK of the blamed line, words the message must contain)
BROKEN = {
    "syntax": ("entry-error", "syntax", "syntax error"),
    "export_fail": ("export-error", "export_fail", "data-dependent"),
    "not_callable": ("entry-error", "not_callable", "not a function"),
    "bad_return": ("entry-error", "bad_return", "(module, example_args)"),
    "missing_file": ("entry-error", "missing_file", "models/does_not_exist.py does not exist"),
    "raises": ("entry-error", "raises", "width must be positive"),
    # a builtin, no code of the user's: refused uncalled at the config line that names it
    "not_users": ("entry-error", "not_users", "entry os:getcwd is a builtin_function_or_method"),
}


def test_broken_build_exits_1_with_every_target_failed(broken: Path, broken_json: Run) -> None:
    assert broken_json.returncode == 1, broken_json.log
    document = broken_json.json()
    assert document["config"] == str(broken / "pyproject.toml")
    assert [t["name"] for t in document["targets"]] == list(BROKEN)
    for target in document["targets"]:
        assert target["status"] == "error"
        assert target["output"] is None and target["sha256"] is None
    assert not (broken / "build").exists() or not list((broken / "build").iterdir())


@pytest.mark.parametrize("name", list(BROKEN))
def test_broken_target_error_points_at_its_line(
    name: str, broken: Path, broken_json: Run, broken_marks: dict[str, tuple[str, int]]
) -> None:
    kind, mark, words = BROKEN[name]
    error = by_name(broken_json.json())[name]["error"]
    file, line = broken_marks[mark]
    assert (error["kind"], error["file"], error["line"]) == (kind, file, line), error
    assert (broken / error["file"]).is_file() or name == "missing_file"
    assert words in error["message"]


@pytest.mark.parametrize("name", list(BROKEN))
def test_broken_target_message_is_readable(name: str, broken_json: Run) -> None:
    message = by_name(broken_json.json())[name]["error"]["message"]
    assert TRACEBACK not in message
    assert 'File "' not in message  # no stack frames
    assert "For more information" not in message  # torch's debugging advice is trimmed
    assert len(message.splitlines()) <= 10, message


def test_broken_export_message_names_the_guard(broken_json: Run) -> None:
    message = by_name(broken_json.json())["export_fail"]["error"]["message"]
    assert message.startswith("torch.export of 'forward' failed: GuardOnDataDependentSymNode")
    assert "Could not guard on data-dependent expression" in message


def test_broken_build_prints_no_traceback(broken_json: Run, broken_table: Run) -> None:
    for run in (broken_json, broken_table):
        assert TRACEBACK not in run.stdout, run.log
        assert TRACEBACK not in run.stderr, run.log


def test_broken_table_shows_file_line_message(broken_json: Run, broken_table: Run) -> None:
    assert broken_table.returncode == 1, broken_table.log
    lines = broken_table.stdout.splitlines()
    for name, target in by_name(broken_json.json()).items():
        error = target["error"]
        assert f"{name}: FAILED" in lines, broken_table.log
        first_line = error["message"].splitlines()[0]
        assert f"  {error['file']}:{error['line']}: {first_line}" in lines, broken_table.log
    assert re.search(r"^0 targets built, 7 failed in [\d.]+ s$", broken_table.stdout, re.M)


PARTIAL_GRAPH = "def forward(self"  # how torch.export's dump of its traced graph starts


def test_an_export_failure_shows_lowerd_s_line_and_not_torch_s_dump(
    broken_marks: dict[str, tuple[str, int]], broken_table: Run
) -> None:
    """torch's own account of export_fail's failure is held back next to lowerd's file:line
    message (tests/test_cli_isolation.py shows it with LOWERD_LOG_LEVEL=DEBUG): the table run
    above, not a run of its own (each pays the torch and ExecuTorch imports)."""
    file, line = broken_marks["export_fail"]
    assert f"{file}:{line}: torch.export of 'forward' failed" in broken_table.stdout, (
        broken_table.log
    )
    assert PARTIAL_GRAPH not in broken_table.stderr, broken_table.log
    # torch's log record about the failure, from its own handler on its own logger
    assert "Unable to find user code" not in broken_table.stderr, broken_table.log


# Config errors: exit 2, the pyproject line on stderr, and no torch import ------------------

CONFIG_ERRORS = {
    "malformed-toml": (
        """\
        [tool.lowerd]
        out_dir = build  # LINE-MARK: bad
        [tool.lowerd.targets.a]
        entry = "m.py:make"
        """,
        ["invalid TOML"],
    ),
    "unknown-key": (
        """\
        [tool.lowerd]
        backends = ["xnnpack"]
        bogus = 1  # LINE-MARK: bad
        [tool.lowerd.targets.a]
        entry = "m.py:make"
        """,
        ["unknown key 'bogus'", "allowed keys: backends"],
    ),
    "unknown-backend": (
        """\
        [tool.lowerd]
        [tool.lowerd.targets.a]
        entry = "m.py:make"
        backends = ["xnnpak"]  # LINE-MARK: bad
        """,
        ["unknown backend 'xnnpak'", "; known backends: "],
    ),
}


@pytest.mark.parametrize("case", list(CONFIG_ERRORS))
def test_config_error_exits_2_at_the_pyproject_line(case: str, tmp_path: Path) -> None:
    text, words = CONFIG_ERRORS[case]
    project = tmp_path / "project"
    project.mkdir()
    pyproject = project / "pyproject.toml"
    pyproject.write_text(textwrap.dedent(text))
    [(_, line)] = line_marks(project).values()

    for run in (
        lowerd(project, tmp_path / "cache", "build", "--json"),
        lowerd_without_torch(project, tmp_path / "cache", "build", "--json"),
    ):
        assert run.returncode == 2, run.log
        assert run.stdout == ""
        assert TRACEBACK not in run.stderr
        [message] = run.stderr.splitlines()
        assert message.startswith(f"lowerd: {pyproject}:{line}: "), run.log
        for word in words:
            assert word in message
        if case == "unknown-backend":
            known = message.rpartition("known backends: ")[2].split(", ")
            assert {"xnnpack", "vulkan", "coreml"} <= set(known), message
    assert not (project / "build").exists()


def test_unknown_target_on_the_command_line_exits_2(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    pyproject = project / "pyproject.toml"
    pyproject.write_text('[tool.lowerd.targets.alpha]\nentry = "m.py:make"\n')

    for run in (
        lowerd(project, tmp_path / "cache", "build", "alpah"),
        lowerd_without_torch(project, tmp_path / "cache", "build", "alpah"),
    ):
        assert run.returncode == 2, run.log
        assert run.stdout == ""
        assert TRACEBACK not in run.stderr
        [message] = run.stderr.splitlines()
        assert message.startswith(f"lowerd: {pyproject}: unknown target 'alpah'"), run.log
        assert "known targets: alpha" in message


def test_no_pyproject_exits_2(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    declared = [
        p
        for p in (f / "pyproject.toml" for f in empty.parents)
        if p.is_file() and "[tool.lowerd" in p.read_text()
    ]
    assert not declared, f"a [tool.lowerd] pyproject.toml above the test folder: {declared}"

    for run in (
        lowerd(empty, tmp_path / "cache", "build"),
        lowerd_without_torch(empty, tmp_path / "cache", "build"),
    ):
        assert run.returncode == 2, run.log
        assert run.stdout == ""
        assert TRACEBACK not in run.stderr
        assert "no pyproject.toml with [tool.lowerd] found" in run.stderr, run.log


# basic/: every target lowers; the cache serves a warm build --------------------------------


@pytest.fixture(scope="module")
def cold_basic(basic_build: SharedBuild) -> Path:
    """The project the cold build wrote to (shared: read it only)."""
    return basic_build.root


@pytest.fixture(scope="module")
def basic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project of the runs after the cold one: a private copy of basic/."""
    return copy_project(PROJECTS / "basic", tmp_path_factory.mktemp("basic") / "project")


@pytest.fixture(scope="module")
def basic_cache(basic_build: SharedBuild, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of the cache as the cold build left it."""
    return Path(shutil.copytree(basic_build.cache, tmp_path_factory.mktemp("basic") / "cache"))


# The runs below share basic_cache; each depends on the one before so they run in this order.
# All but `unchanged` first delete build/ (outputs and build state): an intact build is "up to
# date" and never reaches the blob cache these runs are about.


def rebuild(basic: Path, basic_cache: Path, *args: str) -> Run:
    shutil.rmtree(basic / "build", ignore_errors=True)
    return lowerd(basic, basic_cache, "build", "--json", *args)


@pytest.fixture(scope="module")
def cold(basic_build: SharedBuild) -> Run:
    return basic_build.run


@pytest.fixture(scope="module")
def warm(cold: Run, basic: Path, basic_cache: Path) -> Run:
    return rebuild(basic, basic_cache)


@pytest.fixture(scope="module")
def unchanged(warm: Run, basic: Path, basic_cache: Path) -> Run:
    # An up-to-date check must not pay the ~6 s torch import: exit 99 if it did.
    return lowerd_without_torch(basic, basic_cache, "build", "--json")


@pytest.fixture(scope="module")
def parallel(unchanged: Run, basic: Path, basic_cache: Path) -> Run:
    return rebuild(basic, basic_cache, "--jobs", "2")


@dataclass
class CorruptRun:
    run: Run
    entry: Path
    entry_after_run: bytes  # read at once: test_cache_stats_gc_and_clear empties the cache


@pytest.fixture(scope="module")
def after_corruption(parallel: Run, basic: Path, basic_cache: Path) -> CorruptRun:
    """One rebuild after two kinds of damage, each to its own partition's entry: one entry's
    payload altered (its digest no longer matches), another's overwritten by a third, valid
    entry of another key (tests/test_cache_integrity.py's entries bound to their keys; one run
    for both, each run paying the torch and ExecuTorch imports)."""
    # Preprocess blobs (memo entries, `<key>.<kind>`, are not what a partition's hit reads).
    entry, poisoned, other = [p for p in blob_files(basic_cache) if "." not in p.name][:3]
    data = bytearray(entry.read_bytes())
    data[-1] ^= 0xFF  # the payload's last byte: the header's digest no longer matches
    entry.write_bytes(bytes(data))
    shutil.copyfile(other, poisoned)
    run = rebuild(basic, basic_cache)
    return CorruptRun(run, entry, entry.read_bytes() if entry.is_file() else b"")


def test_basic_build_writes_every_target(cold: Run, cold_basic: Path) -> None:
    document = assert_built(cold, cold_basic, BASIC_TARGETS)
    assert document["config"] == str(cold_basic / "pyproject.toml")
    assert sorted(p.name for p in (cold_basic / "build").glob("*.pte")) == sorted(
        f"{name}.pte" for name in BASIC_TARGETS
    )
    for target in document["targets"]:
        assert target["cache"]["misses"] > 0, target
        assert target["cache"]["hits"] == 0, target


def test_basic_method_reports_are_consistent(cold: Run) -> None:
    targets = by_name(cold.json())
    assert list(targets["two_methods"]["methods"]) == ["encode", "decode"]
    for target in targets.values():
        assert target["methods"], target["name"]
        for method in target["methods"].values():
            for key in ("delegated_nodes", "non_delegated_nodes", "subgraphs"):
                assert isinstance(method[key], int) and method[key] >= 0, (key, method)
            ops, delegated = method["ops"], method["ops_delegated"]
            assert 0 < delegated <= ops
            assert method["coverage"] == round(delegated / ops, 4)
            assert ops - delegated == len(method["not_delegated"])
            assert method["subgraphs"] == len(method["partitions"])
            assert delegated == sum(p["ops"] for p in method["partitions"])
            assert delegated == sum(b["ops"] for b in method["backends"].values())
            assert method["delegated_nodes"] >= delegated


def test_each_method_says_which_way_its_edge_generation_ran(cold: Run) -> None:
    """`--json` names the path per method: two methods are one call of edge generation that
    the regional argument does not cover, so both went stock's way, with the gate's words."""
    targets = by_name(cold.json())
    paths = {
        (name, method): report["edge_generation"]
        for name, target in targets.items()
        for method, report in target["methods"].items()
    }
    encode, decode = paths["two_methods", "encode"], paths["two_methods", "decode"]
    assert encode == decode and encode["path"] == "stock" and encode["reason"], encode
    assert encode["words"] == f"stock ({encode['reason']})"
    # None of basic's models has two layers of one structure: each one's gate is named.
    assert all(p["path"] == "stock" and p["reason"] for p in paths.values()), paths


def test_fully_delegated_target(cold: Run) -> None:
    [method] = by_name(cold.json())["tiny_linear"]["methods"].values()
    assert method["coverage"] == 1.0
    assert method["not_delegated"] == []
    assert method["backends"] == {"XNNPACK": {"ops": method["ops"], "partitions": 1}}


def test_refused_ops_are_reported_with_reason_and_line(cold: Run, cold_basic: Path) -> None:
    marks = line_marks(cold_basic)
    [method] = by_name(cold.json())["refused"]["methods"].values()
    assert method["subgraphs"] == 2
    assert method["coverage"] < 1.0
    refused = {op["op"]: op for op in method["not_delegated"]}
    assert set(refused) == {"aten.pow.Tensor_Scalar", "aten.cumsum.default"}

    power = refused["aten.pow.Tensor_Scalar"]
    assert (power["file"], power["line"]) == marks["refused.pow"]
    assert power["reason"] == "only support power == 2, got 3"

    cumsum = refused["aten.cumsum.default"]
    assert (cumsum["file"], cumsum["line"]) == marks["refused.cumsum"]
    assert cumsum["reason"] == "no XNNPACK support for aten.cumsum.default"


def test_second_build_is_served_from_the_cache(cold: Run, warm: Run, basic: Path) -> None:
    document = assert_built(warm, basic, BASIC_TARGETS)
    assert shas(document) == shas(cold.json())
    for target in document["targets"]:
        assert target["cache"]["hits"] > 0, target
        assert target["cache"]["misses"] == 0, target
        for method in target["methods"].values():
            assert {p["cache"] for p in method["partitions"]} == {"hit"}, target["name"]


def test_unchanged_build_is_up_to_date(warm: Run, unchanged: Run, basic: Path) -> None:
    document = assert_built(unchanged, basic, BASIC_TARGETS)
    assert shas(document) == shas(warm.json())
    assert {t["reused"] for t in document["targets"]} == {"up-to-date"}
    assert (
        without_timing(document)["targets"][0]["methods"]
        == without_timing(warm.json())["targets"][0]["methods"]
    )


def test_jobs_2_gives_the_same_report(warm: Run, parallel: Run, basic: Path) -> None:
    assert_built(parallel, basic, BASIC_TARGETS)
    assert without_timing(parallel.json()) == without_timing(warm.json())


def test_corrupt_cache_entry_is_rebuilt(
    cold: Run, after_corruption: CorruptRun, basic: Path
) -> None:
    document = assert_built(after_corruption.run, basic, BASIC_TARGETS)
    assert shas(document) == shas(cold.json())
    assert sum(t["cache"]["misses"] for t in document["targets"]) >= 1
    # The bad entry was replaced by a good one: its stored digest matches its payload again.
    data = after_corruption.entry_after_run
    header = len(MAGIC) + hashlib.sha256().digest_size
    assert data.startswith(MAGIC)
    assert hashlib.sha256(data[header:]).digest() == data[len(MAGIC) : header]


def test_a_poisoned_entry_is_not_served_to_a_build(
    cold: Run, after_corruption: CorruptRun, basic: Path
) -> None:
    """An entry copied over another's (the run's second damage) is a miss, not the other
    partition's blob served: the bytes are the cold build's, and the two damaged entries are
    the run's only misses."""
    document = assert_built(after_corruption.run, basic, BASIC_TARGETS)
    assert shas(document) == shas(cold.json())
    assert sum(t["cache"]["misses"] for t in document["targets"]) == 2
    assert document["warnings"] == []


def test_cache_stats_gc_and_clear(
    after_corruption: CorruptRun, basic: Path, basic_cache: Path
) -> None:
    def entries() -> int:
        run = lowerd(basic, basic_cache, "cache", "stats")
        assert run.returncode == 0, run.log
        assert f"cache:   {basic_cache}" in run.stdout.splitlines(), run.log
        return int(re.search(r"^entries: (\d+)$", run.stdout, re.M)[1])

    stored = len(blob_files(basic_cache))
    assert entries() == stored > 0

    bad = lowerd(basic, basic_cache, "cache", "gc", "--max-size", "banana")
    assert bad.returncode == 2, bad.log
    assert "banana" in bad.stderr and TRACEBACK not in bad.stderr
    assert entries() == stored

    gc = lowerd(basic, basic_cache, "cache", "gc", "--max-size", "0")
    assert gc.returncode == 0, gc.log
    assert gc.stdout.startswith(f"removed {stored} entries"), gc.log
    assert gc.stdout.rstrip().endswith("0 B remain"), gc.log
    assert entries() == 0
    assert blob_files(basic_cache) == []

    clear = lowerd(basic, basic_cache, "cache", "clear")
    assert clear.returncode == 0, clear.log
    assert clear.stdout.startswith("removed 0 entries"), clear.log


def test_cache_commands_do_not_import_torch(basic: Path, tmp_path: Path) -> None:
    for args in (["cache", "stats"], ["cache", "gc", "--max-size", "1G"], ["cache", "clear"]):
        run = lowerd_without_torch(basic, tmp_path / "cache", *args)
        assert run.returncode == 0, run.log


def test_build_one_named_target(cold: Run, named_build: SharedBuild) -> None:
    """Built alone, in another folder, with no cache at all (conftest.py's named_build, whose
    cache folder is a file: tests/test_cache_integrity.py reads the run's warning rather than
    pay the imports of a run of its own): only its .pte, the same bytes as in the full build."""
    project, run = named_build.root, named_build.run
    document = assert_built(run, project, ["tiny_linear"])
    assert [p.name for p in (project / "build").glob("*.pte")] == ["tiny_linear.pte"]
    assert shas(document) == {"tiny_linear": shas(cold.json())["tiny_linear"]}


# examples/: the demo project ------------------------------------------------------------------


@pytest.fixture(scope="module")
def examples(examples_build: SharedBuild) -> tuple[Path, Run]:
    return examples_build.root, examples_build.run


def test_examples_build(examples: tuple[Path, Run]) -> None:
    project, run = examples
    document = assert_built(run, project, EXAMPLE_TARGETS)
    targets = by_name(document)
    assert list(targets["encoder_decoder"]["methods"]) == ["encode", "decode"]

    [transformer] = targets["transformer"]["methods"].values()
    refused = transformer["not_delegated"]
    assert refused, transformer
    for op in refused:
        assert op["file"].startswith("models/"), op
        assert (project / op["file"]).is_file(), op
        assert isinstance(op["line"], int) and op["line"] > 0, op
        assert op["reason"], op


def test_examples_options_are_shown_and_equal_the_stock_script(examples: tuple[Path, Run]) -> None:
    """cnn_int8 and cnn_per_op show what they declare in --json; cnn_per_op's .pte is the one
    the stock script with the same XnnpackPartitioner and ExecutorchBackendConfig writes."""
    project, run = examples
    targets = by_name(run.json())
    assert targets["cnn_int8"]["quantize"] == "xnnpack-int8"
    per_op = targets["cnn_per_op"]
    assert per_op["backend_options"] == {"xnnpack": {"per_op_mode": True}}
    assert per_op["options"] == {"executorch_backend_config": {"extract_delegate_segments": False}}
    for name in ("cnn", "transformer", "encoder_decoder", "dynamic_mlp"):
        assert targets[name]["backend_options"] == {} and targets[name]["options"] == {}, name
        assert targets[name]["quantize"] is None, name

    # The stock script's bytes are only compared by their digest: tests/known_stock.py's table
    # has it for these model files and library versions (any other input lowers it live).
    stock = known_or_live(
        "examples-cnn-per-op-script",
        files_digest(project / "models"),
        lambda: _stock_per_op(project),
    )
    assert per_op["sha256"] == stock
    assert per_op["sha256"] != targets["cnn"]["sha256"]


def _stock_per_op(project: Path) -> str:
    """sha256 of the stock script's .pte of examples/' CNN: XnnpackPartitioner(per_op_mode=True)
    and ExecutorchBackendConfig(extract_delegate_segments=False), as cnn_per_op declares."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

    saved_path = list(sys.path)
    try:
        module, args = call_entry(project, "models/cnn.py:make")
    finally:
        sys.path[:] = saved_path
        forget_project_modules(project)
    edge = to_edge_transform_and_lower(
        {"forward": torch.export.export(module, args)},
        partitioner=[XnnpackPartitioner(per_op_mode=True)],
    )
    stock = edge.to_executorch(ExecutorchBackendConfig(extract_delegate_segments=False))
    return hashlib.sha256(bytes(stock.buffer)).hexdigest()


def test_verbose_names_each_method_s_edge_generation_path(
    after_corruption: CorruptRun, basic: Path, basic_cache: Path
) -> None:
    """`lowerd build --verbose` says under each method which way its edge generation ran, as the
    build record keeps it (answered up to date, without torch)."""
    recorded = by_name(after_corruption.run.json())["two_methods"]["methods"]
    run = lowerd_without_torch(basic, basic_cache, "build", "--verbose", "two_methods")
    assert run.returncode == 0, run.log
    lines = run.stdout.splitlines()
    for method, report in recorded.items():
        at = lines.index(f"  {method}: {report['summary']}")
        assert lines[at + 1] == f"    edge generation: {report['edge_generation']['words']}"
    quiet = lowerd_without_torch(basic, basic_cache, "build", "two_methods")
    assert quiet.returncode == 0 and "edge generation" not in quiet.stdout, quiet.log
