"""A target's build result: the typed contract every path builds and reads.

One shape, whoever makes it: a build (lowering/build.py), the daemon answering from a build record
(build_state.up_to_date_report), the worker pool for a build that died or timed out
(TargetResult.failed), the editor's view of a build still running (TargetResult.partitioned).
Dicts exist only at the edges, through project/wire.py's encode and decode: the `--json`
document, the worker pipe, the daemon's socket, the build record and the editor's payloads. The
fields are the wire's keys (docs/schema/lowerd.schema.json has them all); `coverage` is computed
from the methods, written and never read. No torch here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from lowerd.cache.remote import ANY_WRITER, RemoteCounts, RemoteReport
from lowerd.project.loadability import RuntimeCheck
from lowerd.project.printable import printable
from lowerd.project.report_model import MethodReport, coverage_percent
from lowerd.project.verification import Verification
from lowerd.project.wire import wire_field, wire_shape

Status = Literal["ok", "error"]
# What the command makes of a target (TargetResult.verdict): `status` says whether the build made
# the .pte; the verdict also holds it to the checks after the build.
Verdict = Literal["ok", "error", "does-not-load", "verify-failed"]


@dataclass(frozen=True)
class ErrorInfo:
    """Why a target failed, at the place to blame. `kind` is a LowerdError's (config-error,
    export-error, ...) or the worker pool's (worker-crash, worker-timeout, cancelled); the file
    is relative to the project root when inside it."""

    kind: str
    message: str
    file: str | None = None
    line: int | None = None

    def __post_init__(self) -> None:
        # Whoever made it (a worker's crash, a decoded answer): shown, never acted on.
        object.__setattr__(self, "message", printable(self.message))


@dataclass(frozen=True)
class CacheCounts:
    """The build's partitions served from the blob cache (hits; of them, `rebased`: their debug
    handles renumbered) and preprocessed afresh (misses)."""

    hits: int = 0
    misses: int = 0
    rebased: int = 0


_ONLY_GIVEN = wire_field(omit_none=True)


@dataclass(frozen=True)
class CacheSummary(CacheCounts):
    """The counts, and the remote tier's part when the build asked it anything (the fields of
    cache/remote.py's RemoteReport, written only then): its status ("ok", "read-only",
    "unavailable: <reason>"), counts, problems in words, URL without its password, and whose
    entries it took ("any writer", or "ed25519 SHA256:..." for the one key they are signed by)."""

    remote: str | None = field(default=None, metadata=_ONLY_GIVEN)
    remote_counts: RemoteCounts | None = field(default=None, metadata=_ONLY_GIVEN)
    remote_problems: tuple[str, ...] | None = field(default=None, metadata=_ONLY_GIVEN)
    remote_url: str | None = field(default=None, metadata=_ONLY_GIVEN)
    remote_trust: str | None = field(default=None, metadata=_ONLY_GIVEN)
    # What of the local cache this build could not use (its BlobStore.warnings(): a full disk is
    # one line), written only then; the CLI says each line once per build.
    problems: tuple[str, ...] | None = field(default=None, metadata=_ONLY_GIVEN)

    def with_remote(self, report: RemoteReport) -> CacheSummary:
        return replace(
            self,
            remote=report.status,
            remote_counts=report.counts,
            remote_problems=report.problems,
            remote_url=report.url,
            remote_trust=report.trust,
        )

    @property
    def remote_report(self) -> RemoteReport | None:
        if self.remote is None:
            return None
        counts = self.remote_counts or RemoteCounts()
        problems, url = self.remote_problems or (), self.remote_url or ""
        return RemoteReport(self.remote, counts, problems, url, self.remote_trust or ANY_WRITER)


@dataclass(frozen=True)
class DataFile:
    """A file written beside the .pte. `kind` is "ptd" (constants or named data ExecuTorch put
    in a .ptd file), "etrecord" (the devtools' ETRecord) or "bpte" (the bundled program). The
    path is named like the result's output."""

    path: str
    sha256: str
    kind: str


@dataclass(frozen=True)
class ProgramSizes:
    """What the .pte costs on a device, from the emitted program (lowering/program_sizes.py).

    `constant_bytes`: the constant tensors the program keeps itself (the weights of ops left on
    the CPU; 0 when external_constants moved them to a .ptd); `delegate_blob_bytes`: the
    backends' processed blobs, summed over partitions; `delegate_data_bytes`: the named data
    the backends put beside their blobs (XNNPACK's weights), each key once."""

    pte_bytes: int
    constant_bytes: int = 0
    delegate_blob_bytes: int = 0
    delegate_data_bytes: int = 0


@dataclass(frozen=True)
class SourceSite:
    """Where a definition is: a file named like the report's (relative to the root when inside
    it), its line, and for a method's module the class name (written only then)."""

    file: str
    line: int | None = None
    name: str | None = field(default=None, metadata=_ONLY_GIVEN)


@dataclass(frozen=True)
class TargetCoverage:
    """Coverage over every method of a target: its percent, and the backends' display names
    that took ops, most ops first. The same rounding rule as a method's."""

    percent: int
    backends: tuple[str, ...] = ()

    @classmethod
    def of(cls, methods: Mapping[str, MethodReport]) -> TargetCoverage:
        ops = sum(report.ops for report in methods.values())
        delegated = sum(report.ops_delegated for report in methods.values())
        taken: dict[str, int] = {}
        for report in methods.values():
            for name, totals in report.backends.items():
                if totals.get("ops"):
                    taken[name] = taken.get(name, 0) + totals["ops"]
        most_first = sorted(taken, key=lambda name: -taken[name])  # stable: ties keep order
        return cls(coverage_percent(delegated, ops), tuple(most_first))


@wire_shape(
    computed=("coverage", "verdict"),
    order=(
        *("name", "status", "verdict", "output", "sha256", "seconds", "reused", "cache"),
        *("methods", "error"),
        *("entry", "modules", "memo", "backend_options", "coverage", "data_files", "quantize"),
    ),
)
@dataclass
class TargetResult:
    name: str
    status: Status
    seconds: float = field(default=0.0, metadata=wire_field(digits=3))
    output: str | None = None
    sha256: str | None = None
    cache: CacheSummary = field(default_factory=CacheSummary)
    methods: dict[str, MethodReport] = field(default_factory=dict)
    error: ErrorInfo | None = None
    # Where the entry function and each method's module class are defined: where editors put the
    # coverage summary.
    entry: SourceSite | None = None
    modules: dict[str, SourceSite] = field(default_factory=dict)
    # Why no lowering ran: "same-program" when every method exported to the program of the
    # last build (an unrelated edit), so its .pte was kept; "same-source" when the sources
    # changed only in comments and layout, so it was kept without running the entry
    # (lowering/token_keep.py); "up-to-date" when nothing
    # the last build read or wrote changed, answered from its record without a build.
    reused: str | None = None
    # Memoized stages besides blobs, by memo kind: {"qparams": {"hits": h, "misses": m}}.
    memo: dict[str, dict[str, int]] = field(default_factory=dict)
    # The partitioner options each backend was built with ([tool.lowerd] backend_options), by
    # backend name; only the backends given any.
    backend_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The .ptd and .etrecord files written beside the output, in the order written.
    data_files: list[DataFile] = field(default_factory=list)
    # The edge and emit configs, transform_passes and constant_methods given to ExecuTorch, and
    # the declared quantization (TargetConfig.shown_options()): only those the target sets.
    options: dict[str, Any] = field(default_factory=dict)
    # The declared quantization scheme ([tool.lowerd.targets.T.quantize] scheme), if any.
    quantize: str | None = None
    # The .pte's size and what makes it up; None for a failed build and in older records.
    sizes: ProgramSizes | None = None
    # The .pte run on this host's ExecuTorch runtime against eager (`verify`), when asked.
    verification: Verification | None = field(default=None, metadata=_ONLY_GIVEN)
    # The program's needs checked against its runtime (this host's, or [runtime]'s): a kernel
    # or backend it lacks is a load problem at the op's line. None for a failed build and in
    # older records (and then not written).
    runtime: RuntimeCheck | None = field(default=None, metadata=_ONLY_GIVEN)
    # What a build that stands has to say, a line each: its build record the disk refused (the
    # .pte is written; the next build rebuilds). Written only then; the CLI says each once.
    warnings: tuple[str, ...] | None = field(default=None, metadata=_ONLY_GIVEN)

    # Named constructors ----------------------------------------------------------------------

    @classmethod
    def failed(
        cls,
        name: str,
        kind: str,
        message: str,
        file: str | None = None,
        line: int | None = None,
    ) -> TargetResult:
        """A target's result when no build made one: a worker that died or timed out, a config
        it could not read, a build cancelled by a newer one."""
        return cls(name, "error", error=ErrorInfo(kind, message, file, line))

    def up_to_date(self, name: str, seconds: float = 0.0) -> TargetResult:
        """This result, as its build record keeps it, answered again without building (in
        `seconds`): nothing was served from the cache this time."""
        cache = CacheSummary()
        return replace(self, name=name, reused="up-to-date", cache=cache, seconds=seconds)

    @classmethod
    def partitioned(
        cls, name: str, method: str, report: MethodReport, last: TargetResult | None
    ) -> TargetResult:
        """What the editor shows while a build still runs: a method's report as soon as it is
        partitioned (or a provisional one: the last build's, the edited modules' refusals in
        place), laid over the last result's methods
        when that one built, with its entry and module sites."""
        methods = dict(last.methods) if last is not None and last.status == "ok" else {}
        methods[method] = report
        return cls(
            name,
            "ok",
            methods=methods,
            entry=last.entry if last is not None else None,
            modules=dict(last.modules) if last is not None else {},
        )

    def with_error(self, error: ErrorInfo) -> TargetResult:
        """This result failed for another reason than the one it says (a MemoryError that the
        worker's memory limit caused, reported as the worker's)."""
        return replace(self, status="error", error=error)

    def timed(self, seconds: float) -> TargetResult:
        return replace(self, seconds=seconds)

    # Derived ---------------------------------------------------------------------------------

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def loads(self) -> bool:
        """Not known not to load on its runtime (a build that made no check loads)."""
        return self.runtime is None or self.runtime.loads

    @property
    def verdict(self) -> Verdict:
        """The command's verdict: "ok" only when the build made the .pte, its runtime would load
        it and its verification (if asked) passed; the exit code follows it. A .pte its runtime
        refuses, or whose outputs are not eager's, is written (status "ok": the build stands,
        and the next one does not redo it) and still fails the command."""
        if not self.ok:
            return "error"
        if not self.loads:
            return "does-not-load"
        if self.verification is not None and not self.verification.passed:
            return "verify-failed"
        return "ok"

    @property
    def coverage(self) -> TargetCoverage:
        return TargetCoverage.of(self.methods)


def remote_warnings(results: Iterable[TargetResult]) -> list[str]:
    """The remote tier's trouble, once however many targets met it: a tier that was down, a
    value that failed verification, uploads given up. For the CLI's lines and the editor's."""
    lines: dict[str, None] = {}
    for result in results:
        remote = result.cache.remote_report
        if remote is not None:
            lines.update(dict.fromkeys(remote.warnings()))
    return list(lines)
