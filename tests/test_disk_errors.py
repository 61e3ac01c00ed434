"""Disks that refuse lowerd's files: one line at the config key whose folder it is, a JSON
document, never a traceback or a `worker-crash` blamed on the entry function.

Each case is a real refusal by the kernel, never a patched function:

- a .pte path that is a folder (EISDIR) and a `.lowerd` that is a file (EEXIST/ENOTDIR), made
  with plain files;
- a file size limit (RLIMIT_FSIZE, EFBIG; SIGXFSZ ignored), which needs no privilege, on the
  cache's writes (ExecuTorch's own temp files would hit it in a build);
- a full disk (ENOSPC) and a read-only one (EROFS): tiny tmpfs, mounted in a user and mount
  namespace of the build's own (`unshare --user --map-root-user --mount`), where an unprivileged
  user is root over its own mounts. chmod cannot stand for these: root (CI runs as root) writes
  through any mode. Skipped, and said, only where the kernel allows no such namespace.

Builds of tests/projects/basic's tiny_linear: in this process for the plain cases, as a
`lowerd build --json` under `unshare` for the mounted ones (one run: a read-only out_dir and a
full cache).
"""

from __future__ import annotations

import json
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from lsprotocol.types import DiagnosticSeverity

from lowerd.cache.store import BlobStore
from lowerd.daemon.diagnostics import build_warning_diagnostics
from lowerd.lowering.build import build_target
from lowerd.project.batch import Batch
from lowerd.project.build_state import state_path
from lowerd.project.config import ProjectConfig, TargetConfig, load_config
from lowerd.project.result import CacheSummary, TargetResult

from helpers import ONE_TARGET, OUT_DIR_LINE, PROJECTS, RUN_DEADLINE, TRACEBACK, lowerd, lowerd_env
from stock import importable_copy
from testkit.projects import copy_project

TINY_TMPFS = "size=16k"  # room for a folder or two, never for a .pte or a cache entry


@dataclass(frozen=True)
class Project:
    root: Path
    config: ProjectConfig
    target: TargetConfig
    cache: Path

    @property
    def output(self) -> Path:
        return self.config.output_path(self.target.name)

    def build(self, store: BlobStore | None = None) -> TargetResult:
        """A build that writes (reuse off: an unchanged program would keep the .pte)."""
        store = store or BlobStore(self.cache)
        return build_target(self.config, self.target, store, reuse=False)

    def restore(self) -> None:
        """The out_dir as a good build leaves it."""
        shutil.rmtree(self.root / "build", ignore_errors=True)
        (self.root / "build").unlink(missing_ok=True)
        assert self.build().status == "ok"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    """tiny_linear, built once (its cache filled), shared by the module's tests."""
    folder = tmp_path_factory.mktemp("disk")
    with importable_copy(PROJECTS / "basic", folder / "basic") as root:
        (root / "pyproject.toml").write_text(ONE_TARGET)
        config = load_config(root / "pyproject.toml")
        built = Project(root, config, config.targets["tiny_linear"], folder / "cache")
        assert built.build().status == "ok"
        yield built


def assert_out_dir_error(result: TargetResult, message: str) -> None:
    """One error of the project's folder, at the out_dir line; the failed target has no .pte."""
    assert result.status == "error" and result.error is not None, result
    error = result.error
    assert (error.kind, error.file, error.line) == ("output-error", "pyproject.toml", OUT_DIR_LINE)
    assert error.message == message, error.message
    assert result.output is None


# Broken folders, in this process --------------------------------------------------------------


def test_a_pte_path_that_is_a_folder_is_an_error_at_out_dir(project: Project) -> None:
    project.output.unlink()
    project.output.mkdir()
    try:
        failed = project.build()  # raised IsADirectoryError out of the build: a worker-crash
        assert_out_dir_error(failed, "out_dir: cannot write build/tiny_linear.pte: Is a directory")
        assert state_path(project.config, project.target).exists() is False
    finally:
        project.restore()


def built_without_its_record(project: Project) -> tuple[TargetResult, list[str]]:
    """A `lowerd build` of the target as the CLI runs it (the record read first, then the build,
    then the document): its result and the document's warnings."""
    batch = Batch(project.config, [project.target], use_cache=True)
    batch.answer_up_to_date()
    assert batch.stale == [project.target]  # what is there is no record: the target rebuilds
    project.output.unlink()
    batch.results[project.target.name] = result = project.build()
    document, outcome = batch.outcome()
    assert outcome == "ok", document
    assert project.output.is_file()  # written, and kept
    return result, document["warnings"]


NOT_WRITTEN = (
    f"pyproject.toml:{OUT_DIR_LINE}: out_dir: cannot write build record "
    "build/.lowerd/tiny_linear.msgpack: {reason}; tiny_linear's .pte is written, its next build "
    "rebuilds"
)


def test_a_build_record_that_is_a_folder_rebuilds_writes_the_pte_and_says_so(
    project: Project,
) -> None:
    """Issue 32 §12: the build said it rebuilds, then failed (exit 1, no .pte)."""
    record = state_path(project.config, project.target)
    record.unlink()
    (record / "inside").mkdir(parents=True)  # not lowerd's to remove
    try:
        result, warnings = built_without_its_record(project)
        assert result.ok and result.sha256 is not None, result.error
        said = NOT_WRITTEN.format(reason="Is a directory")
        assert result.warnings == (said,)
        ignored = "tiny_linear: build record ignored (a folder, not a regular file)"
        assert warnings == [f"{ignored}; the target rebuilds", said]
        assert (record / "inside").is_dir()
        # The editor shows it too: a Warning at out_dir's line, once however many builds said it.
        shown = build_warning_diagnostics([result, result], project.config)
        [diagnostic] = shown[project.config.path]
        assert diagnostic.range.start.line == OUT_DIR_LINE - 1
        assert diagnostic.severity == DiagnosticSeverity.Warning
        assert diagnostic.message == said.removeprefix(f"pyproject.toml:{OUT_DIR_LINE}: ")
        assert diagnostic.message.startswith("out_dir: cannot write build record")
        assert build_warning_diagnostics([replace(result, warnings=None)], project.config) == {}
    finally:
        shutil.rmtree(record)
        project.restore()


def test_a_lowerd_folder_that_is_a_file_builds_and_says_so_every_build(
    project: Project,
) -> None:
    records = state_path(project.config, project.target).parent
    shutil.rmtree(records)
    records.write_text("not a folder")
    try:
        for _ in range(2):  # the next build meets the same file: the same line, no traceback
            result, warnings = built_without_its_record(project)
            said = NOT_WRITTEN.format(reason="File exists")
            assert result.ok and result.warnings == (said,), result.error
            assert warnings[-1] == said
        assert records.read_text() == "not a folder"
    finally:
        records.unlink()
        project.restore()


def test_a_cache_that_stores_nothing_says_so_in_one_line(tmp_path: Path) -> None:
    """RLIMIT_FSIZE (no privilege needed): every entry's write fails with EFBIG, as each would
    with ENOSPC on a full disk; one line says how many, not one per entry."""
    store = BlobStore(tmp_path / "cache")
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (1024, limits[1]))
    try:
        stored = [store.put(f"{n:064x}", b"x" * 4096) for n in range(3)]
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, previous)
    assert stored == [False] * 3
    assert store.warnings() == [f"cache: 3 entries not stored in {store.root} (File too large)"]


def test_a_disk_that_refuses_executorchs_temp_files_is_said_without_a_line(
    project: Project,
) -> None:
    """RLIMIT_FSIZE fails flatc's temporary files (the serialized program, KBs) as a full temp
    folder would: not the entry function's fault, and not blamed on its line."""
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (2048, limits[1]))
    try:
        failed = project.build(BlobStore(project.cache.parent / "unused-cache"))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, previous)
    try:
        error = failed.error
        assert error is not None and (error.file, error.line) == (None, None), error
        assert error.message.startswith("ExecuTorch lowering failed: the disk refused "), error
        assert error.message.endswith(": File too large (TMPDIR chooses the folder)"), error
    finally:
        project.restore()


@pytest.mark.parametrize("chosen_by", ["cache_dir", "LOWERD_CACHE_DIR"])
def test_the_targets_cache_lines_are_said_once_at_the_cache_dir_line(
    chosen_by: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two targets whose workers met the same full cache: one warning, at the cache_dir key
    when the config chose the folder."""
    root = copy_project(PROJECTS / "basic", tmp_path / "basic")
    config_path = root / "pyproject.toml"
    text = config_path.read_text().replace(
        'out_dir = "build"\n', 'out_dir = "build"\ncache_dir = "c"\n'
    )
    config_path.write_text(text)
    if chosen_by == "cache_dir":
        monkeypatch.delenv("LOWERD_CACHE_DIR", raising=False)
    else:
        monkeypatch.setenv("LOWERD_CACHE_DIR", str(tmp_path / "env-cache"))
    full = f"cache: 2 entries not stored in {root / 'c'} (No space left on device)"
    batch = Batch.load(config_path, ["tiny_linear", "refused"], use_cache=True)
    for name in ("tiny_linear", "refused"):
        failed = TargetResult.failed(name, "output-error", "out_dir: cannot write")
        batch.results[name] = replace(failed, cache=CacheSummary(problems=(full,)))
    document, outcome = batch.outcome()
    cache_dir_line = text.splitlines().index('cache_dir = "c"') + 1
    said = {
        "cache_dir": f"pyproject.toml:{cache_dir_line}: cache_dir: {full.removeprefix('cache: ')}",
        "LOWERD_CACHE_DIR": full,
    }
    assert (document["warnings"], outcome) == ([said[chosen_by]], "target_failed")


# report --html --------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["missing/page.html", "folder"])
def test_report_html_that_cannot_be_written_is_one_line_and_exit_2(
    project: Project, where: str
) -> None:
    (project.root / "folder").mkdir(exist_ok=True)
    run = lowerd(project.root, project.cache, "report", "--html", where)
    reason = {"folder": "Is a directory", "missing/page.html": "No such file or directory"}
    assert run.returncode == 2, run.log  # a usage error (docs/cli.md)
    assert run.stderr == f"lowerd: --html {where}: cannot write: {reason[where]}\n", run.log
    assert run.stdout == ""


# A read-only out_dir and a full cache, in a namespace of the build's own -----------------------

# Makes `$1` (out_dir, as the last build left it) read-only, and `$2` (the cache) a full tiny
# tmpfs, then runs the command.
MOUNTED = f"""\
set -e
out=$1 cache=$2; shift 2
mount --bind "$out" "$out"
mount -o remount,bind,ro "$out"
mount -t tmpfs -o {TINY_TMPFS} tmpfs "$cache"
head -c 1M /dev/zero > "$cache/fill" 2>/dev/null || true
exec "$@"
"""


def namespaces_available() -> bool:
    probe = ["unshare", "--user", "--map-root-user", "--mount", "true"]
    try:
        return subprocess.run(probe, capture_output=True, check=False, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(
    not namespaces_available(),
    reason="no user and mount namespaces here: a full or read-only disk cannot be made "
    "without root (chmod does not stop root)",
)
def test_a_read_only_out_dir_and_a_full_cache_are_one_line_each_and_a_document(
    project: Project,
) -> None:
    """EROFS on the .pte, ENOSPC on every cache entry: the same write paths a full out_dir or a
    read-only cache take. Before, the first was a `worker-crash` with a traceback and no
    document, and the second was not said at all. The model changed (other weights): the
    earlier .pte, which the read-only folder keeps, is named as no longer current."""
    out, cache = project.root / "build", project.cache.parent / "full-cache"
    cache.mkdir()
    model = project.root / "models" / "tiny_linear.py"
    original = model.read_text()
    model.write_text(original.replace("manual_seed(0)", "manual_seed(1)"))
    namespace = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", MOUNTED, "sh"]
    try:
        done = subprocess.run(
            [*namespace, str(out), str(cache), sys.executable, "-m", "lowerd", "build", "--json"],
            cwd=project.root,
            env=lowerd_env(cache),
            capture_output=True,
            text=True,
            timeout=RUN_DEADLINE,
            check=False,
        )
    finally:
        model.write_text(original)
    assert done.returncode == 1, done.stderr
    document = json.loads(done.stdout)  # stdout is still one document
    [target] = document["targets"]
    error = target["error"]
    assert (error["kind"], error["file"], error["line"]) == (
        "output-error",
        "pyproject.toml",
        OUT_DIR_LINE,
    )
    message = (
        "out_dir: cannot write build/tiny_linear.pte: Read-only file system (the earlier "
        "build/tiny_linear.pte could not be removed, and no longer matches the sources)"
    )
    assert error["message"] == message, error
    assert project.output.is_file()
    [warning] = document["warnings"]  # said once, however many entries failed
    assert warning.startswith("cache: ") and warning.endswith(
        f"not stored in {cache} (No space left on device)"
    ), warning
    assert TRACEBACK not in done.stderr and "worker-crash" not in done.stdout, done.stderr
