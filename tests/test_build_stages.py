"""The engine's typed stages (lowering/stages.py) and its reuse decision (lowering/reuse.py).

The decision is pure: given the exported program's fingerprint and the last build as
previous_build read it, it keeps the last .pte or says why not, without reading a file. The
stages each return a new record and leave the one they were given as it was; run by hand on a
tiny model they give stock ExecuTorch's bytes, in memory, before anything is written.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

from lowerd.cache.store import BlobStore
from lowerd.lowering.emission import emit
from lowerd.lowering.loading import export, load, quantize
from lowerd.lowering.lower import choose_route, lower
from lowerd.lowering.program_fingerprint import ProgramFingerprint
from lowerd.lowering.reuse import REUSE_OFF, PreviousBuild, decide_reuse, previous_build
from lowerd.lowering.stages import BuildContext, Exported
from lowerd.project.build_state import FileStamp, TargetState, target_inputs_digest
from lowerd.project.config import ProjectConfig, TargetConfig, load_config
from lowerd.project.errors import LoweringError
from lowerd.project.rebuild_record import INPUTS_CHANGED
from lowerd.project.report_model import MethodReport, NotDelegatedOp
from lowerd.project.result import TargetResult

from helpers import write_pyproject
from stock import stock_pte

# The last build's program: one method whose refused op came from line 3 of the user's model.
LAST_LINES = {"forward": [["models/m.py", 3], None]}
# This build's: the same program, the op now at line 7 (a comment added above it).
MOVED = ProgramFingerprint({"forward": "digest-1"}, {"forward": [["models/m.py", 7], None]})


@pytest.fixture
def target(tmp_path: Path) -> tuple[ProjectConfig, TargetConfig]:
    write_pyproject(
        tmp_path,
        """
        [tool.lowerd]
        backends = ["xnnpack"]
        [tool.lowerd.targets.m]
        entry = "models/m.py:make"
        """,
    )
    config = load_config(tmp_path / "pyproject.toml")
    return config, config.targets["m"]


def _last_build(config: ProjectConfig, target: TargetConfig) -> TargetState:
    """A record as the last build saved it; its .pte was never written (no file is read)."""
    refused = NotDelegatedOp("aten.cumsum.default", "models/m.py", 3, "no support", "cumsum")
    report = MethodReport(0, 1, 0, 1, 0, 0.0, not_delegated=[refused])
    output = FileStamp(str(config.output_path(target.name)), 100, 1, "0" * 64)
    return TargetState(
        target=target.name,
        inputs_digest=target_inputs_digest(config, target),
        sources=[],
        output=output,
        method_digests={"forward": "digest-1"},
        method_lines=LAST_LINES,
        report=TargetResult(target.name, "ok", methods={"forward": report}),
    )


def _exported(program: ProgramFingerprint | None) -> Exported:
    return Exported(methods={}, programs={}, fingerprint=program)


def test_the_same_program_keeps_the_last_pte_with_its_report_at_the_moved_lines(
    target: tuple[ProjectConfig, TargetConfig],
) -> None:
    config, target_config = target
    state = _last_build(config, target_config)
    previous = PreviousBuild(state, True, state.inputs_digest)

    decision = decide_reuse(target_config, _exported(MOVED), previous)

    assert decision.why_lowered is None
    assert decision.kept is state
    assert decision.reports["forward"].not_delegated[0].line == 7
    assert state.report.methods["forward"].not_delegated[0].line == 3  # the record as read
    # The decision read no file: the .pte the record names does not exist, and only
    # previous_build, which reads the disk, says so.
    assert not Path(state.output.path).exists()
    on_disk = previous_build(config, target_config, state, reuse=True)
    assert on_disk.outputs_changed == "the .pte was missing or modified"
    assert decide_reuse(target_config, _exported(MOVED), on_disk).kept is None


@pytest.mark.parametrize(
    ("case", "why", "provisional"),
    [
        ("no record", "no earlier build to keep", False),
        ("reuse off", REUSE_OFF, False),
        ("program changed", "the exported program changed (forward)", True),
        ("no stable digest", "the program holds a value with no stable digest", False),
        ("config changed", INPUTS_CHANGED, True),
        ("pte modified", "the .pte was missing or modified", True),
    ],
)
def test_each_reason_to_lower(
    target: tuple[ProjectConfig, TargetConfig], case: str, why: str, provisional: bool
) -> None:
    config, target_config = target
    state = _last_build(config, target_config)
    program: ProgramFingerprint | None = MOVED
    previous = PreviousBuild(state, True, state.inputs_digest)
    if case == "no record":
        previous = PreviousBuild(None, True, state.inputs_digest)
    elif case == "reuse off":
        previous = PreviousBuild(state, False, state.inputs_digest)
    elif case == "program changed":
        program = ProgramFingerprint({"forward": "digest-2"}, MOVED.lines)
    elif case == "no stable digest":
        program = None
    elif case == "config changed":
        previous = PreviousBuild(state, True, "another configuration")
    elif case == "pte modified":
        previous = PreviousBuild(state, True, state.inputs_digest, why)

    decision = decide_reuse(target_config, _exported(program), previous)

    assert (decision.why_lowered, decision.kept) == (why, None)
    # The last build's report, shown while lowering, when there is one to keep from.
    assert bool(decision.reports) == provisional


def test_the_stages_return_new_records_and_stock_bytes(project: Path, tmp_path: Path) -> None:
    config = load_config(project / "pyproject.toml")
    target = config.targets["tiny_linear"]
    stages: list[str] = []
    store = BlobStore(tmp_path / "cache")
    ctx = BuildContext.start(config, target, store, lambda stage, *_: stages.append(stage), None)

    loaded = load(ctx)
    ctx = ctx.at_entry(loaded.entry)
    assert quantize(ctx, loaded) is loaded  # nothing declared: the record as it was
    exported = export(ctx, loaded)
    lowered = lower(ctx, exported, choose_route(ctx))
    emitted = emit(ctx, lowered)

    assert emitted.buffer == stock_pte(project, target.entry.value, ["xnnpack"])
    assert stages == ["load", "export", "partition", "preprocess", "emit"]
    assert not config.output_path(target.name).exists()  # emitted in memory; write() writes
    # Emission puts the sizes on new reports: the lowered record's stay as lowering made them.
    assert lowered.reports["forward"].planned_memory_bytes is None
    assert emitted.reports["forward"].planned_memory_bytes is not None
    assert (emitted.cache.hits, emitted.cache.misses) == (0, 1)
    with pytest.raises(FrozenInstanceError):
        emitted.buffer = b""  # type: ignore[misc]
    # Once the entry is loaded, a failure through none of the user's frames is blamed there.
    error = ctx.blame(LoweringError, ValueError("boom"), "doing")
    assert (error.location.file, error.location.line) == (loaded.entry.file, loaded.entry.line)
