"""Build one target: load its entry, export its methods, lower them with ExecuTorch, write the .pte.

The lowering is ExecuTorch's own `to_edge_transform_and_lower(...).to_executorch()` with default
configs; lowerd only wraps the backends' preprocess with its cache and listens to the partitioners.
So the bytes written are the bytes a stock run produces. A target's `etrecord`,
`edge_compile_config`, `executorch_backend_config` (`external_constants`), `transform_passes` and
`constant_methods` keys are passed on as a script passes them, and what they make (the ETRecord,
the .ptd files) is written beside the .pte. A target's `partitioners` function gives the
partitioners instead of its backends'; its `whole_program` lowers each method whole to one
backend with backend_api.to_backend(backend_id, program, compile_specs), as ExecuTorch documents.

The build runs as typed stages, each returning a new frozen record (lowering/stages.py says which
and how a new stage plugs in); this module runs them in order, records what the build read and
made (project/build_state.py), and makes the TargetResult once, from the records.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from lowerd.cache.remote import RemoteReport
from lowerd.cache.store import BlobStore
from lowerd.cache.tiered import TieredStore
from lowerd.lowering.bundle import bundle_emitted, bundle_kept
from lowerd.lowering.edited_region import EditedRegion, edited_regions
from lowerd.lowering.emission import emit
from lowerd.lowering.inputs import InputRecorder
from lowerd.lowering.loading import export, load, module_trees, quantize
from lowerd.lowering.lower import choose_route, lower
from lowerd.lowering.outputs import keep, write
from lowerd.lowering.provenance_speedups import provenance_shared
from lowerd.lowering.recipe import with_recipe
from lowerd.lowering.reuse import Reuse, decide_reuse, previous_build
from lowerd.lowering.route import LoweringRoute
from lowerd.lowering.stages import (
    BuildContext,
    Built,
    Emitted,
    EmittedStage,
    Exported,
    Loaded,
    Partitioned,
    Progress,
    Written,
)
from lowerd.lowering.token_keep import keep_same_source
from lowerd.lowering.verify import refused_by_runtime, verify_written
from lowerd.lowering.verify_reference import eager_reference
from lowerd.project.build_state import (
    FileStamp,
    TargetState,
    discard_output,
    forget_state,
    inputs_digest,
    load_state,
    save_state,
    stamp_files,
    state_path,
    target_inputs,
)
from lowerd.project.config import ProjectConfig, TargetConfig
from lowerd.project.disk_errors import record_written, still_there
from lowerd.project.errors import LowerdError
from lowerd.project.library_stamp import LibraryStamp, imported_library_files
from lowerd.project.loadability import RuntimeCheck
from lowerd.project.rebuild_record import line_checksums, record_rebuild
from lowerd.project.result import CacheSummary, ErrorInfo, SourceSite, TargetResult
from lowerd.project.source_tokens import recorded_tokens

if TYPE_CHECKING:  # imported where used: they import torch, which a build loads on first need
    from lowerd.lowering.intx_memo import IntxMemo
    from lowerd.lowering.qparam_memo import QParamMemo

__all__ = ["Partitioned", "Progress", "build_target"]

# The stages run between emission and writing, in order (lowering/stages.py EmittedStage): where
# a check of the emitted program, or a recipe's rewrite of it, plugs in. Verification is not one:
# it runs after the write, once the result without it went out (_verified).
AFTER_EMIT: tuple[EmittedStage, ...] = (bundle_emitted,)

# File systems stamp mtimes with a coarse clock (a few ms behind time.time_ns()): a file saved
# just after a build started can carry an mtime just before it.
_MTIME_GRANULARITY_NS = 50_000_000


def build_target(
    config: ProjectConfig,
    target: TargetConfig,
    store: BlobStore | None,
    progress: Progress | None = None,
    reuse: bool = True,
    on_partitioned: Partitioned | None = None,
    bench: bool = False,
    on_built: Built | None = None,
) -> TargetResult:
    """Build one target; a failure is returned as an error result, never raised.

    With `reuse`, a target whose methods export to the programs of its last build keeps its .pte.
    With `bench`, a verifying target's latency is measured again. A verifying target's result
    goes to `on_built` once its .pte is written, before the verification; the one returned has
    the verification.
    """
    ctx = BuildContext.start(config, target, store, progress or _quiet, on_partitioned)
    ctx = replace(ctx, bench=bench, on_built=on_built)
    with provenance_shared():  # exact: provenance_speedups.py
        outcome = _run(ctx, reuse)
    # The remote tier's part in the build, once its uploads are done (the build record, saved
    # before, keeps the result without it: the part is this run's, not the .pte's).
    remote = store.finish_remote() if isinstance(store, TieredStore) else None
    result = outcome.result(remote)
    if store is not None and (problems := store.warnings()):  # a full or broken cache folder
        result = replace(result, cache=replace(result.cache, problems=tuple(problems)))
    return result


@dataclass(frozen=True)
class _Built:
    """A build that made the target's .pte or kept the last one: what its result is made of."""

    ctx: BuildContext
    loaded: Loaded
    written: Written
    memo: Mapping[str, Mapping[str, int]]  # memoized stages besides blobs: {"qparams": counts}
    runtime: RuntimeCheck  # the .pte's needs checked against its runtime
    warnings: tuple[str, ...] = ()  # TargetResult.warnings: a build record not written

    def result(self, remote: RemoteReport | None) -> TargetResult:
        target, written = self.ctx.target, self.written
        return TargetResult(
            name=target.name,
            status="ok",
            seconds=written.seconds,
            output=written.output,
            sha256=written.sha256,
            cache=written.cache.with_remote(remote) if remote else written.cache,
            methods=dict(written.methods),
            entry=self.loaded.entry_site,
            modules=dict(self.loaded.module_sites),
            reused=written.reused,
            memo={kind: dict(counts) for kind, counts in self.memo.items()},
            backend_options=target.used_backend_options(),
            data_files=list(written.data_files),
            options=target.shown_options(),
            quantize=target.quantize.scheme if target.quantize else None,
            sizes=written.sizes,
            runtime=self.runtime,
            verification=written.verification,
            warnings=self.warnings or None,
        )


@dataclass(frozen=True)
class _Failed:
    """A build that failed: why, at the user's line, and the entry's site when it was loaded."""

    name: str
    error: ErrorInfo
    seconds: float
    entry: SourceSite | None

    def result(self, remote: RemoteReport | None) -> TargetResult:
        cache = CacheSummary().with_remote(remote) if remote else CacheSummary()
        return TargetResult(
            self.name, "error", self.seconds, cache=cache, error=self.error, entry=self.entry
        )


@dataclass(frozen=True)
class _Answered:
    """A build answered without loading the entry (lowering/token_keep.py)."""

    answer: TargetResult

    def result(self, remote: RemoteReport | None) -> TargetResult:
        cache = self.answer.cache
        return replace(self.answer, cache=cache.with_remote(remote) if remote else cache)


def _run(ctx: BuildContext, reuse: bool) -> _Built | _Failed | _Answered:
    """The stages in order; the last build's .pte kept when `reuse` and the program is its."""
    from lowerd.lowering.intx_memo import IntxMemo
    from lowerd.lowering.qparam_memo import QParamMemo

    loaded: Loaded | None = None
    try:
        earlier = load_state(ctx.config, ctx.target)
        # Only comments and layout changed: the last .pte, without loading the entry.
        if (answer := keep_same_source(ctx, earlier, reuse)) is not None:
            return _Answered(answer)
        recorder = InputRecorder(ctx.user_files, exclude=ctx.config.out_dir)
        qparams, intx = QParamMemo(ctx.store), IntxMemo(ctx.store)
        with recorder.recording():
            # The entry quantizes: convert_pt2e runs the searches, torchao's quantize_ makes
            # the intx weights; [quantize] runs the same.
            with qparams.installed(), intx.installed():
                loaded = load(ctx)
                trees = module_trees(loaded)  # before anything runs the model
                ctx = with_recipe(ctx.at_entry(loaded.entry))  # a recipe target's recipe
            route = choose_route(ctx)
            # The edited modules' refusals, lowered alone, before the whole program exports
            # and before a verifying target's eager run (none for a target that quantizes).
            regions = edited_regions(ctx, loaded, route, trees, earlier)
            with qparams.installed(), intx.installed():
                # The eager outputs to verify against: the float model's, before quantize.
                ctx = replace(ctx, reference=eager_reference(ctx, loaded))
                loaded = quantize(ctx, loaded)
            exported = export(ctx, loaded)
        decision = decide_reuse(
            ctx.target, exported, previous_build(ctx.config, ctx.target, earlier, reuse)
        )
        written, emitted = _keep_or_lower(ctx, exported, route, decision, regions)
        runtime = _check_runtime(ctx, loaded, written)
        built = _Built(ctx, loaded, written, _memo(qparams, intx), runtime)
        built = _verified(built, exported, emitted)
        said = record_written(
            ctx.config,
            ctx.target.name,
            state_path(ctx.config, ctx.target),
            lambda: _record(ctx, recorder, exported, decision, built, earlier, trees),
        )
        return replace(built, warnings=said)
    except LowerdError as error:
        kept = discard_output(ctx.config, ctx.target)
        info = error.info()
        info = replace(info, message=info.message + still_there(ctx.config, kept))
        if info.file:  # named like the report's source lines: relative to the root
            info = replace(info, file=ctx.user_files.display(info.file))
        entry = loaded.entry_site if loaded is not None else None
        return _Failed(ctx.target.name, info, ctx.seconds(), entry)


def _keep_or_lower(
    ctx: BuildContext,
    exported: Exported,
    route: LoweringRoute,
    decision: Reuse,
    regions: Mapping[str, EditedRegion],
) -> tuple[Written, Emitted | None]:
    """The .pte on disk, and the program emitted for it (None: the last build's, kept)."""
    if decision.kept is not None:
        return bundle_kept(ctx, keep(ctx, decision.kept, decision.reports)), None
    _report_provisionally(ctx, decision, regions)
    emitted = emit(ctx, lower(ctx, exported, route))
    for stage in AFTER_EMIT:
        emitted = stage(ctx, emitted)
    return write(ctx, emitted), emitted


def _verified(built: _Built, exported: Exported, emitted: Emitted | None) -> _Built:
    """The verify stage, last: the result without it goes out first (on_built), so that an
    editor's diagnostics never wait for the runtime, then the written program runs. A diverging
    op is looked for against the exported programs."""
    ctx = built.ctx
    if ctx.reference is None or not ctx.target.verify:
        return built
    if ctx.on_built is not None:
        ctx.on_built(built.result(remote=None))
    # A runtime declared ([runtime]) that would refuse it: no run on this host's stands in. (On
    # this host's own, the run below gives the runtime's own words.)
    if ctx.target.runtime.declared and not built.runtime.loads:
        return replace(built, written=refused_by_runtime(ctx, built.written, built.runtime))
    if emitted is not None:
        ctx = replace(ctx, reference=replace(ctx.reference, programs=exported.programs))
    return replace(built, written=verify_written(ctx, built.written, emitted))


def _check_runtime(ctx: BuildContext, loaded: Loaded, written: Written) -> RuntimeCheck:
    """The written .pte's needs against the target's runtime (lowering/loadability.py)."""
    from lowerd.lowering.loadability import check_runtime, needs_of_file

    needs = written.needs or needs_of_file(Path(written.output))
    entry = loaded.entry_site
    site = (entry.file, entry.line) if entry is not None else (None, None)
    return check_runtime(ctx.config, ctx.target, needs, dict(written.methods), site)


def _report_provisionally(
    ctx: BuildContext, decision: Reuse, regions: Mapping[str, EditedRegion]
) -> None:
    """Right after export, the last build's decisions at the lines where the code is now, the
    edited region's own (lowered alone) in place of the last build's there: an editor has them
    marked provisional while edge generation and partitioning take seconds; the partitioned
    report replaces them."""
    if ctx.on_partitioned is None:
        return
    for name, report in decision.reports.items():
        region = regions.get(name)
        shown = region.over(report) if region else replace(report, provisional=True)
        ctx.on_partitioned(name, replace(shown, final=False, provisional=True))


def _memo(qparams: QParamMemo, intx: IntxMemo) -> dict[str, dict[str, int]]:
    """Each memo's counts under its kind, if it was asked anything."""
    from lowerd.lowering import intx_memo, qparam_memo

    asked: dict[str, QParamMemo | IntxMemo] = {
        qparam_memo.MEMO_KIND: qparams,
        intx_memo.MEMO_KIND: intx,
    }
    return {kind: memo.counts() for kind, memo in asked.items() if memo.hits or memo.misses}


def _record(
    ctx: BuildContext,
    recorder: InputRecorder,
    exported: Exported,
    decision: Reuse,
    built: _Built,
    earlier: TargetState | None,
    trees: dict[str, dict[str, str]],
) -> None:
    """The build record: what the build read and wrote, so that an unchanged target is not
    built again, and why it did what it did, for `lowerd explain`."""
    sources = stamp_files(recorder.files())
    if any(source.mtime_ns >= ctx.started_ns - _MTIME_GRANULARITY_NS for source in sources):
        # Saved while this build ran: the build may have read the old text, and a record
        # stamped with the new one would answer "up to date" with the old program's report.
        forget_state(ctx.config, ctx.target)
        return
    inputs = target_inputs(ctx.config, ctx.target)
    program, written = exported.fingerprint, built.written
    as_code = [(s.path, s.sha256) for s in sources if Path(s.path) not in recorder.read_as_data()]
    libraries = imported_library_files(recorder.is_project_file)
    state = TargetState(
        target=ctx.target.name,
        inputs_digest=inputs_digest(inputs),
        inputs=inputs,
        sources=sources,
        source_lines=line_checksums(source.path for source in sources),
        output=FileStamp.of(Path(written.output), written.sha256),
        data_files=[FileStamp.of(Path(f.path), f.sha256) for f in written.data_files],
        method_digests=program.digests if program else {},
        method_lines=program.lines if program else {},
        report=built.result(remote=None),
        module_digests=trees,
        source_tokens=recorded_tokens(as_code),
        libraries=LibraryStamp.of(libraries),
    )
    why, partitions = decision.why_lowered, list(written.partitions)
    rebuild = record_rebuild(ctx.config.root, earlier, state, why, partitions)
    save_state(ctx.config, ctx.target, replace(state, rebuild=rebuild))


def _quiet(stage: str, target: str, detail: str | None) -> None:
    """The progress of a build no one watches."""
