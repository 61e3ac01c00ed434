"""Run a .pte on this host's ExecuTorch runtime, in a child of the build worker.

The runtime is native code: a program it rejects raises, but one it mis-reads may crash the
process. So the program runs in a fork of the worker (the worker has torch and ExecuTorch
loaded already): a crash or a hang ends only the child, and the verification says so ("the
runtime crashed: SIGSEGV") instead of the build dying. What the child sends back through its pipe
is plain data: each case's output tensors, or the runtime's error, and the latency profile.

A fork, not a fresh interpreter: one pays `import torch` and ExecuTorch's runtime again (9 s of
CPU measured on a 2-core host, 0.2 s for the fork's whole run). But the worker's eager run has
started GNU OpenMP's thread pool, whose threads a fork does not copy: the child's first parallel
ATen op (the pybindings clone each output; one of 32 Ki elements or more is parallel) waited on
them for ever (gomp_team_barrier_wait_end). So the child puts ATen on one thread before the
runtime runs: no op of it enters OpenMP. The runtime's own kernels and delegates use its own
thread pool, made in the child, so the latency measured is unchanged.

The child dies with its worker (PR_SET_PDEATHSIG): a worker killed with SIGKILL runs no clean-up,
and its child lived on with parent 1, holding the CLI's stdout open.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import re
import signal
import tempfile
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lowerd.lowering.runtime_profile import MethodProfile, method_instructions, profile_of
from lowerd.project.parent_death import die_with_parent

# A method that has not answered in this long is taken for hung.
RUN_TIMEOUT_SECONDS = 300.0
# The debug buffer the runtime fills with intermediate outputs when asked (localization).
DEBUG_BUFFER_BYTES = 64 << 20


@dataclass(frozen=True)
class CaseRun:
    """One input tuple run: the method's outputs (tensors), or the runtime's error."""

    outputs: tuple[Any, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class RuntimeRun:
    """What the child saw: each method's case runs in order, each method's latency profile
    (when timed), or why nothing ran (`error`: a rejected program, a crash, a hang)."""

    cases: Mapping[str, tuple[CaseRun, ...]] = field(default_factory=dict)
    profiles: Mapping[str, MethodProfile] = field(default_factory=dict)
    error: str | None = None
    # With `debug`: each method's intermediate outputs on its first input tuple, by the
    # instruction of its chain that made them (a delegate call's outputs, a kernel's).
    intermediates: Mapping[str, Mapping[int, tuple[Any, ...]]] = field(default_factory=dict)


@dataclass(frozen=True)
class RunRequest:
    """The program, its data file, each method's input tuples (flat, as the runtime takes
    them) and how many untimed and timed runs to profile each method with."""

    pte: bytes
    ptd: bytes | None
    inputs: Mapping[str, Sequence[Sequence[Any]]]
    warmup: int
    runs: int
    debug: bool = False  # also each method's intermediate outputs (ETDump's debug buffer)


def run_on_runtime(request: RunRequest) -> RuntimeRun:
    """The request run in a forked child; its death or silence is a RuntimeRun with an error."""
    context = multiprocessing.get_context("fork")
    receiving, sending = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(request, sending, os.getpid()), daemon=True)
    child.start()
    sending.close()
    try:
        if not receiving.poll(RUN_TIMEOUT_SECONDS):
            return RuntimeRun(error=f"the runtime did not finish in {RUN_TIMEOUT_SECONDS:.0f} s")
        run: RuntimeRun = pickle.loads(receiving.recv_bytes())
        return run
    except EOFError:  # the child ended without a word: the runtime took it down
        child.join(5)
        return RuntimeRun(error=_death(child.exitcode))
    finally:
        receiving.close()
        if child.is_alive():
            child.kill()
        child.join(5)


def _death(code: int | None) -> str:
    if code is not None and code < 0:
        return f"the runtime crashed ({signal.Signals(-code).name})"
    return f"the runtime ended its process (exit code {code})"


def _child(request: RunRequest, sending: Any, parent: int) -> None:
    try:
        die_with_parent(signal.SIGKILL, parent)
        _on_one_thread()
        try:
            run = _run(request)
        except Exception as error:  # the runtime's rejection, in its words
            run = RuntimeRun(error=_runtime_message(error))
        # Plain pickle: multiprocessing's own would share the tensors' memory by descriptors.
        sending.send_bytes(pickle.dumps(run))
        sending.close()
    finally:
        os._exit(0)  # not the worker's exit handlers: they belong to the parent


def _on_one_thread() -> None:
    """ATen on this thread alone: the worker's OpenMP threads were not forked with it."""
    import torch

    torch.set_num_threads(1)


def _run(request: RunRequest) -> RuntimeRun:
    from executorch.runtime import Runtime

    runtime = Runtime.get()
    with tempfile.TemporaryDirectory(prefix="lowerd-verify-") as folder:
        data_path = _data_file(request.ptd, Path(folder))
        with _quiet_native_logs():
            program = runtime.load_program(request.pte, data_path=data_path)
            cases = {name: _cases(program, name, inputs) for name, inputs in request.inputs.items()}
        profiles = {}
        if request.runs:
            profiles = _profiles(runtime, request, data_path, Path(folder))
        intermediates = {}
        if request.debug:
            intermediates = _intermediates(runtime, request, data_path, Path(folder))
    return RuntimeRun(cases, profiles, intermediates=intermediates)


def _intermediates(
    runtime: Any, request: RunRequest, data_path: Path | None, folder: Path
) -> dict[str, dict[int, tuple[Any, ...]]]:
    """Each method run once on its first input tuple with the debug buffer on: what each
    instruction output, read back by ExecuTorch's Inspector."""
    from executorch.devtools import Inspector

    found = {}
    for name, inputs in request.inputs.items():
        etdump, buffer = folder / f"{name}.debug.etdp", folder / f"{name}.debug.bin"
        with _quiet_native_logs():
            program = runtime.load_program(
                request.pte,
                data_path=data_path,
                enable_etdump=True,
                debug_buffer_size=DEBUG_BUFFER_BYTES,
            )
            program.load_method(name).execute(list(inputs[0]))
            program.write_etdump_result_to_file(str(etdump), str(buffer))
            inspector = Inspector(etdump_path=str(etdump), debug_buffer_path=str(buffer))
        found[name] = {
            event._instruction_id: tuple(_cloned(value) for value in event.debug_data)
            for block in inspector.event_blocks
            for event in block.events
            if event.debug_data and not event.is_delegated_op and event._instruction_id is not None
        }
    return found


def _cloned(value: Any) -> Any:
    clone = getattr(value, "clone", None)
    return clone() if clone is not None else value


def _cases(program: Any, name: str, inputs: Sequence[Sequence[Any]]) -> tuple[CaseRun, ...]:
    try:
        method = program.load_method(name)
    except Exception as error:
        message = f"loading method {name!r}: {_runtime_message(error)}"
        return tuple(CaseRun(error=message) for _ in inputs)
    runs = []
    for args in inputs:
        try:
            outputs = tuple(_cloned(output) for output in method.execute(list(args)))
            runs.append(CaseRun(outputs))
        except Exception as error:
            runs.append(CaseRun(error=_runtime_message(error)))
    return tuple(runs)


def _profiles(
    runtime: Any, request: RunRequest, data_path: Path | None, folder: Path
) -> dict[str, MethodProfile]:
    """Each method's warm runs on its first input tuple with ETDump profiling on, each method
    in a program loaded for it alone, so its dump holds its own timed runs only."""
    chains = method_instructions(request.pte)
    profiles = {}
    for name, inputs in request.inputs.items():
        if not inputs:
            continue
        etdump = folder / f"{name}.etdp"
        with _quiet_native_logs():
            program = runtime.load_program(request.pte, data_path=data_path, enable_etdump=True)
            try:
                method = program.load_method(name)
                for _ in range(request.warmup + request.runs):
                    method.execute(list(inputs[0]))
            except Exception:  # the case runs say why; no latency for a method that fails
                continue
            program.write_etdump_result_to_file(str(etdump), str(folder / f"{name}.bin"))
        profiles[name] = profile_of(etdump, chains.get(name, []), request.warmup)
    return profiles


def _data_file(ptd: bytes | None, folder: Path) -> Path | None:
    if ptd is None:
        return None
    path = folder / "program.ptd"
    path.write_bytes(ptd)
    return path


@contextlib.contextmanager
def _quiet_native_logs() -> Any:
    """The runtime's C++ log lines go to fd 2 ("[cpuinfo_utils.cpp:71] ..."): lowerd prints its
    own lines only, so the child's stderr is closed to them while the runtime works."""
    saved = os.dup(2)
    with open(os.devnull, "wb") as null:
        os.dup2(null.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


# ExecuTorch's runtime/core/error.h: the codes its messages give in hex ("error: 0x:14").
_ERRORS = {
    0x01: "Internal",
    0x02: "InvalidState",
    0x10: "NotImplemented",
    0x11: "NotSupported",
    0x12: "InvalidArgument",
    0x13: "InvalidType",
    0x14: "OperatorMissing",
    0x20: "NotFound",
    0x21: "MemoryAllocationFailed",
    0x22: "AccessFailed",
    0x23: "InvalidProgram",
    0x24: "InvalidExternalData",
    0x25: "OutOfResources",
    0x30: "DelegateInvalidCompatibility",
    0x31: "DelegateMemoryAllocationFailed",
    0x32: "DelegateInvalidHandle",
}
_CODE = re.compile(r"error: 0x:?([0-9a-fA-F]+)")


def _runtime_message(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    text = _CODE.sub(lambda m: f"{m[0]} ({_ERRORS.get(int(m[1], 16), 'unknown')})", text)
    if isinstance(error, RuntimeError | ValueError):
        return text
    return f"{type(error).__name__}: {text}\n{traceback.format_exc(limit=3)}"
