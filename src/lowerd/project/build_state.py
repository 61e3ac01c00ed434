"""What a target's last successful build read and wrote, so an unchanged target is not rebuilt.

Like make and ninja: stat every recorded input first and hash only those whose size or mtime
moved. Nothing here imports torch or executorch: answering "up to date" must cost milliseconds,
not the ~6 s import.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import msgpack

from lowerd.cache.atomic import write_atomic
from lowerd.cache.regular_file import read_regular_file_and_status
from lowerd.project.backends import backend_by_details_class
from lowerd.project.config import ProjectConfig, TargetConfig
from lowerd.project.library_stamp import LibraryStamp
from lowerd.project.rebuild_record import INPUTS_CHANGED, RebuildRecord
from lowerd.project.record_check import RecordRefused, inconsistency, source_lines_problem
from lowerd.project.result import TargetResult
from lowerd.project.source_tokens import SourceTokens
from lowerd.project.verification import VerifySettings
from lowerd.project.wire import WireError, decode, encode, wire_field

# The build record's format. Bump it when a record this lowerd writes would be misread by the
# last version's reader, or one that reader wrote by this one (a field renamed, removed or given
# another meaning), and say in read_record how the previous version reads: migrated, or None
# (rebuilt). A field added with a default needs no bump: an older record reads with the default.
# 2: checked whole by project/wire.py (a record of version 1 was read leniently).
STATE_VERSION = 2
STATE_DIR = ".lowerd"
# The tag ExecuTorch's external_constants_pass gives every constant it moves out of the .pte.
DEFAULT_EXTERNAL_TAG = "_default_external_constant"
# A record is read whole into memory: one larger than this is no record lowerd wrote (a big
# model's, its report and node lines included, is a few MB).
MAX_RECORD_BYTES = 64 * 1024 * 1024


@dataclass
class FileStamp:
    """One input or output file: cheap stat fields, and the digest that decides when they moved.

    Size and mtime alone miss an edit that keeps the size and puts the mtime back (`touch -d`,
    a tool that restores it): ctime and the inode are also compared, which no user call sets.
    They are None in an older lowerd's records: then the content decides each time."""

    path: str
    size: int
    mtime_ns: int
    sha256: str
    ctime_ns: int | None = field(default=None, metadata=wire_field(omit_none=True))
    inode: int | None = field(default=None, metadata=wire_field(omit_none=True))

    @classmethod
    def of(cls, path: Path, sha256: str | None = None) -> FileStamp:
        """The file's stamp; `sha256` when its writer already hashed the bytes it wrote."""
        status = path.stat()
        digest = sha256 or file_digest(path)
        return cls(
            str(path),
            status.st_size,
            status.st_mtime_ns,
            digest,
            status.st_ctime_ns,
            status.st_ino,
        )

    def unchanged(self) -> bool:
        try:
            status = os.stat(self.path)
        except OSError:
            return False
        if not stat.S_ISREG(status.st_mode) or status.st_size != self.size:
            return False
        now = (status.st_mtime_ns, status.st_ctime_ns, status.st_ino)
        if now == (self.mtime_ns, self.ctime_ns, self.inode):
            return True
        # Touched (git checkout, an editor's save-without-change), or modified with its size and
        # mtime kept: the content decides.
        return file_digest(Path(self.path)) == self.sha256


@dataclass
class TargetState:
    target: str
    inputs_digest: str  # the target's config and the tool versions: see target_inputs_digest
    sources: list[FileStamp]
    output: FileStamp
    # The parts of inputs_digest (target_inputs), so that the next build can say which changed.
    inputs: dict[str, str] = field(default_factory=dict)
    # path -> a CRC-32 per line of each text source, so the next build can say which lines changed.
    source_lines: dict[str, list[int]] = field(default_factory=dict)
    # Why this build did what it did, for `lowerd explain`; None in an older lowerd's records.
    rebuild: RebuildRecord | None = None
    # method name -> digest of its exported program; lets a re-export skip lowering (issue 3 §2)
    method_digests: dict[str, str] = field(default_factory=dict)
    # method name -> user source line of each exported node, in graph order, to re-map the
    # report's lines after an edit that moves code without changing the program ([file, line], or
    # None for a node without one: lowering/program_fingerprint.py).
    method_lines: dict[str, list[list[Any] | None]] = field(
        default_factory=dict, metadata=wire_field(check=source_lines_problem)
    )
    report: TargetResult = field(kw_only=True)  # the build's result
    # The .ptd and .etrecord files written beside the output (TargetResult.data_files).
    data_files: list[FileStamp] = field(default_factory=list)
    # path -> the token stream of each Python source the build read as code, not as data
    # (project/source_tokens.py): an edit of comments and layout keeps the .pte on it.
    source_tokens: dict[str, SourceTokens] = field(default_factory=dict)
    # The module files imported from outside the project, stamped (project/library_stamp.py);
    # None in records of older lowerds.
    libraries: LibraryStamp | None = None
    # Bytes of RSS the build's worker peaked at: what its next build will need (a Ray task's
    # `memory`). None in records of older lowerds, and until the worker reported it.
    peak_rss: int | None = None
    # method name -> module path -> a short digest of what the module itself decides (its class,
    # code, attributes, parameter shapes: lowering/module_tree.py), so that the next build finds
    # the subtrees an edit changed before it exports (lowering/edited_region.py).
    module_digests: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass
class BuildRecord:
    """A target's build record as its file (.lowerd/<target>.msgpack) holds it, in msgpack: the
    format's version (STATE_VERSION), then the state."""

    version: int
    state: TargetState


def state_path(config: ProjectConfig, target: TargetConfig) -> Path:
    return config.out_dir / STATE_DIR / f"{target.name}.msgpack"


@dataclass(frozen=True)
class RecordRead:
    """What is at a target's record path: its state, or None with `refused` saying why what is
    there is no record to trust (None when there is nothing there); when it was written."""

    state: TargetState | None
    refused: str | None = None
    mtime: float | None = None

    def refusal(self, target: str) -> str | None:
        """The one line that says a record was there and is not taken; None when none was."""
        if self.refused is None:
            return None
        return f"{target}: build record ignored ({self.refused}); the target rebuilds"


def load_state(config: ProjectConfig, target: TargetConfig) -> TargetState | None:
    """The recorded state, or None when there is none or it cannot be trusted (read_state)."""
    return read_state(config, target).state


def read_state(config: ProjectConfig, target: TargetConfig) -> RecordRead:
    """The target's record read as untrusted input: a regular file of at most MAX_RECORD_BYTES,
    opened without blocking, decoded whole by the wire schema and checked for agreement. Anything
    else (damaged, of another version, a FIFO, a device, a directory, a report whose digest is
    not its output's) is no record, with the reason: the target rebuilds, nothing is misread."""
    path = state_path(config, target)
    try:
        data, status = read_regular_file_and_status(path, MAX_RECORD_BYTES)
    except FileNotFoundError:
        return RecordRead(None)
    except OSError as error:
        return RecordRead(None, error.strerror or str(error))
    try:
        state = decode_record(_unpacked(data), target.name)
    except RecordRefused as refused:
        return RecordRead(None, str(refused))
    return RecordRead(state, mtime=status.st_mtime)


def _unpacked(data: bytes) -> Any:
    try:
        return msgpack.unpackb(data, raw=False)
    except (ValueError, TypeError, msgpack.UnpackException) as error:
        raise RecordRefused(f"not msgpack ({type(error).__name__})") from None


def read_record(raw: Any) -> TargetState | None:
    """A record as msgpack gave it back (decode_record), or None."""
    try:
        return decode_record(raw, None)
    except RecordRefused:
        return None


def decode_record(raw: Any, target: str | None) -> TargetState:
    """A record as msgpack gave it back: this version's read whole; the previous one's read as
    its own reader did (migrated_v1). RecordRefused for any other (a newer lowerd's), for one
    not of its version's shape, and for one that contradicts itself or names another target."""
    if not isinstance(raw, dict):
        raise RecordRefused(f"not a build record (a msgpack {type(raw).__name__})")
    if raw.get("version") not in (1, STATE_VERSION):
        raise RecordRefused(f"of another lowerd (format {str(raw.get('version'))[:20]!r})")
    if raw["version"] == 1:
        raw = {**raw, "state": migrated_v1(raw.get("state"))}
    try:
        state = decode(BuildRecord, raw).state
    except WireError as error:
        raise RecordRefused(f"not a build record's shape: {error.problems[0]}") from None
    except (TypeError, ValueError, LookupError, AttributeError, RecursionError) as error:
        raise RecordRefused(f"not a build record's shape ({type(error).__name__})") from None
    problem = inconsistency(state, target)
    if problem is not None:
        raise RecordRefused(problem)
    return state


def migrated_v1(state: Any) -> Any:
    """A version-1 record as this version's: its reader let a `rebuild` it could not read go
    (None), keeping the rest of the record; the fields added while it was version 1 (inputs,
    source_lines, rebuild, data_files, peak_rss) take their defaults when absent, as then."""
    if isinstance(state, dict) and state.get("rebuild") is not None:
        try:
            decode(RebuildRecord, state["rebuild"])
        except WireError:
            state = {**state, "rebuild": None}
    return state


def save_state(config: ProjectConfig, target: TargetConfig, state: TargetState) -> None:
    path = state_path(config, target)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = encode(BuildRecord(STATE_VERSION, state))
    write_atomic(path, msgpack.packb(record, use_bin_type=True))


def remember_peak_rss(config: ProjectConfig, target: TargetConfig, peak_rss: int) -> None:
    """Add the peak RSS its worker reported (after the worker saved it) to the target's record;
    nothing when the build left none (it failed, or a source moved while it ran)."""
    state = load_state(config, target)
    if state is not None:
        state.peak_rss = peak_rss
        save_state(config, target, state)


def forget_state(config: ProjectConfig, target: TargetConfig) -> None:
    state_path(config, target).unlink(missing_ok=True)


def _removed(path: Path) -> bool:
    """Removes a failed target's file, if the disk lets it (a read-only or broken out_dir keeps
    it); False when it is still there."""
    try:
        path.unlink()
    except FileNotFoundError:
        return True
    except OSError:
        try:
            return not stat.S_ISREG(os.lstat(path).st_mode)  # a folder in its place is no output
        except OSError:
            return True
    return True


def discard_output(config: ProjectConfig, target: TargetConfig) -> list[Path]:
    """Remove a failed target's .pte, its data files (.ptd, .etrecord) and build record.

    The last good .pte no longer matches the sources, and a file on disk is taken for current by
    whatever picks it up (an app bundle step, a device push), so a failed target has no output,
    as Bazel deletes an action's stale outputs before it runs. Returns the .pte and data files
    the disk would not let go (a read-only out_dir), for the error to name.
    """
    data_files = owned_data_files(config, target)
    _removed(state_path(config, target))
    outputs = [config.output_path(target.name), *sorted(data_files)]
    return [path for path in outputs if not _removed(path)]


def data_file_path(config: ProjectConfig, target: TargetConfig, kind: str, tag: str = "") -> Path:
    """Where a data file of the target goes, beside its .pte: <target>.etrecord, <target>.bpte
    (the bundled program); <target>.ptd for
    ExecuTorch's default external-constant tag, else <target>.<tag>.ptd. The target's name comes
    first so that two targets in one out_dir never write (or remove) each other's files."""
    if kind in ("etrecord", "bpte"):
        return config.out_dir / f"{target.name}.{kind}"
    if not tag or tag == DEFAULT_EXTERNAL_TAG:
        return config.out_dir / f"{target.name}.ptd"
    return config.out_dir / f"{target.name}.{tag.removesuffix('.ptd')}.ptd"


def owned_data_files(config: ProjectConfig, target: TargetConfig) -> set[Path]:
    """The data files an earlier build of the target may have left: those its record lists and
    the default names (the record may be gone). A recorded path is taken only where the target's
    data files go (beside its .pte, named after it): a record is no licence to remove a file."""
    state = load_state(config, target)
    recorded = {Path(f.path) for f in state.data_files} if state is not None else set()
    recorded = {path for path in recorded if _names_a_data_file(config, target, path)}
    defaults = {data_file_path(config, target, kind) for kind in ("etrecord", "ptd", "bpte")}
    return recorded | defaults


def _names_a_data_file(config: ProjectConfig, target: TargetConfig, path: Path) -> bool:
    return (
        path.parent == config.out_dir
        and path.name.startswith(f"{target.name}.")
        and path.suffix in (".ptd", ".etrecord", ".bpte")
    )


def discard_failed_output(config: ProjectConfig, result: TargetResult) -> None:
    """discard_output for a target result that failed, whoever made it (a build, or the worker
    pool for a build that crashed or timed out). A cancelled build is no verdict on the sources:
    the build that superseded it writes the output."""
    target = config.targets.get(result.name)
    cancelled = result.error is not None and result.error.kind == "cancelled"
    if target is not None and not result.ok and not cancelled:
        discard_output(config, target)


def why_out_of_date(
    config: ProjectConfig, target: TargetConfig, state: TargetState | None
) -> str | None:
    """None when the recorded build still stands; otherwise the first reason it does not."""
    if state is None:
        return "never built"
    if state.inputs_digest != target_inputs_digest(config, target):
        return "configuration or tool versions changed"
    if state.output.path != str(config.output_path(target.name)) or not state.output.unchanged():
        return "output missing or modified"
    for data_file in state.data_files:
        if not data_file.unchanged():
            return f"{data_file.path} missing or modified"
    stamped = {stamp.path for stamp in state.data_files}
    for reported in state.report.data_files:  # without a stamp: its content decides
        if reported.path not in stamped and not _holds(reported.path, reported.sha256):
            return f"{reported.path} missing or modified"
    for source in state.sources:
        if not source.unchanged():
            return f"{source.path} changed"
    return None


def why_not_kept(
    config: ProjectConfig,
    target: TargetConfig,
    previous: TargetState | None,
    digests: dict[str, str] | None,
) -> str | None:
    """None when `previous`'s .pte may be kept for a program whose methods export to `digests`
    (None: the program holds a value with no stable digest); else why not, in words, for
    `lowerd explain`. Here, torch-free, so that a Ray build's client says it of the build its
    node made (cli/ray_outputs.py) as lowering/reuse.py says it of its own."""
    inputs = program_inputs_digest(target_inputs(config, target))
    why = why_program_not_kept(target, previous, digests, inputs)
    if why is None and previous is not None:
        why = why_outputs_not_kept(config, target, previous)
    return why


def why_program_not_kept(
    target: TargetConfig,
    previous: TargetState | None,
    digests: dict[str, str] | None,
    inputs_digest: str,
) -> str | None:
    """why_not_kept's part that reads no file: whether the program and its lowering are the
    last build's (`inputs_digest`: this build's program_inputs_digest)."""
    # An ETRecord holds the programs' source lines, which an edit that keeps the program may
    # move: it is written afresh. Transform passes are the user's code, which the program's
    # digest does not cover: a build that runs them lowers afresh; so are custom partitioners
    # and a whole_program backend other than the known ones (code outside the digest too).
    whole_program = target.whole_program.value if target.whole_program else None
    if previous is None:
        return "no earlier build to keep"
    if target.etrecord:
        return "etrecord = true: the ETRecord is written afresh"
    if target.transform_passes:
        return "transform_passes: code the program's digest cannot see"
    if target.partitioners:
        return "partitioners: code the program's digest cannot see"
    if whole_program and not backend_by_details_class(whole_program["backend_id"]):
        return f"whole_program's {whole_program['backend_id']}: code the digest cannot see"
    if digests is None:
        return "the program holds a value with no stable digest"
    # A record older than the named inputs has only the whole digest: it lowers afresh.
    earlier = program_inputs_digest(previous.inputs) if previous.inputs else previous.inputs_digest
    if earlier != inputs_digest:
        return INPUTS_CHANGED
    if previous.method_digests != digests:
        methods = previous.method_digests.keys() | digests.keys()
        changed = [m for m in methods if previous.method_digests.get(m) != digests.get(m)]
        return f"the exported program changed ({', '.join(sorted(changed))})"
    return None


def why_outputs_not_kept(
    config: ProjectConfig, target: TargetConfig, previous: TargetState
) -> str | None:
    """why_not_kept's part that reads the disk: whether `previous`'s .pte and data files are
    still as it wrote them."""
    if (
        previous.output.path != str(config.output_path(target.name))
        or not previous.output.unchanged()
    ):
        return "the .pte was missing or modified"
    if not all(data_file.unchanged() for data_file in previous.data_files):
        return "a data file beside the .pte was missing or modified"
    return None


def up_to_date_report(config: ProjectConfig, target: TargetConfig) -> TargetResult | None:
    """The last build's result when nothing it read or wrote has changed since; else None."""
    return still_standing(config, target, load_state(config, target))


def still_standing(
    config: ProjectConfig, target: TargetConfig, state: TargetState | None
) -> TargetResult | None:
    """up_to_date_report of a record read already."""
    if state is None or why_out_of_date(config, target, state) is not None:
        return None
    return state.report.up_to_date(target.name)


def target_inputs_digest(config: ProjectConfig, target: TargetConfig) -> str:
    """Everything besides the source files that decides a target's bytes."""
    return inputs_digest(target_inputs(config, target))


# Parts of a target's inputs that decide what is checked or written beside its program, never the
# program's bytes: a change makes the target stale, and its rebuild keeps the .pte (the runtime
# check and the .bpte are made again for a kept one, lowering/build.py).
BESIDE_PROGRAM = ("runtime", "bundled")


def program_inputs_digest(inputs: dict[str, str]) -> str:
    """The digest of the inputs that decide the program's bytes: all but BESIDE_PROGRAM's."""
    return inputs_digest({k: v for k, v in inputs.items() if k not in BESIDE_PROGRAM})


def inputs_digest(inputs: dict[str, str]) -> str:
    return hashlib.sha256("\0".join(inputs.values()).encode()).hexdigest()


def target_inputs(config: ProjectConfig, target: TargetConfig) -> dict[str, str]:
    """target_inputs_digest's parts by name, in the order digested (the values as they always
    were: a record made before they had names keeps its digest)."""
    return {
        "state_version": str(STATE_VERSION),
        "entry": target.entry.value,
        "backends": ",".join(target.backends),
        # The used backends' partitioner options: changing one rebuilds, another backend's not.
        "backend_options": "backend_options="
        + json.dumps(target.used_backend_options(), sort_keys=True),
        "etrecord": f"etrecord={target.etrecord}",
        # EdgeCompileConfig and ExecutorchBackendConfig fields (external_constants among them),
        # the transform_passes reference (its file is a source) and the constant methods.
        "lowering_options": "lowering_options="
        + json.dumps(target.lowering_options(), sort_keys=True),
        # The declared quantization: its scheme and calibration function (whose file is a source).
        "quantize": "quantize="
        + json.dumps(target.quantize.to_json() if target.quantize else None),
        "root": str(config.root),
        # A declared runtime and its op list's bytes (absent when none is declared, so that the
        # records made before it keep their digests).
        **_runtime_input(config, target),
        **{pinned.partition("==")[0]: pinned for pinned in tool_versions()},
        # Only when on: a record made before verification existed keeps its digest.
        **({"verify": VerifySettings.of(target).digest_part()} if target.verify else {}),
        **({"bundled": "bundled=true"} if target.bundled else {}),
    }


def _runtime_input(config: ProjectConfig, target: TargetConfig) -> dict[str, str]:
    runtime = target.runtime
    if not runtime.declared:
        return {}
    declared = runtime.to_json()
    if runtime.ops is not None:
        ops = config.root / Path(runtime.ops.value).expanduser()
        declared["ops_sha256"] = file_digest(ops) if ops.is_file() else "missing"
    return {"runtime": "runtime=" + json.dumps(declared, sort_keys=True)}


@cache
def tool_versions() -> tuple[str, ...]:
    # Read from the installed metadata: importing torch to ask would defeat the purpose.
    return tuple(f"{name}=={_version(name)}" for name in ("torch", "executorch", "lowerd"))


def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "none"


def stamp_files(paths: Iterable[Path]) -> list[FileStamp]:
    return [FileStamp.of(path) for path in sorted(set(paths)) if path.is_file()]


def _holds(path: str, sha256: str) -> bool:
    """Whether the regular file at `path` has the digest `sha256`."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode) and file_digest(Path(path)) == sha256
    except OSError:
        return False


def file_digest(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()
