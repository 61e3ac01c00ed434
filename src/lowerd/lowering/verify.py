"""The verification stage: the written .pte run on this host's ExecuTorch runtime against eager.

The last stage (lowering/stages.py), run after the .pte is written when the target verifies,
and the same check of a kept .pte (a build that kept the last program checks it too: its inputs
or tolerance may be new). It runs after the build's result went out without it (build.py
`_verified`), so an editor's diagnostics do not wait for the runtime: the verification follows
as the same build's last result, of the program whose sha256 it names (`program`). The
runtime runs in a child of the build worker (runtime_run.py); what it gives is compared with
the reference the build took when the entry loaded (verify_reference.py).

A verification is memoized in the content-addressed cache by the .pte's and .ptd's sha256, the
inputs' and eager outputs' digest, the runtime's version and the settings: an unchanged program
is never run again, and its latency is measured again only when asked (`lowerd verify --bench`).
"""

from __future__ import annotations

import hashlib
import os
import platform
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from lowerd.lowering.divergence import first_divergence, first_diverging_partition
from lowerd.lowering.runtime_profile import method_instructions
from lowerd.lowering.runtime_run import RunRequest, RuntimeRun, run_on_runtime
from lowerd.lowering.stages import BuildContext, Emitted, Written
from lowerd.lowering.verify_compare import check_case, tolerance_for
from lowerd.lowering.verify_reference import Reference, float_program
from lowerd.project.build_state import tool_versions
from lowerd.project.loadability import RuntimeCheck
from lowerd.project.verification import (
    Divergence,
    Latency,
    MethodVerification,
    Tolerance,
    Verification,
    VerifySettings,
    verdict_of,
)
from lowerd.project.wire import WireError, decode, encode

MEMO_KIND = "verify"


def verify_written(ctx: BuildContext, written: Written, emitted: Emitted | None) -> Written:
    """The stage, after the write: the written program's verification, when the target
    verifies. `emitted`: this build's program (its bytes and its lowered program, where a
    diverging op is looked for); None for a kept .pte, whose bytes are read back from the disk
    (it is checked too: its inputs or tolerance may be new)."""
    if ctx.reference is None or not ctx.target.verify:  # a bundled target has a reference too
        return written
    if emitted is not None:
        ptd = next((f.data for f in emitted.data_files if f.kind == "ptd"), None)
        verification = verify_program(ctx, emitted.buffer, ptd, emitted.edge)
    else:
        files = [(f.path, f.kind) for f in written.data_files]
        ptd = next((Path(path).read_bytes() for path, kind in files if kind == "ptd"), None)
        verification = verify_program(ctx, Path(written.output).read_bytes(), ptd)
    if verification.program != written.sha256:  # another build wrote the file meanwhile
        verification = Verification.failed(
            runtime_name(),
            verification.reference,
            f"the .pte on disk ({written.sha256[:12]}) is not the program verified "
            f"({verification.program[:12]}): written again while it was read",
            verification.seconds,
            written.sha256,
        )
    return replace(written, verification=verification)


def refused_by_runtime(ctx: BuildContext, written: Written, check: RuntimeCheck) -> Written:
    """The written program's verification when the runtime the target declares cannot load it:
    an error naming each kernel or backend it lacks at its line, as the build report does. It
    is not run: this host's runtime, which has what the declared one lacks, would pass it."""
    assert ctx.reference is not None
    against = _against(ctx.reference)
    problems = (
        f"{problem.file}:{problem.line}: {problem.message}" if problem.file else problem.message
        for problem in check.problems
    )
    error = "\n".join(["the program does not load on it:", *problems])
    verification = Verification.failed(check.runtime, against, error, 0.0, written.sha256)
    return replace(written, verification=verification)


def verify_program(
    ctx: BuildContext, pte: bytes, ptd: bytes | None, edge: Any = None
) -> Verification:
    """The program's verification: remembered, or run, compared and, where an output is off
    and the lowered `edge` program is at hand, its first diverging op found."""
    reference = ctx.reference
    assert reference is not None
    ctx.stage("verify")
    started = time.perf_counter()
    program = hashlib.sha256(pte).hexdigest()
    settings = VerifySettings.of(ctx.target, ctx.bench)
    key = _memo_key(program, ptd, reference, settings)
    if not settings.bench and ctx.store is not None:
        remembered = _remembered(ctx, key)
        if remembered is not None:
            seconds = time.perf_counter() - started
            return replace(remembered, program=program, reused=True, seconds=seconds)
    inputs = {name: [case.inputs for case in cases] for name, cases in reference.cases.items()}
    run = run_on_runtime(RunRequest(pte, ptd, inputs, settings.warmup, settings.runs))
    seconds = time.perf_counter() - started
    verification = _verification(reference, settings, run, seconds, program)
    if edge is not None and verification.verdict == "fail":
        verification = _localized(ctx, reference, (pte, ptd, edge), verification)
    elif edge is None and ctx.store is not None:  # a kept program, measured again: the same ops
        verification = _divergences_of(verification, _remembered(ctx, key))
    if ctx.store is not None and verification.verdict != "error":  # a crash may be this host's
        ctx.store.put(key, _packed(verification), MEMO_KIND)
    return verification


def _verification(
    reference: Reference, settings: VerifySettings, run: RuntimeRun, seconds: float, program: str
) -> Verification:
    against = _against(reference)
    if run.error is not None:
        return Verification.failed(runtime_name(), against, run.error, seconds, program)
    methods = {}
    for name, cases in reference.cases.items():
        expected = cases[0].expected if cases else ()
        tolerance = tolerance_for(expected, reference.quantized, settings.atol, settings.rtol)
        checks = tuple(
            check_case(case, result, tolerance)
            for case, result in zip(cases, run.cases.get(name, ()), strict=False)
        )
        verdict = verdict_of(
            "error" if check.error else "pass" if check.passed else "fail" for check in checks
        )
        methods[name] = MethodVerification(
            verdict, tolerance, checks, latency=_latency(run, name, settings)
        )
    return Verification.of(runtime_name(), against, methods, seconds, program)


def _against(reference: Reference) -> str:
    return "the float model" if reference.quantized else "eager"


def _localized(
    ctx: BuildContext,
    reference: Reference,
    program: tuple[bytes, bytes | None, Any],
    verification: Verification,
) -> Verification:
    """Each failing method with the first op whose value differs from eager's on its first
    failing input (lowering/divergence.py), else the first delegate partition whose outputs on
    the runtime do. Finding it is a help, never the verdict: a program it cannot follow is
    reported without one."""
    methods = dict(verification.methods)
    for name, method in verification.methods.items():
        failing = [i for i, check in enumerate(method.inputs) if not check.passed]
        if method.verdict != "fail" or not failing or name not in reference.programs:
            continue
        case = reference.cases[name][failing[0]]
        try:
            found = _divergence(ctx, reference, program, name, case.inputs, method.tolerance)
        except Exception:  # noqa: BLE001 - an op the interpreter cannot run: no op named
            found = None
        methods[name] = replace(method, divergence=found)
    return replace(verification, methods=methods)


def _divergence(
    ctx: BuildContext,
    reference: Reference,
    program: tuple[bytes, bytes | None, Any],
    name: str,
    inputs: tuple[Any, ...],
    tolerance: Tolerance,
) -> Divergence | None:
    pte, ptd, edge = program
    floats = reference.floats.get(name)
    exported = float_program(floats) if floats else reference.programs[name]
    lowered = edge.exported_program(name)
    found = first_divergence(exported, lowered, inputs, tolerance, ctx.user_files)
    if found is not None:
        return found
    run = run_on_runtime(RunRequest(pte, ptd, {name: [inputs]}, 0, 0, debug=True))
    chain = method_instructions(pte).get(name, [])
    intermediates = run.intermediates.get(name, {})
    return first_diverging_partition(
        exported, lowered, intermediates, chain, inputs, tolerance, ctx.user_files
    )


def _divergences_of(verification: Verification, before: Verification | None) -> Verification:
    """The divergences found when the same program was verified before, on the methods that
    fail again (a kept program has no lowered program at hand to look in)."""
    if before is None:
        return verification
    methods = {
        name: replace(method, divergence=before.methods[name].divergence)
        if method.verdict == "fail" and name in before.methods
        else method
        for name, method in verification.methods.items()
    }
    return replace(verification, methods=methods)


def _latency(run: RuntimeRun, method: str, settings: VerifySettings) -> Latency | None:
    profile = run.profiles.get(method)
    if profile is None or not profile.totals_ms:
        return None
    return Latency(
        settings.runs,
        settings.warmup,
        profile.median_ms,
        profile.p90_ms,
        host_name(),
        profile.parts,
    )


def runtime_name() -> str:
    executorch = next(v for v in tool_versions() if v.startswith("executorch=="))
    return f"executorch {executorch.partition('==')[2]} on this host"


def host_name() -> str:
    """Which host the latency is of: never the device's."""
    return f"this host ({platform.machine()}, {os.cpu_count()} cores), not the device"


def _memo_key(
    program: str, ptd: bytes | None, reference: Reference, settings: VerifySettings
) -> str:
    """`program`: the .pte's sha256, hashed once by verify_program."""
    digest = hashlib.sha256()
    for part in (
        program,  # the verification's `program`
        hashlib.sha256(ptd).hexdigest() if ptd is not None else "-",
        reference.digest(),
        runtime_name(),
        platform.machine(),
        settings.digest_part(),
    ):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()


def _remembered(ctx: BuildContext, key: str) -> Verification | None:
    import msgpack

    assert ctx.store is not None
    stored = ctx.store.get(key, MEMO_KIND)
    if stored is None:
        return None
    try:
        return decode(Verification, msgpack.unpackb(stored, raw=False))
    except (WireError, ValueError, msgpack.UnpackException):  # an older lowerd's: run again
        return None


def _packed(verification: Verification) -> bytes:
    import msgpack

    packed: bytes = msgpack.packb(encode(replace(verification, reused=False)), use_bin_type=True)
    return packed
