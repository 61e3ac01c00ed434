"""Issue 25 §3: build records are untrusted input. A record that is not a build record's shape,
not a regular file, or too big is "no record" (the target rebuilds; one line says why) in
`report`, `explain`, `report --html` and `build`, and reading one never blocks; an output edited
with its size and mtime put back is out of date; what `--json` and the pages say of a record
is escaped wherever it is rendered; a model file whose name holds `"` keeps its ops' lines.

One build of a tiny model (its file named with a quote) serves the module; each case writes a
record over the good one's bytes and puts them back after."""

from __future__ import annotations

import copy
import html
import os
import threading
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import msgpack
import pytest

from lowerd.cli.report_command import run_report
from lowerd.lowering.build import build_target
from lowerd.project.batch import Batch
from lowerd.project.build_state import (
    MAX_RECORD_BYTES,
    discard_output,
    load_state,
    read_state,
    state_path,
    up_to_date_report,
    why_out_of_date,
)
from lowerd.project.config import ProjectConfig, TargetConfig, load_config
from lowerd.project.explain import explain_target
from lowerd.project.method_graph import CPU, GraphNode, MethodGraph
from lowerd.project.report_model import NotDelegatedOp
from lowerd.project.report_page import TargetPage, render_page
from lowerd.project.result import TargetResult
from lowerd.project.wire import decode, encode

from helpers import DEADLINE, PROJECTS
from stock import importable_copy

QUOTED = 're"fused.py'  # a model file whose name holds a quote
TARGET = f"""
[tool.lowerd.targets.quoted]
entry = 'models/{QUOTED}:make'
"""
HOSTILE = '"><img src=x onerror=alert(1)>'


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ProjectConfig, bytes]]:
    """basic/'s refused model (two ops left on the CPU) as `models/re"fused.py`, built once;
    the config and its record's bytes."""
    with importable_copy(PROJECTS / "basic", tmp_path_factory.mktemp("records") / "p") as root:
        (root / "models" / "refused.py").rename(root / "models" / QUOTED)
        pyproject = root / "pyproject.toml"
        pyproject.write_text(pyproject.read_text() + TARGET)
        config = load_config(pyproject)
        result = build_target(config, config.targets["quoted"], None)
        assert result.ok, result.error
        yield config, state_path(config, config.targets["quoted"]).read_bytes()


@pytest.fixture
def project(built: tuple[ProjectConfig, bytes]) -> Iterator[ProjectConfig]:
    """The built project; its record as built again once the test is done."""
    config, record = built
    yield config
    path = state_path(config, config.targets["quoted"])
    if path.is_dir() and not path.is_symlink():
        path.rmdir()
    path.unlink(missing_ok=True)
    path.write_bytes(record)


def target(config: ProjectConfig) -> TargetConfig:
    return config.targets["quoted"]


def edited(record: bytes, change: Callable[[dict[str, Any]], None]) -> bytes:
    raw = copy.deepcopy(msgpack.unpackb(record, raw=False))
    change(raw)
    return msgpack.packb(raw, use_bin_type=True)


def setting(*path: Any) -> Callable[[dict[str, Any]], None]:
    """A change that sets the value at `path` (its last item) in the record's map."""

    def change(raw: dict[str, Any]) -> None:
        place = raw
        for key in path[:-2]:
            place = place[key]
        place[path[-2]] = path[-1]

    return change


MALFORMED: dict[str, Callable[[bytes], bytes]] = {
    "a msgpack int": lambda _: msgpack.packb(5),
    "a msgpack list": lambda _: msgpack.packb([1, 2]),
    "not msgpack": lambda _: b"\xc1garbage",
    "partitions of strings": lambda r: edited(r, setting("state", "rebuild", "partitions", ["x"])),
    "a source without a path": lambda r: edited(
        r, lambda raw: raw["state"]["sources"][0].__setitem__("path", None)
    ),
    "a report that is a list": lambda r: edited(r, setting("state", "report", [])),
    "a node line of one item": lambda r: edited(
        r, setting("state", "method_lines", {"forward": [["models/x.py"]]})
    ),
    "a partition source of two items": lambda r: edited(
        r,
        lambda raw: raw["state"]["report"]["methods"]["forward"]["partitions"][0].__setitem__(
            "sources", [["a.py", 1]]
        ),
    ),
    "a graph edge to nowhere": lambda r: edited(
        r,
        lambda raw: raw["state"]["report"]["methods"]["forward"]["graph"].__setitem__(
            "edges", [[-100, 0]]
        ),
    ),
    "a report sha256 not the output's": lambda r: edited(
        r, setting("state", "report", "sha256", "0" * 64)
    ),
    "another target's record": lambda r: edited(r, setting("state", "target", "other")),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_record_is_no_record_with_a_reason(
    project: ProjectConfig, case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = state_path(project, target(project))
    path.write_bytes(MALFORMED[case](path.read_bytes()))
    read = read_state(project, target(project))
    assert read.state is None and read.refused, case
    assert_said_everywhere(project, read.refused, tmp_path, capsys)


def assert_said_everywhere(
    config: ProjectConfig, why: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`report`, `report --json`, `report --html` and `explain` take the record for none and
    say why in one line; a build's batch says it in its warnings and builds the target."""
    config_path = str(config.path)
    assert run_report(config_path, ["quoted"], None, as_json=False) == 1
    assert run_report(config_path, ["quoted"], None, as_json=True) == 1
    page = tmp_path / "report.html"
    assert run_report(config_path, ["quoted"], str(page), as_json=False) == 1
    said = capsys.readouterr().err.splitlines()
    line = f"lowerd: quoted: build record ignored ({why}); the target rebuilds"
    assert said == [line] * 3
    assert html.escape(why) in page.read_text()
    explained = explain_target(config, target(config))
    assert explained.status == "no build record" and explained.refused == why
    assert explained.lines == [f"quoted: build record ignored ({why}); the target rebuilds"]
    batch = Batch(config, [target(config)], use_cache=True)
    batch.answer_up_to_date()
    assert batch.stale == [target(config)]  # it builds
    assert batch.refused == [f"quoted: build record ignored ({why}); the target rebuilds"]


@pytest.mark.parametrize("kind", ["a directory", "a FIFO", "a link to /dev/zero", "a huge file"])
def test_a_record_that_is_not_a_regular_file_is_refused_without_blocking(
    project: ProjectConfig, kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = state_path(project, target(project))
    path.unlink()
    if kind == "a directory":
        path.mkdir()
    elif kind == "a FIFO":
        os.mkfifo(path)
    elif kind == "a link to /dev/zero":
        path.symlink_to("/dev/zero")
    else:
        with path.open("wb") as file:
            file.truncate(MAX_RECORD_BYTES + 1)  # sparse: no disk taken
    read = read_without_blocking(project, path)
    assert read.state is None and read.refused
    expected = {
        "a directory": "a folder, not a regular file",
        "a FIFO": "a FIFO, not a regular file",
        "a link to /dev/zero": "a character device, not a regular file",
        "a huge file": f"{MAX_RECORD_BYTES + 1} bytes, over the {MAX_RECORD_BYTES}-byte limit",
    }
    assert read.refused == expected[kind]
    assert_said_everywhere(project, read.refused, tmp_path, capsys)


def read_without_blocking(config: ProjectConfig, path: Path) -> Any:
    """read_state in a thread, which must end by the deadline; a reader blocked on a FIFO is
    let go (a writer opens and closes it) before the test fails."""
    reads: list[Any] = []
    reader = threading.Thread(target=lambda: reads.append(read_state(config, target(config))))
    reader.start()
    reader.join(DEADLINE)
    if reader.is_alive():
        with path.open("wb"):
            pass
        reader.join()
        pytest.fail(f"reading the record {path} blocked")
    return reads[0]


def test_a_build_over_a_fifo_record_rebuilds_and_says_so(project: ProjectConfig) -> None:
    path = state_path(project, target(project))
    path.unlink()
    os.mkfifo(path)
    batch = Batch(project, [target(project)], use_cache=True)
    batch.answer_up_to_date()
    result = build_target(project, target(project), None)
    assert result.ok, result.error
    batch.results["quoted"] = result
    document, outcome = batch.outcome()
    assert outcome == "ok"
    assert document["warnings"] == [
        "quoted: build record ignored (a FIFO, not a regular file); the target rebuilds"
    ]
    assert path.is_file() and load_state(project, target(project)) is not None


def test_an_output_edited_with_its_size_and_mtime_kept_is_out_of_date(
    project: ProjectConfig,
) -> None:
    state = load_state(project, target(project))
    assert state is not None and why_out_of_date(project, target(project), state) is None
    pte = Path(state.output.path)
    original, stat = pte.read_bytes(), pte.stat()
    try:
        pte.write_bytes(original[:-1] + bytes([original[-1] ^ 0xFF]))  # same size
        os.utime(pte, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # its mtime put back
        assert why_out_of_date(project, target(project), state) == "output missing or modified"
        assert up_to_date_report(project, target(project)) is None  # no stale digest in --json
    finally:
        pte.write_bytes(original)
        os.utime(pte, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    # The same bytes back: the content decides, and it is the record's.
    assert why_out_of_date(project, target(project), state) is None
    answered = up_to_date_report(project, target(project))
    assert answered is not None and answered.sha256 == state.output.sha256


def test_a_model_file_named_with_a_quote_keeps_its_ops_source_lines(
    project: ProjectConfig,
) -> None:
    state = load_state(project, target(project))
    assert state is not None
    ops = state.report.methods["forward"].not_delegated
    assert ops and all(op.file == f"models/{QUOTED}" and op.line for op in ops)


class Elements(HTMLParser):
    """Every element and attribute name of a page, and the text of its scripts."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attributes: set[str] = set()
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attributes.update(name for name, _ in attrs)
        self._in_script = tag == "script"

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts.append(data)
            self._in_script = False


def forged(result: TargetResult) -> TargetResult:
    """The build's result with every string a record may carry into the page made hostile."""
    report = copy.deepcopy(result.methods["forward"])
    report.not_delegated = [
        NotDelegatedOp(HOSTILE, HOSTILE, 7, HOSTILE, HOSTILE, module_path=HOSTILE)
    ]
    report.graph = MethodGraph([GraphNode(HOSTILE, 0), GraphNode(HOSTILE, CPU, HOSTILE)], [(0, 1)])
    document = encode(result)
    document.update(output=HOSTILE, sha256=HOSTILE, methods={HOSTILE: encode(report)})
    return decode(TargetResult, document)


@pytest.mark.parametrize("use_dot", [False, True])
def test_the_html_report_escapes_every_value_of_a_record(
    project: ProjectConfig, use_dot: bool
) -> None:
    state = load_state(project, target(project))
    assert state is not None
    page = TargetPage(HOSTILE, forged(state.report), stale=HOSTILE, recorded=HOSTILE)
    missing = TargetPage("gone", None, refused=HOSTILE)
    text = render_page(HOSTILE, project.root / HOSTILE, [page, missing], use_dot=use_dot)
    parsed = Elements()
    parsed.feed(text)
    assert "img" not in parsed.tags
    assert not [name for name in parsed.attributes if name.startswith("on")]
    assert len(parsed.scripts) == 1  # the page's own


def test_a_failed_build_removes_no_file_a_record_names_outside_its_outputs(
    project: ProjectConfig, tmp_path: Path
) -> None:
    victim = tmp_path / "precious.ptd"
    victim.write_bytes(b"the user's")
    path = state_path(project, target(project))
    stamp = {"path": str(victim), "size": 10, "mtime_ns": 0, "sha256": "0" * 64}
    reported = {"path": str(victim), "sha256": "0" * 64, "kind": "ptd"}

    def naming_the_victim(raw: dict[str, Any]) -> None:
        raw["state"]["data_files"] = [stamp]
        raw["state"]["report"]["data_files"] = [reported]

    path.write_bytes(edited(path.read_bytes(), naming_the_victim))
    assert load_state(project, target(project)) is not None  # a record that agrees with itself
    pte = project.output_path("quoted")
    original = pte.read_bytes()
    try:
        discard_output(project, target(project))  # what a failed build does
        assert victim.read_bytes() == b"the user's"
    finally:
        pte.write_bytes(original)
