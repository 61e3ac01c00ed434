"""A target's build result: the typed contract every path builds and reads.

One shape, whoever makes it: a build (lowering/build.py), the daemon answering from a build record
(build_state.up_to_date_report), the worker pool for a build that died or timed out
(TargetResult.failed), the editor's view of a build still running (TargetResult.partitioned).
Dicts exist only at the edges, through to_json()/from_json(): the `--json` document, the worker
pipe, the daemon's socket, the build record and the editor's payloads.

    {"name", "status": "ok"|"error", "output", "sha256", "seconds", "reused",
     "cache": {"hits", "misses", "rebased"}, "methods": {NAME: MethodReport},
     "error": {"kind", "message", "file", "line"} | None, "entry": {"file", "line"} | None,
     "modules": {METHOD: {"file", "line", "name"}}, "memo": {KIND: {"hits", "misses"}},
     "coverage": {"percent", "backends"}, "backend_options": {BACKEND: {OPTION: value}},
     "data_files": [{"path", "sha256", "kind": "ptd"|"etrecord"}], "quantize": SCHEME|null,
     "options": {"edge_compile_config": {FIELD: value}, "executorch_backend_config": {...},
                 "transform_passes": "file.py:fn", "constant_methods": {NAME: value},
                 "partitioners": "file.py:fn",
                 "whole_program": {"backend_id": ID, "compile_specs": {KEY: "value"}}},
     "sizes": {"pte_bytes", "constant_bytes", "delegate_blob_bytes", "delegate_data_bytes"}|null}

`coverage` is computed from the methods (to_json writes it, from_json ignores it). No torch here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from lowerd.cache.remote import RemoteCounts, RemoteReport
from lowerd.project.report_model import MethodReport, coverage_percent

Status = Literal["ok", "error"]


@dataclass(frozen=True)
class ErrorInfo:
    """Why a target failed, at the place to blame: {"kind", "message", "file", "line"}. `kind` is
    a LowerdError's (config-error, export-error, ...) or the worker pool's (worker-crash,
    worker-timeout, cancelled); the file is relative to the project root when inside it."""

    kind: str
    message: str
    file: str | None = None
    line: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "file": self.file, "line": self.line}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ErrorInfo:
        return cls(
            kind=str(raw.get("kind") or "error"),
            message=str(raw.get("message") or ""),
            file=raw.get("file"),
            line=raw.get("line"),
        )


@dataclass(frozen=True)
class CacheSummary:
    """The build's partitions served from the blob cache (hits; of them, `rebased`: their debug
    handles renumbered) and preprocessed afresh (misses); and the remote tier's part, when the
    build asked it anything."""

    hits: int = 0
    misses: int = 0
    rebased: int = 0
    remote: RemoteReport | None = None

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "hits": self.hits,
            "misses": self.misses,
            "rebased": self.rebased,
        }
        if self.remote is not None:
            document["remote"] = self.remote.status
            document["remote_counts"] = self.remote.counts.to_json()
            document["remote_problems"] = list(self.remote.problems)
            document["remote_url"] = self.remote.url
        return document

    @classmethod
    def from_json(cls, raw: Mapping[str, Any] | None) -> CacheSummary:
        raw = raw or {}
        remote = None
        if isinstance(raw.get("remote"), str):
            counts = RemoteCounts.from_json(raw.get("remote_counts"))
            problems = tuple(str(p) for p in raw.get("remote_problems") or ())
            url = str(raw.get("remote_url") or "")
            remote = RemoteReport(raw["remote"], counts, problems, url)
        hits, misses, rebased = (int(raw.get(name, 0)) for name in ("hits", "misses", "rebased"))
        return cls(hits, misses, rebased, remote)


@dataclass(frozen=True)
class DataFile:
    """A file written beside the .pte: {"path", "sha256", "kind"}. `kind` is "ptd" (constants or
    named data ExecuTorch put in a .ptd file) or "etrecord" (the devtools' ETRecord). The path is
    named like the result's output."""

    path: str
    sha256: str
    kind: str

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "sha256": self.sha256, "kind": self.kind}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> DataFile:
        return cls(str(raw["path"]), str(raw["sha256"]), str(raw.get("kind") or "ptd"))


@dataclass(frozen=True)
class ProgramSizes:
    """What the .pte costs on a device, from the emitted program (lowering/program_sizes.py):
    {"pte_bytes", "constant_bytes", "delegate_blob_bytes", "delegate_data_bytes"}.

    `constant_bytes`: the constant tensors the program keeps itself (the weights of ops left on
    the CPU; 0 when external_constants moved them to a .ptd); `delegate_blob_bytes`: the
    backends' processed blobs, summed over partitions; `delegate_data_bytes`: the named data
    the backends put beside their blobs (XNNPACK's weights), each key once."""

    pte_bytes: int
    constant_bytes: int = 0
    delegate_blob_bytes: int = 0
    delegate_data_bytes: int = 0

    def to_json(self) -> dict[str, int]:
        return {
            "pte_bytes": self.pte_bytes,
            "constant_bytes": self.constant_bytes,
            "delegate_blob_bytes": self.delegate_blob_bytes,
            "delegate_data_bytes": self.delegate_data_bytes,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any] | None) -> ProgramSizes | None:
        if not raw or raw.get("pte_bytes") is None:
            return None
        return cls(
            int(raw["pte_bytes"]),
            int(raw.get("constant_bytes") or 0),
            int(raw.get("delegate_blob_bytes") or 0),
            int(raw.get("delegate_data_bytes") or 0),
        )


@dataclass(frozen=True)
class SourceSite:
    """Where a definition is: a file named like the report's (relative to the root when inside
    it), its line, and for a method's module the class name."""

    file: str
    line: int | None = None
    name: str | None = None

    def to_json(self) -> dict[str, Any]:
        raw: dict[str, Any] = {"file": self.file, "line": self.line}
        if self.name is not None:
            raw["name"] = self.name
        return raw

    @classmethod
    def from_json(cls, raw: Mapping[str, Any] | None) -> SourceSite | None:
        if not raw or raw.get("file") is None:
            return None
        return cls(str(raw["file"]), raw.get("line"), raw.get("name"))


@dataclass(frozen=True)
class TargetCoverage:
    """Coverage over every method of a target: {"percent", "backends"}, the backends' display
    names that took ops, most ops first. The same rounding rule as a method's."""

    percent: int
    backends: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"percent": self.percent, "backends": list(self.backends)}

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


@dataclass
class TargetResult:
    name: str
    status: Status
    seconds: float = 0.0
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
    # last build (a comment or unrelated edit), so its .pte was kept; "up-to-date" when nothing
    # the last build read or wrote changed, answered from its record without a build.
    reused: str | None = None
    # Memoized stages besides blobs, by memo kind: {"qparams": {"hits": h, "misses": m}}.
    memo: dict[str, dict[str, int]] = field(default_factory=dict)
    # The partitioner options each backend was built with ([tool.lowerd] backend_options), by
    # backend name; only the backends given any.
    backend_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The .ptd and .etrecord files written beside the output, in the order written.
    data_files: list[DataFile] = field(default_factory=list)
    # The edge and emit configs, transform_passes and constant_methods given to ExecuTorch
    # (TargetConfig.lowering_options()): only those the target sets.
    options: dict[str, Any] = field(default_factory=dict)
    # The declared quantization scheme ([tool.lowerd.targets.T.quantize] scheme), if any.
    quantize: str | None = None
    # The .pte's size and what makes it up; None for a failed build and in older records.
    sizes: ProgramSizes | None = None

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

    @classmethod
    def up_to_date(
        cls, name: str, recorded: Mapping[str, Any], seconds: float = 0.0
    ) -> TargetResult:
        """The last build's result from its build record, answered without building (in
        `seconds`): nothing was served from the cache this time."""
        result = cls.from_json(recorded)
        cache = CacheSummary()
        return replace(result, name=name, reused="up-to-date", cache=cache, seconds=seconds)

    @classmethod
    def partitioned(
        cls, name: str, method: str, report: MethodReport, last: TargetResult | None
    ) -> TargetResult:
        """What the editor shows while a build still runs: a method's report as soon as it is
        partitioned (or the last build's, provisionally), laid over the last result's methods
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
    def coverage(self) -> TargetCoverage:
        return TargetCoverage.of(self.methods)

    # The JSON edge ---------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "output": self.output,
            "sha256": self.sha256,
            "seconds": round(self.seconds, 3),
            "reused": self.reused,
            "cache": self.cache.to_json(),
            "methods": {name: report.to_json() for name, report in self.methods.items()},
            "error": self.error.to_json() if self.error else None,
            "entry": self.entry.to_json() if self.entry else None,
            "modules": {name: site.to_json() for name, site in self.modules.items()},
            "memo": {kind: dict(counts) for kind, counts in self.memo.items()},
            "backend_options": {name: dict(opts) for name, opts in self.backend_options.items()},
            "coverage": self.coverage.to_json(),
            "data_files": [data_file.to_json() for data_file in self.data_files],
            "quantize": self.quantize,
            "options": dict(self.options),
            "sizes": self.sizes.to_json() if self.sizes is not None else None,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> TargetResult:
        """A result from its JSON; a record written by an older lowerd (no memo, no modules, no
        computed fields) reads with their defaults."""
        status: Status = "ok" if raw.get("status") == "ok" else "error"
        error = raw.get("error")
        modules = {
            method: site
            for method, raw_site in (raw.get("modules") or {}).items()
            if (site := SourceSite.from_json(raw_site)) is not None
        }
        return cls(
            name=str(raw.get("name", "")),
            status=status,
            seconds=float(raw.get("seconds") or 0.0),
            output=raw.get("output"),
            sha256=raw.get("sha256"),
            cache=CacheSummary.from_json(raw.get("cache")),
            methods={
                name: MethodReport.from_json(report)
                for name, report in (raw.get("methods") or {}).items()
            },
            error=ErrorInfo.from_json(error) if error else None,
            entry=SourceSite.from_json(raw.get("entry")),
            modules=modules,
            reused=raw.get("reused"),
            memo={kind: dict(counts) for kind, counts in (raw.get("memo") or {}).items()},
            backend_options={
                name: dict(opts) for name, opts in (raw.get("backend_options") or {}).items()
            },
            data_files=[DataFile.from_json(f) for f in raw.get("data_files") or []],
            quantize=raw.get("quantize"),
            options=dict(raw.get("options") or {}),
            sizes=ProgramSizes.from_json(raw.get("sizes")),
        )


def remote_warnings(results: Iterable[TargetResult]) -> list[str]:
    """The remote tier's trouble, once however many targets met it: a tier that was down, a
    value that failed verification, uploads given up. For the CLI's lines and the editor's."""
    lines: dict[str, None] = {}
    for result in results:
        if result.cache.remote is not None:
            lines.update(dict.fromkeys(result.cache.remote.warnings()))
    return list(lines)
