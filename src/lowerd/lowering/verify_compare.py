"""Each runtime output against the eager one: its errors and whether it is within tolerance."""

from __future__ import annotations

from typing import Any

from lowerd.lowering.runtime_run import CaseRun
from lowerd.lowering.verify_reference import Case
from lowerd.project.verification import InputCheck, OutputCheck, Tolerance

# torch.testing's defaults by dtype; a quantized program is held to its float model more loosely.
_FLOAT32 = (1e-4, 1e-3)
_HALF = (1e-2, 1e-2)
QUANTIZED = (0.1, 0.1)


def tolerance_for(expected: tuple[Any, ...], quantized: bool, atol: float | None,
                  rtol: float | None) -> Tolerance:  # fmt: skip
    """The target's atol/rtol where given, else the default of its first output's dtype (or the
    quantized default, against the float model)."""
    import torch

    dtype = next((t.dtype for t in expected if t.is_floating_point()), None)
    if quantized:
        default, why = QUANTIZED, "quantized default, against the float model"
    elif dtype in (torch.float16, torch.bfloat16):
        default, why = _HALF, f"{str(dtype).removeprefix('torch.')} default"
    elif dtype is None:
        default, why = (0.0, 0.0), "exact (integer outputs)"
    else:
        default, why = _FLOAT32, f"{str(dtype).removeprefix('torch.')} default"
    if atol is not None or rtol is not None:
        why = "atol/rtol" + (", against the float model" if quantized else "")
    return Tolerance(
        default[0] if atol is None else atol, default[1] if rtol is None else rtol, why
    )


def check_case(case: Case, run: CaseRun, tolerance: Tolerance) -> InputCheck:
    if run.error is not None:
        return InputCheck(case.label, error=run.error)
    import torch

    # The eager outputs kept are its tensors (verify_reference.py); so are the runtime's compared.
    outputs = [output for output in run.outputs if isinstance(output, torch.Tensor)]
    if len(outputs) != len(case.expected):
        shown = f"{len(outputs)} outputs on the runtime, {len(case.expected)} eager"
        return InputCheck(case.label, error=shown)
    checks: list[OutputCheck] = []
    for index, (got, want) in enumerate(zip(outputs, case.expected, strict=True)):
        if tuple(got.shape) != tuple(want.shape):
            shapes = f"{tuple(got.shape)} on the runtime, {tuple(want.shape)} eager"
            shown = f"output {index}: shape {shapes}"
            return InputCheck(case.label, tuple(checks), error=shown)
        checks.append(check_output(index, got, want, tolerance))
    return InputCheck(case.label, tuple(checks))


def check_output(index: int, got: Any, want: Any, tolerance: Tolerance) -> OutputCheck:
    """Errors in float64 (mismatched_elements); the largest relative one over eager's finite
    nonzero elements."""
    difference, mismatched = mismatched_elements(got, want, tolerance)
    finite = difference.isfinite()
    shown = difference[finite]
    max_abs = float(shown.max()) if shown.numel() else 0.0
    b = want.detach().to(difference.dtype)
    nonzero = finite & b.isfinite() & (b != 0)
    relative = difference[nonzero] / b.abs()[nonzero]
    max_rel = float(relative.max()) if relative.numel() else 0.0
    dtype = str(want.dtype).removeprefix("torch.")
    return OutputCheck(index, dtype, tuple(want.shape), max_abs, max_rel, int(mismatched.sum()))


def mismatched_elements(got: Any, want: Any, tolerance: Tolerance) -> tuple[Any, Any]:
    """|got - want| in float64, and which elements are out of tolerance: off by more than atol +
    rtol * |want|, or NaN on one side only. Equal elements match, equal infinities among them
    (whose difference, inf - inf, is NaN: 0 here), and so does NaN on both sides: torch.allclose's
    rule with equal_nan."""
    import torch

    a, b = got.detach().to(torch.float64), want.detach().to(torch.float64)
    equal = (a == b) | (a.isnan() & b.isnan())
    difference = torch.where(equal, 0.0, (a - b).abs())
    allowed = tolerance.atol + tolerance.rtol * b.abs()
    return difference, ~(equal | (difference.isfinite() & (difference <= allowed)))
