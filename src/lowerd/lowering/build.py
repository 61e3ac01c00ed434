"""Build one target: load its entry, export its methods, lower them with ExecuTorch, write the .pte.

The lowering is ExecuTorch's own `to_edge_transform_and_lower(...).to_executorch()` with default
configs; lowerd only wraps the backends' preprocess with its cache and listens to the partitioners.
So the bytes written are the bytes a stock run produces. A target's `etrecord`,
`edge_compile_config`, `executorch_backend_config` (`external_constants`), `transform_passes` and
`constant_methods` keys are passed on as a script passes them, and what they make (the ETRecord,
the .ptd files) is written beside the .pte. A target's `partitioners` function gives the
partitioners instead of its backends'; its `whole_program` lowers each method whole to one
backend with backend_api.to_backend(backend_id, program, compile_specs), as ExecuTorch documents.
"""

from __future__ import annotations

import copy
import hashlib
import io
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from lowerd.cache.atomic import write_atomic
from lowerd.cache.store import BlobStore
from lowerd.cache.tiered import TieredStore
from lowerd.lowering.entry import LoadedEntry, MethodSpec, definition_site, load_entry
from lowerd.lowering.export_output import export_output_held
from lowerd.lowering.inputs import InputRecorder
from lowerd.lowering.program_fingerprint import ProgramFingerprint, fingerprint, moved_lines
from lowerd.lowering.rebuild_facts import kept_partitions, lowered_partitions
from lowerd.project.backends import BACKENDS, Backend, backend_by_details_class
from lowerd.project.build_state import (
    FileStamp,
    TargetState,
    data_file_path,
    discard_output,
    forget_state,
    inputs_digest,
    load_state,
    owned_data_files,
    save_state,
    stamp_files,
    target_inputs,
    why_not_kept,
)
from lowerd.project.config import ProjectConfig, TargetConfig
from lowerd.project.errors import (
    BackendUnavailableError,
    EntryError,
    ExportError,
    LowerdError,
    LoweringError,
)
from lowerd.project.rebuild_record import (
    PartitionFacts,
    line_checksums,
    record_rebuild,
)
from lowerd.project.report_model import MethodReport
from lowerd.project.result import (
    CacheSummary,
    DataFile,
    ProgramSizes,
    SourceSite,
    TargetResult,
)
from lowerd.project.source_map import UserFiles

if TYPE_CHECKING:  # imported where used: the engine's modules load on a build's first need
    from lowerd.lowering.preprocess_cache import PreprocessCache
    from lowerd.lowering.reasons import PartitionReasons

# stage, target name, detail ("3/42" during preprocess)
Progress = Callable[[str, str, str | None], None]
# method name, its report as soon as partitioning is done (before preprocess): editors show
# coverage while the slow part still runs.
Partitioned = Callable[[str, MethodReport], None]
Stage = Literal["load", "quantize", "export", "partition", "preprocess", "emit", "write"]


def build_target(
    config: ProjectConfig,
    target: TargetConfig,
    store: BlobStore | None,
    progress: Progress | None = None,
    reuse: bool = True,
    on_partitioned: Partitioned | None = None,
) -> TargetResult:
    """Build one target; a failure is returned as an error result, never raised.

    With `reuse`, a target whose methods export to the programs of its last build keeps its .pte.
    """
    started = time.perf_counter()
    builder = _TargetBuilder(config, target, store, progress or (lambda *_: None), on_partitioned)
    try:
        earlier = load_state(config, target)
        result = builder.run(started, earlier if reuse else None, earlier)
    except LowerdError as error:
        discard_output(config, target)
        if error.location.file:  # named like the report's source lines: relative to the root
            error.location.file = builder.user_files.display(error.location.file)
        seconds = time.perf_counter() - started
        result = TargetResult(
            target.name, "error", seconds, error=error.info(), entry=builder.entry_site()
        )
    return _with_remote_report(result, store)


def _with_remote_report(result: TargetResult, store: BlobStore | None) -> TargetResult:
    """The result with the remote tier's part in the build, once its uploads are done."""
    report = store.finish_remote() if isinstance(store, TieredStore) else None
    if report is None:
        return result
    return replace(result, cache=result.cache.with_remote(report))


class _TargetBuilder:
    def __init__(
        self,
        config: ProjectConfig,
        target: TargetConfig,
        store: BlobStore | None,
        progress: Progress,
        on_partitioned: Partitioned | None,
    ):
        self.config = config
        self.target = target
        self.store = store
        self.progress = progress
        self.on_partitioned = on_partitioned
        self.user_files = UserFiles(config.root)
        self.entry: LoadedEntry | None = None
        self.transform_passes: Any = None  # what the target's transform_passes function returned
        self.custom_partitioners: list[Any] | None = None  # what its partitioners function returned
        self.methods: dict[str, MethodSpec] = {}
        self.partitions_expected = 0
        self.partitions_done = 0
        self.started_ns = time.time_ns()  # a source modified after this was maybe not read
        # For the build record's account of this build (project/rebuild_record.py): why the
        # program was lowered (None: the earlier .pte kept) and its partitions.
        self.why_lowered: str | None = None
        self.partitions: list[PartitionFacts] = []

    def run(
        self, started: float, previous: TargetState | None, earlier: TargetState | None
    ) -> TargetResult:
        """`previous`: the record whose .pte may be kept (None: lower afresh); `earlier`: the
        record this build is explained against."""
        from lowerd.lowering.qparam_memo import QParamMemo

        recorder = InputRecorder(self.user_files, exclude=self.config.out_dir)
        qparams = QParamMemo(self.store)
        with recorder.recording():
            self._stage("load")
            with qparams.installed():  # the entry quantizes: convert_pt2e runs the searches
                self.entry = entry = load_entry(self.config, self.target)
                methods = self._quantize(entry.methods)  # [quantize]: the same searches
            self.transform_passes = self._load_transform_passes()
            self.custom_partitioners = self._load_partitioners()
            self.methods = methods
            exported = self._export(methods)
        program = fingerprint(
            exported,
            self.target.backends,
            self.user_files,
            self.target.used_backend_options(),
            self.target.lowering_options(),
        )
        if previous is None and earlier is not None:
            self.why_lowered = "asked to lower afresh (reuse off)"
        else:
            digests = program.digests if program else None
            self.why_lowered = why_not_kept(self.config, self.target, previous, digests)
        if self.why_lowered is None and previous and program:
            result = self._reuse(previous, program, started)
        else:
            self._report_provisionally(previous, program)
            result = self._lower_and_write(exported, started)
        result.entry = self.entry_site()
        result.modules = self._module_sites(entry)
        result.backend_options = self.target.used_backend_options()
        result.options = self.target.lowering_options()
        result.quantize = self.target.quantize.scheme if self.target.quantize else None
        if qparams.hits or qparams.misses:
            result.memo["qparams"] = qparams.counts()
        self._record_state(result, recorder, program, earlier)
        return result

    def entry_site(self) -> SourceSite | None:
        if self.entry is None or self.entry.file is None:
            return None
        return SourceSite(self.user_files.display(self.entry.file), self.entry.line)

    def _module_sites(self, entry: LoadedEntry) -> dict[str, SourceSite]:
        sites = {}
        for name, method in entry.methods.items():
            site = definition_site(type(method.module))
            if site[0] is not None and self.user_files.owns(site[0]):
                sites[name] = SourceSite(
                    self.user_files.display(site[0]), site[1], type(method.module).__name__
                )
        return sites

    def _reuse(
        self, previous: TargetState, program: ProgramFingerprint, started: float
    ) -> TargetResult:
        """The last build's .pte and report, its source lines moved to where the code is now."""
        methods = _previous_reports(previous, program)
        recorded = previous.report
        self.partitions = kept_partitions(
            methods, previous.rebuild.partitions if previous.rebuild else []
        )
        return TargetResult(
            name=self.target.name,
            status="ok",
            seconds=time.perf_counter() - started,
            output=previous.output.path,
            sha256=previous.output.sha256,
            methods=methods,
            reused="same-program",
            data_files=recorded.data_files,
            sizes=recorded.sizes,  # the same .pte
        )

    def _report_provisionally(
        self, previous: TargetState | None, program: ProgramFingerprint | None
    ) -> None:
        """Right after export, the last build's decisions at the lines where the code is now:
        an editor has them in a second, marked provisional, while edge generation and
        partitioning take seconds; the partitioned report replaces them."""
        if previous is None or program is None or self.on_partitioned is None:
            return
        for name, report in _previous_reports(previous, program).items():
            report.final, report.provisional = False, True
            self.on_partitioned(name, report)

    def _lower_and_write(self, exported: dict[str, Any], started: float) -> TargetResult:
        edge, reports, preprocess = self._lower(exported)
        self.partitions = lowered_partitions(edge, reports, preprocess)
        self._stage("emit")
        buffer, manager = self._emit(edge)
        sizes = _sizes(manager, len(buffer), reports)
        self._stage("write")
        output = self.config.output_path(self.target.name)
        output.parent.mkdir(parents=True, exist_ok=True)
        stale = owned_data_files(self.config, self.target)
        # The data files first: a reader that sees the new .pte finds its data beside it.
        data_files = self._write_data_files(manager)
        # Readers see the old .pte or the new one, never a half-written one; others may read it.
        write_atomic(output, buffer, mode=0o644)
        for path in stale - {Path(data_file.path) for data_file in data_files}:
            path.unlink(missing_ok=True)
        return TargetResult(
            name=self.target.name,
            status="ok",
            seconds=time.perf_counter() - started,
            output=str(output),
            sha256=hashlib.sha256(buffer).hexdigest(),
            cache=CacheSummary(preprocess.hits, preprocess.misses, preprocess.rebased),
            methods=reports,
            data_files=data_files,
            sizes=sizes,
        )

    def _write_data_files(self, manager: Any) -> list[DataFile]:
        """What ExecutorchProgramManager.write_tensor_data_to_file would write (one .ptd per tag
        of its external data), then the ETRecord, each atomically beside the .pte."""
        written: list[tuple[Path, bytes, str]] = []
        for tag, cord in sorted((manager._tensor_data or {}).items()):
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", tag):
                raise self._blame(
                    LoweringError, ValueError(tag), f"external data tag {tag!r} names no file"
                )
            path = data_file_path(self.config, self.target, "ptd", tag)
            written.append((path, bytes(cord), "ptd"))
        if self.target.etrecord:
            etrecord = io.BytesIO()
            try:
                manager.get_etrecord().save(etrecord)
            except Exception as error:
                raise self._blame(LoweringError, error, "saving the ETRecord failed") from error
            path = data_file_path(self.config, self.target, "etrecord")
            written.append((path, etrecord.getvalue(), "etrecord"))
        data_files = []
        for path, data, kind in written:
            write_atomic(path, data, mode=0o644)
            data_files.append(DataFile(str(path), hashlib.sha256(data).hexdigest(), kind))
        return data_files

    def _record_state(
        self,
        result: TargetResult,
        recorder: InputRecorder,
        program: ProgramFingerprint | None,
        earlier: TargetState | None,
    ) -> None:
        sources = stamp_files(recorder.files())
        if any(source.mtime_ns >= self.started_ns - _MTIME_GRANULARITY_NS for source in sources):
            # Saved while this build ran: the build may have read the old text, and a record
            # stamped with the new one would answer "up to date" with the old program's report.
            forget_state(self.config, self.target)
            return
        inputs = target_inputs(self.config, self.target)
        state = TargetState(
            target=self.target.name,
            inputs_digest=inputs_digest(inputs),
            inputs=inputs,
            sources=sources,
            source_lines=line_checksums(source.path for source in sources),
            # every result of run() has an output; its digest and the data files' are known
            output=FileStamp.of(Path(result.output or ""), result.sha256),
            data_files=[FileStamp.of(Path(f.path), f.sha256) for f in result.data_files],
            method_digests=program.digests if program else {},
            method_lines=program.lines if program else {},
            report=result,
        )
        state.rebuild = record_rebuild(
            self.config.root, earlier, state, self.why_lowered, self.partitions
        )
        save_state(self.config, self.target, state)

    def _stage(self, stage: Stage, detail: str | None = None) -> None:
        self.progress(stage, self.target.name, detail)

    def _quantize(self, methods: dict[str, MethodSpec]) -> dict[str, MethodSpec]:
        """Each method quantized by ExecuTorch's PT2E flow, when the target declares it."""
        quantize = self.target.quantize
        if quantize is None:
            return methods
        from lowerd.lowering.quantize import calibration_samples, quantize_method

        self._stage("quantize")
        samples = calibration_samples(self.config, self.target, quantize, list(methods))
        quantized = {}
        for name, method in methods.items():
            self._stage("quantize", name)
            quantized[name] = quantize_method(method, quantize, samples.get(name), self._blame)
        return quantized

    def _export(self, methods: dict[str, MethodSpec]) -> dict[str, Any]:
        import torch

        exported = {}
        for name, method in methods.items():
            self._stage("export", name)
            try:
                with export_output_held():  # torch's own account of a failure: ours says it
                    exported[name] = torch.export.export(
                        method.module, method.args, dynamic_shapes=method.dynamic_shapes
                    )
            except Exception as error:
                raise self._blame(ExportError, error, f"torch.export of {name!r} failed") from error
        return exported

    def _load_transform_passes(self) -> Any:
        """What the target's `transform_passes = "file.py:fn"` function returns (passes for
        to_edge_transform_and_lower); None without one. Its module is a recorded input."""
        reference = self.target.transform_passes
        if not reference:
            return None
        from lowerd.lowering.entry import find_function

        function = find_function(self.config, self.target, reference, "transform_passes")
        try:
            passes = function()
        except Exception as error:
            raise self._blame(
                EntryError, error, f"transform_passes {reference.value} raised"
            ) from error
        if passes is None:
            raise EntryError(
                f"transform_passes {reference.value} returned None; it returns a list of passes",
                self.config.path,
                reference.line,
            )
        return passes

    def _load_partitioners(self) -> list[Any] | None:
        """What the target's `partitioners = "file.py:fn"` function returns: a list of
        Partitioner instances; None without one. Its module is a recorded input."""
        reference = self.target.partitioners
        if not reference:
            return None
        from executorch.exir.backend.partitioner import Partitioner

        from lowerd.lowering.entry import find_function

        function = find_function(self.config, self.target, reference, "partitioners")
        try:
            partitioners = function()
        except Exception as error:
            raise self._blame(
                EntryError, error, f"partitioners {reference.value} raised"
            ) from error
        if (
            not isinstance(partitioners, list | tuple)
            or not partitioners
            or not all(isinstance(p, Partitioner) for p in partitioners)
        ):
            file, def_line = definition_site(function)
            got = (
                f"a {type(partitioners).__name__}"
                if not isinstance(partitioners, list | tuple)
                else "[" + ", ".join(type(p).__name__ for p in partitioners) + "]"
            )
            raise EntryError(
                f"partitioners {reference.value} returned {got}; it returns a non-empty list of "
                "Partitioner instances, like [XnnpackPartitioner()]",
                file or self.config.path,
                def_line if file else reference.line,
            )
        return list(partitioners)

    def _partitioners(self, reasons: Any, methods: list[str]) -> tuple[list[Any], list[str]]:
        """The partitioners, each wrapped to be listened to (its reasons; the last one's report
        as soon as a method is partitioned), and the display names of their backends (a known
        backend by its name, another by its backend id)."""
        from functools import partial

        from lowerd.lowering.observed_partitioner import observe

        if self.custom_partitioners is not None:
            partitioners = self.custom_partitioners
            displays = [_display_of(partitioner) for partitioner in partitioners]
        else:
            backends = [BACKENDS[name] for name in self.target.backends]
            options = self.target.backend_options
            partitioners = [self._partitioner(b, options.get(b.name)) for b in backends]
            displays = [b.display for b in backends]
        # The last partitioner to run sees each method's final split into partitions.
        on_result = self._report_when_partitioned(displays, methods, reasons)
        observed = []
        for index, (partitioner, display) in enumerate(zip(partitioners, displays, strict=True)):
            reasons.note_configs(partitioner, display)
            last = index == len(partitioners) - 1
            listening = partial(reasons.listening, display)
            observed.append(observe(partitioner, listening, on_result if last else None))
        return observed, displays

    def _partitioner(self, backend: Backend, options: Mapping[str, Any] | None) -> Any:
        """The backend's partitioner; one whose package is not installed (coremltools) is an
        error at the target's table, instead of a traceback from the import."""
        from lowerd.lowering.partitioners import make_partitioner

        try:
            return make_partitioner(backend, options)
        except ImportError as error:
            raise BackendUnavailableError(
                f"{backend.display}'s partitioner cannot be loaded: {error}",
                self.config.path,
                self.target.line,
            ) from error

    def _lower(self, exported: dict[str, Any]) -> tuple[Any, dict[str, MethodReport], Any]:
        if self.target.whole_program:
            return self._lower_whole_program(exported)
        from lowerd.lowering.edge_speedups import EdgeSpeedups
        from lowerd.lowering.vulkan_patterns import pattern_graphs_made_once
        from lowerd.lowering.xnnpack_passes import XnnpackPassSkips

        speedups = EdgeSpeedups(self.store)
        pass_skips = XnnpackPassSkips()
        with speedups.op_table_served():  # ExecuTorch's first import in a process parses it
            from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

        from lowerd.lowering.preprocess_cache import PreprocessCache
        from lowerd.lowering.reasons import PartitionReasons

        self._stage("partition")
        reasons = PartitionReasons()
        partitioners, displays = self._partitioners(reasons, list(exported))
        preprocess = PreprocessCache(self.store, on_preprocess=self._preprocessed)
        try:
            with (
                preprocess.installed(),
                speedups.installed(),
                pass_skips.installed(),
                pattern_graphs_made_once(),
            ):
                edge = to_edge_transform_and_lower(
                    exported,
                    transform_passes=self.transform_passes,
                    partitioner=partitioners,
                    constant_methods=self.target.constant_methods or None,
                    compile_config=EdgeCompileConfig(**self.target.edge_compile_config),
                    generate_etrecord=self.target.etrecord,
                )
        except LowerdError:
            raise
        except Exception as error:
            raise self._blame(LoweringError, error, "ExecuTorch lowering failed") from error
        return edge, self._method_reports(edge, exported, reasons, preprocess, displays), preprocess

    def _lower_whole_program(
        self, exported: dict[str, Any]
    ) -> tuple[Any, dict[str, MethodReport], Any]:
        """ExecuTorch's documented whole-module lowering, per method: to_edge, then
        `to_backend(backend_id, edge.exported_program(method), compile_specs)`, the lowered module
        called by a module exported and taken to edge again (to_executorch follows)."""
        import torch

        from lowerd.lowering.edge_speedups import EdgeSpeedups

        speedups = EdgeSpeedups(self.store)
        with speedups.op_table_served():
            from executorch.exir import EdgeCompileConfig, to_edge
        from executorch.exir.backend.backend_api import to_backend
        from executorch.exir.backend.compile_spec_schema import CompileSpec

        from lowerd.lowering.preprocess_cache import PreprocessCache
        from lowerd.lowering.reasons import PartitionReasons

        class WholeProgram(torch.nn.Module):  # the documented composite: calls the lowered module
            def __init__(self, lowered_module: Any):
                super().__init__()
                self.lowered_module = lowered_module

            def forward(self, *args: Any) -> Any:
                return self.lowered_module(*args)

        assert self.target.whole_program is not None  # the route of a whole_program target
        whole_program = self.target.whole_program.value
        backend_id = whole_program["backend_id"]
        display = _display_of_id(backend_id)
        specs = [CompileSpec(k, v.encode()) for k, v in whole_program["compile_specs"].items()]
        self._stage("partition")
        self.partitions_expected = len(exported)
        preprocess = PreprocessCache(self.store, on_preprocess=self._preprocessed)
        lowered_programs = {}
        with preprocess.installed():
            try:
                edge = to_edge(
                    exported, compile_config=EdgeCompileConfig(**self.target.edge_compile_config)
                )
            except Exception as error:
                raise self._blame(LoweringError, error, "ExecuTorch lowering failed") from error
            for name in exported:
                try:
                    lowered = to_backend(backend_id, edge.exported_program(name), specs)
                except Exception as error:
                    raise self._blame(
                        LoweringError, error, f"{display} refused method {name!r}"
                    ) from error
                try:
                    method = self.methods[name]
                    lowered_programs[name] = torch.export.export(
                        WholeProgram(lowered),
                        method.args,
                        dynamic_shapes=_var_positional_shapes(method),
                    )
                except Exception as error:
                    raise self._blame(LoweringError, error, "ExecuTorch lowering failed") from error
        try:
            lowered_edge = to_edge(
                lowered_programs,
                constant_methods=self.target.constant_methods or None,
                compile_config=EdgeCompileConfig(**self.target.edge_compile_config),
                generate_etrecord=self.target.etrecord,
            )
        except Exception as error:
            raise self._blame(LoweringError, error, "ExecuTorch lowering failed") from error
        reports = self._method_reports(
            lowered_edge, exported, PartitionReasons(), preprocess, [display]
        )
        return lowered_edge, reports, preprocess

    def _method_reports(
        self,
        edge: Any,
        methods: Iterable[str],
        reasons: PartitionReasons,
        preprocess: PreprocessCache,
        displays: list[str],
    ) -> dict[str, MethodReport]:
        from lowerd.lowering.report import method_report

        return {
            name: method_report(
                edge.exported_program(name).graph_module,
                self.user_files,
                reasons,
                preprocess,
                displays,
            )
            for name in methods
        }

    def _report_when_partitioned(
        self, displays: list[str], methods: list[str], reasons: Any
    ) -> Callable[[Any], None]:
        from lowerd.lowering.report import partitioned_report

        # ExecuTorch partitions the methods in order, each once per partitioner.
        remaining = iter(methods)

        def report(result: Any) -> None:
            method = next(remaining, None)
            graph = result.tagged_exported_program.graph_module
            report = partitioned_report(graph, displays[-1], self.user_files, reasons, displays)
            self.partitions_expected += sum(
                1 for p in report.partitions if p.backend == displays[-1]
            )
            if method is not None and self.on_partitioned is not None:
                self.on_partitioned(method, report)

        return report

    def _preprocessed(self, record: Any) -> None:
        self.partitions_done += len(record.blob_digests)
        self._stage("preprocess", f"{self.partitions_done}/{max(self.partitions_expected, 1)}")

    def _emit(self, edge: Any) -> tuple[bytes, Any]:
        """The .pte's bytes and the ExecutorchProgramManager (its external data, its ETRecord)."""
        try:
            from executorch.exir import ExecutorchBackendConfig

            # ExecutorchBackendConfig() is to_executorch's own default.
            manager = edge.to_executorch(
                ExecutorchBackendConfig(**self.target.executorch_backend_config)
            )
            return bytes(manager.buffer), manager
        except Exception as error:
            raise self._blame(LoweringError, error, "ExecuTorch emission failed") from error

    def _blame(self, kind: type[LowerdError], error: Exception, doing: str) -> LowerdError:
        """At the user's innermost frame if the failure passed through one, else at the entry."""
        source = self.user_files.innermost_in_exception(error)
        if source is not None:
            return kind(f"{doing}: {_summary(error)}", source.file, source.line)
        if self.entry is None:
            return kind(f"{doing}: {_summary(error)}")
        return kind(f"{doing}: {_summary(error)}", self.entry.file, self.entry.line)


def _display_of(partitioner: Any) -> str:
    """A partitioner's backend as the report names it: by the backend id its delegation spec
    names (a known backend by its display name)."""
    spec = getattr(partitioner, "delegation_spec", None)
    backend_id = getattr(spec, "backend_id", None)
    return _display_of_id(backend_id) if isinstance(backend_id, str) else type(partitioner).__name__


def _display_of_id(backend_id: str) -> str:
    backend = backend_by_details_class(backend_id)
    return backend.display if backend else backend_id


def _sizes(manager: Any, pte_bytes: int, reports: dict[str, MethodReport]) -> ProgramSizes:
    """The program's sizes; each method's (planned memory, constants) put on its report."""
    from lowerd.lowering.program_sizes import program_sizes

    sizes, methods = program_sizes(manager, pte_bytes)
    for name, report in reports.items():
        if name in methods:
            report.planned_memory_bytes = methods[name].planned_memory_bytes
            report.constant_bytes = methods[name].constant_bytes
    return sizes


def _previous_reports(
    previous: TargetState, program: ProgramFingerprint
) -> dict[str, MethodReport]:
    """The last build's method reports, for the methods the program still has, their source lines
    moved to where the code is now."""
    methods = {}
    for name, report in previous.report.methods.items():
        if name in program.lines:
            moves = moved_lines(previous.method_lines.get(name, []), program.lines[name])
            methods[name] = copy.deepcopy(report).with_lines_moved(moves)
    return methods


# File systems stamp mtimes with a coarse clock (a few ms behind time.time_ns()): a file saved
# just after a build started can carry an mtime just before it.
_MTIME_GRANULARITY_NS = 50_000_000


# Advice torch appends to its errors about its own debugging switches: noise next to a file:line.
_TORCH_HINT = re.compile(
    r"^(For more|For extended|If you suspect|For C\+\+|The error above occurred|Caused by:"
    r"|The following call raised this error)"
)


def _summary(error: Exception, max_lines: int = 8) -> str:
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    kept = []
    for line in lines:
        if _TORCH_HINT.match(line):
            break  # the hints come last; what follows them is the call site we already report
        kept.append(line)
    text = "\n".join(kept[:max_lines])
    if len(kept) > max_lines:
        text += f"\n... ({len(kept) - max_lines} more lines)"
    return f"{type(error).__name__}: {text}"


def _var_positional_shapes(method: MethodSpec) -> Any:
    """The method's dynamic shapes for a `forward(*args)` that takes its arguments in order:
    one entry, `args`, holding a shape per positional argument. A dict keyed by the original
    forward's parameter names is put in that order."""
    import inspect

    shapes = method.dynamic_shapes
    if shapes is None:
        return None
    if isinstance(shapes, dict):
        names = list(inspect.signature(method.module.forward).parameters)[: len(method.args)]
        shapes = tuple(shapes.get(name) for name in names)
    return {"args": tuple(shapes)}
