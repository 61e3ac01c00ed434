"""Run a .pte on this host's ExecuTorch runtime, in a child forked from the worker's zygote.

The runtime is native code: a program it rejects raises, but one it mis-reads may crash the
process. So the program runs in a child process: a crash or a hang ends only the child, and the
verification says so ("the runtime crashed (SIGSEGV)") instead of the build dying.

The child is a fork of the worker's runtime zygote (runtime_zygote.py), forked when the worker
started, before its entry ran a torch op: never of the worker itself, whose eager run started
GNU OpenMP's thread pool, whose threads a fork does not copy (a child's first parallel ATen op,
the pybindings' clone of an output of 32 Ki elements or more, waited on them for ever). A fork,
not a fresh interpreter: one pays `import torch` and ExecuTorch's runtime again (9 s of CPU
measured on a 2-core host, 0.2 s for the fork's whole run); the zygote has them imported.

What crosses to the child and back is typed and serialized by project/wire.py's converter
(msgpack): the request (RunRequest: the program's bytes, its data file, the inputs), the answer
(RuntimeRun: each case's outputs or the runtime's error, the latency profiles), tensors as
lowering/tensor_codec.py's PlainTensor.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import tempfile
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import msgpack
import torch

import lowerd.lowering.tensor_codec  # noqa: F401 - torch.Tensor's wire form
from lowerd.lowering.runtime_profile import MethodProfile, method_instructions, profile_of
from lowerd.lowering.runtime_zygote import ZygoteGone, start_zygote, stop_zygote, zygote
from lowerd.project.wire import WireError, decode, encode

T = TypeVar("T")

# A method that has not answered in this long is taken for hung.
RUN_TIMEOUT_SECONDS = 300.0
# The debug buffer the runtime fills with intermediate outputs when asked (localization).
DEBUG_BUFFER_BYTES = 64 << 20

# What the runtime takes and gives: tensors and the scalars an EValue holds.
Value = torch.Tensor | bool | int | float | str | None


@dataclass(frozen=True)
class CaseRun:
    """One input tuple run: the method's outputs (tensors), or the runtime's error."""

    outputs: tuple[Value, ...] = ()
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
    intermediates: Mapping[str, Mapping[int, tuple[Value, ...]]] = field(default_factory=dict)


@dataclass(frozen=True)
class RunRequest:
    """The program, its data file, each method's input tuples (flat, as the runtime takes
    them) and how many untimed and timed runs to profile each method with."""

    pte: bytes
    ptd: bytes | None
    inputs: Mapping[str, Sequence[Sequence[Value]]]
    warmup: int
    runs: int
    debug: bool = False  # also each method's intermediate outputs (ETDump's debug buffer)


def start_runtime_zygote(close: Sequence[int] = ()) -> None:
    """Fork this process's runtime zygote now: a build worker, at its start, before its entry
    runs torch (worker/forkserver.py); `close`, descriptors the zygote must not hold."""
    start_zygote(_answer, close)


def stop_runtime_zygote() -> None:
    stop_zygote()


def run_on_runtime(request: RunRequest) -> RuntimeRun:
    """The request run in a child of the zygote; its death or silence is a RuntimeRun with an
    error."""
    try:
        payload = _packed(request)
    except (TypeError, ValueError) as error:  # an input msgpack has no form for
        return RuntimeRun(error=f"an input cannot be given to the runtime: {error}")
    try:
        ended = zygote(_answer).run(payload, RUN_TIMEOUT_SECONDS)
    except ZygoteGone as gone:
        stop_zygote()  # the next request forks another
        return RuntimeRun(error=str(gone))
    if ended is None:
        return RuntimeRun(error=f"the runtime did not finish in {RUN_TIMEOUT_SECONDS:.0f} s")
    if ended.status != 0:  # the child ended without a word: the runtime took it down
        return RuntimeRun(error=_death(ended.status))
    try:
        return _unpacked(RuntimeRun, ended.answer)
    except (WireError, ValueError, msgpack.UnpackException) as error:
        return RuntimeRun(error=f"the runtime's answer is unreadable: {error}")


def _death(code: int) -> str:
    if code < 0:
        return f"the runtime crashed ({signal.Signals(-code).name})"
    return f"the runtime ended its process (exit code {code})"


def _answer(request: bytes, threaded: bool) -> bytes:
    """The child's work: the request run, the answer packed (a runtime's rejection in its
    words)."""
    if threaded:
        _on_one_thread()
    try:
        run = _run(_unpacked(RunRequest, request))
    except Exception as error:  # the runtime's rejection, in its words
        run = RuntimeRun(error=_runtime_message(error))
    try:
        return _packed(run)
    except (TypeError, ValueError) as error:
        return _packed(RuntimeRun(error=f"the runtime gave a value lowerd cannot read: {error}"))


def _on_one_thread() -> None:
    """ATen on this thread alone: a zygote forked from a process with threads may have handed
    this child a started OpenMP pool without its threads (runtime_zygote.py's `threaded`)."""
    torch.set_num_threads(1)


def _packed(value: object) -> bytes:
    packed: bytes = msgpack.packb(encode(value), use_bin_type=True)
    return packed


def _unpacked(cls: type[T], payload: bytes) -> T:
    # strict_map_key off: the intermediates are keyed by instruction number
    return decode(cls, msgpack.unpackb(payload, raw=False, strict_map_key=False))


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
