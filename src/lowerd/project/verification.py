"""What running a target's .pte on ExecuTorch's runtime showed: the facts of a verification.

The verification stage (lowering/verify.py) loads the written program in the host runtime, runs
every method on the entry's example inputs and on the target's `verify_inputs`, and compares each
output with the eager module's (the float model's, for a quantized target). These classes are
what it gives back, inside the TargetResult (`verification`), the build record, `lowerd verify
--json` and the editor's payloads; `lowerd check` reads the same facts (a method's max error,
its host latency). No torch here.

Every latency is of THIS host's runtime, never the device's: `Latency.host` says which host.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from lowerd.project.wire import wire_field, wire_shape

if TYPE_CHECKING:
    from lowerd.project.config import TargetConfig

# "pass": every output of every input within tolerance; "fail": one is not; "error": the
# runtime could not load or run the program (or crashed): `error` says why.
Verdict = Literal["pass", "fail", "error"]

_ONLY_GIVEN = wire_field(omit_none=True)
_MS = wire_field(digits=4)


@dataclass(frozen=True)
class VerifySettings:
    """What a target's verification is asked (its keys, config_keys.py), and `bench`: measure
    the latency again rather than take a verification of the same program's (`--bench`)."""

    inputs: str | None
    atol: float | None
    rtol: float | None
    runs: int
    warmup: int
    bench: bool = False

    @classmethod
    def of(cls, target: TargetConfig, bench: bool = False) -> VerifySettings:
        inputs = target.verify_inputs.value if target.verify_inputs else None
        return cls(
            inputs, target.atol, target.rtol, target.verify_runs, target.verify_warmup, bench
        )

    def digest_part(self) -> str:
        """The settings as the build record's inputs and the verification memo key them (the
        inputs function by name: its file is a source of the build)."""
        return (
            f"verify=inputs:{self.inputs},atol:{self.atol},rtol:{self.rtol},"
            f"runs:{self.runs},warmup:{self.warmup}"
        )


@dataclass(frozen=True)
class Tolerance:
    """An output passes when every element has |runtime - eager| <= atol + rtol * |eager|
    (torch.allclose's rule). `why` names where the numbers come from: "float32 default",
    "quantized default", "atol/rtol"."""

    atol: float
    rtol: float
    why: str


@wire_shape(computed=("passed",))
@dataclass(frozen=True)
class OutputCheck:
    """One output of one run, against eager: its largest absolute and relative error, how many
    elements are outside the tolerance. A non-finite difference (a NaN on one side only) counts
    as mismatched and leaves the errors at what the finite elements give."""

    index: int
    dtype: str
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float
    mismatched: int = 0

    @property
    def passed(self) -> bool:
        return self.mismatched == 0


@dataclass(frozen=True)
class InputCheck:
    """A method run on one input tuple: "example" (the entry's), or "verify_inputs[i]" (the
    i-th tuple `verify_inputs` gave the method). `error`: the runtime failed on it."""

    label: str
    outputs: tuple[OutputCheck, ...] = ()
    error: str | None = field(default=None, metadata=_ONLY_GIVEN)

    @property
    def passed(self) -> bool:
        return self.error is None and all(output.passed for output in self.outputs)


@dataclass(frozen=True)
class Divergence:
    """The first op of a method whose runtime output differs from eager's, found from the
    runtime's intermediate outputs (its ETDump debug buffer) matched to the program's ops by
    debug handle: the op, the delegate partition that ran it ("XNNPACK #1"; None on the CPU),
    by how much it differs, how many ops diverge in all, and where the user wrote it (the
    file relative to the project root) and the library line that made it."""

    op: str
    partition: str | None
    max_abs: float
    diverging: int
    file: str | None = field(default=None, metadata=_ONLY_GIVEN)
    line: int | None = field(default=None, metadata=_ONLY_GIVEN)
    library_file: str | None = field(default=None, metadata=_ONLY_GIVEN)
    library_line: int | None = field(default=None, metadata=_ONLY_GIVEN)
    # "op": the op itself, as the program computes it before the backends' kernels; "partition":
    # the partition's output on the runtime (its debug buffer), every op agreeing before it.
    found_by: Literal["op", "partition"] = "op"

    def message(self) -> str:
        """ "aten.hardtanh on XNNPACK #1 differs from eager by 0.93, first of 4 diverging ops"."""
        where = self.partition or "the CPU"
        if self.found_by == "partition":
            first = (
                f", first of {self.diverging} diverging partitions" if self.diverging > 1 else ""
            )
            return (
                f"the output of {where} ({self.op}) differs from eager by {self.max_abs:.3g}{first}"
            )
        first = f", first of {self.diverging} diverging ops" if self.diverging > 1 else ""
        return f"{self.op} on {where} differs from eager by {self.max_abs:.3g}{first}"


@dataclass(frozen=True)
class PartLatency:
    """A share of a method's run: a delegate partition ("XNNPACK #1", kind "delegate") or an op
    the portable kernels ran ("aten.cumsum", kind "cpu"), its median over the warm runs."""

    name: str
    kind: Literal["delegate", "cpu"]
    median_ms: float = field(metadata=_MS)
    calls: int = 1  # per run: an op on the CPU may run more than once
    file: str | None = field(default=None, metadata=_ONLY_GIVEN)
    line: int | None = field(default=None, metadata=_ONLY_GIVEN)


@dataclass(frozen=True)
class Latency:
    """A method's time on this host's runtime: the median and 90th percentile of `runs` warm
    runs after `warmup` untimed ones, on the example inputs, and its parts from the runtime's
    profiling events (ETDump), slowest first. `host` says which host it is: not the device."""

    runs: int
    warmup: int
    median_ms: float = field(metadata=_MS)
    p90_ms: float = field(metadata=_MS)
    host: str
    parts: tuple[PartLatency, ...] = ()

    def summary(self, method: str, most: int = 3) -> str:
        """ "forward 1.8 ms here · XNNPACK #1 1.2 ms · CPU 0.5 ms": the lens and hover line, the
        `most` slowest partitions named, the CPU ops summed."""
        shares = [f"{method} {_ms(self.median_ms)} here"]
        delegates = [part for part in self.parts if part.kind == "delegate"]
        shares.extend(f"{part.name} {_ms(part.median_ms)}" for part in delegates[:most])
        if len(delegates) > most:
            shares.append(f"{len(delegates) - most} more partitions")
        cpu = [part for part in self.parts if part.kind == "cpu"]
        if cpu:
            shares.append(f"CPU {_ms(sum(part.median_ms * part.calls for part in cpu))}")
        return " · ".join(shares)


@wire_shape(computed=("max_abs", "max_rel"), order=("verdict", "max_abs", "max_rel"))
@dataclass(frozen=True)
class MethodVerification:
    """One method run on the runtime: each input's checks against eager, the tolerance they
    were held to, the first diverging op when an output is off, and its latency here (None when
    not measured: a failed run, or `verify_runs = 0`)."""

    verdict: Verdict
    tolerance: Tolerance
    inputs: tuple[InputCheck, ...] = ()
    divergence: Divergence | None = field(default=None, metadata=_ONLY_GIVEN)
    latency: Latency | None = field(default=None, metadata=_ONLY_GIVEN)
    error: str | None = field(default=None, metadata=_ONLY_GIVEN)

    @property
    def max_abs(self) -> float:
        """The largest absolute error over every input and output: `lowerd check`'s fact."""
        return max((out.max_abs for check in self.inputs for out in check.outputs), default=0.0)

    @property
    def max_rel(self) -> float:
        return max((out.max_rel for check in self.inputs for out in check.outputs), default=0.0)


@dataclass(frozen=True)
class Verification:
    """A target's verification: its verdict, each method's, the runtime that ran it ("executorch
    1.5.1 on this host"), what the outputs were compared with ("eager", or "the float model"
    for a quantized target), the sha256 of the .pte it ran (`program`), and why it failed to
    run at all (a .pte the runtime rejects, a
    runtime that crashed). `reused`: the same program, inputs, runtime and settings were
    verified before; these are that verification's facts, not run again."""

    verdict: Verdict
    runtime: str
    reference: str
    program: str  # the sha256 of the .pte run: a verdict is of these bytes, never another's
    methods: dict[str, MethodVerification] = field(default_factory=dict)
    error: str | None = field(default=None, metadata=_ONLY_GIVEN)
    reused: bool = False
    seconds: float = field(default=0.0, metadata=wire_field(digits=3))

    @classmethod
    def failed(
        cls, runtime: str, reference: str, error: str, seconds: float, program: str
    ) -> Verification:
        return cls("error", runtime, reference, program, error=error, seconds=seconds)

    @classmethod
    def of(
        cls,
        runtime: str,
        reference: str,
        methods: Mapping[str, MethodVerification],
        seconds: float,
        program: str,
    ) -> Verification:
        verdict = verdict_of(method.verdict for method in methods.values())
        return cls(verdict, runtime, reference, program, dict(methods), seconds=seconds)

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    def divergences(self) -> dict[str, Divergence]:
        return {
            name: method.divergence
            for name, method in self.methods.items()
            if method.divergence is not None
        }


def verdict_of(verdicts: Iterable[Verdict]) -> Verdict:
    """The worst of several: an error over a failure over a pass (no verdicts: a pass)."""
    seen = set(verdicts)
    for worst in ("error", "fail"):
        if worst in seen:
            return worst
    return "pass"


def _ms(value: float) -> str:
    return f"{value:.3g} ms" if value < 100 else f"{value:.0f} ms"
