"""A target's build as typed stages, after ExecuTorch's own chain: each stage returns a new record.

ExecuTorch lowers in steps that each give back a new manager (exir/program/_program.py: `to_edge`
an EdgeProgramManager, its `to_backend` a new one, `to_executorch` an ExecutorchProgramManager),
never changing the one they were given. lowerd's build (lowering/build.py) runs the same way, one
frozen record per stage, each stage a function of the build's context and the record before it:

    load(ctx) -> Loaded                  the entry loaded: its methods, where they are defined
    quantize(ctx, Loaded) -> Loaded      each method quantized (PT2E or torchao), when declared
    edited_regions(ctx, Loaded, ...) -> {method: EditedRegion}
                                         the modules an edit changed, lowered alone up to
                                         partitioning: a provisional report for an editor
    export(ctx, Loaded) -> Exported      torch.export of each method, and the program's fingerprint
    decide_reuse(target, Exported, PreviousBuild) -> Reuse
                                         keep the last .pte or lower: pure, reads no file
    keep(ctx, Reuse.kept, ...) -> Written
                                         the last build's .pte, its reports at the moved lines
    lower(ctx, Exported, route) -> Lowered
                                         the edge program with its delegates, reports, cache counts
    emit(ctx, Lowered) -> Emitted        the .pte's bytes, its data files' bytes, its sizes
    write(ctx, Emitted) -> Written       on disk, data files first, each atomically
    verify_written(ctx, Written, Emitted) -> Written
                                         the written program run on the host runtime, after
                                         the result without it went out (BuildContext.on_built)

(loading.py: load, quantize, export; edited_region.py: edited_regions; reuse.py: decide_reuse;
lower.py: lower, by one of the routes of route.py; emission.py: emit; outputs.py: write, keep.)
The TargetResult is made once, from the records, when the last stage is done.

A stage added later plugs in the same way: a function from the record before it to a new record.
One that changes the model before export is Loaded -> Loaded, as quantize is (a recipe target's
source transform is one: lowering/recipe.py runs ExecuTorch's ExportSession stages as lowerd's).
One that runs after emission (a bundled program) is an
`EmittedStage`, Emitted -> Emitted: it sees the buffer, the data files and the
ExecutorchProgramManager, raises a LowerdError to fail the build, or gives back an Emitted whose
bytes are the ones written (dataclasses.replace on the one it was given); build.py runs those of
AFTER_EMIT between emit and write. A kept .pte meets none of them: the target key that turns such
a stage on belongs in project/build_state.py target_inputs, so that turning it on lowers afresh.

The records hold what the stages after them and the result need, nothing else; each is frozen,
its mappings are never changed once made. Only observers of a running lowering count (the
progress of preprocess, the reasons a partitioner gives): they are not records.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from lowerd.cache.store import BlobStore
from lowerd.lowering.blame import Blame
from lowerd.lowering.entry import LoadedEntry
from lowerd.lowering.module_tree import nesting
from lowerd.project.config import ProjectConfig, TargetConfig
from lowerd.project.loadability import ProgramNeeds
from lowerd.project.method import Method
from lowerd.project.rebuild_record import PartitionFacts
from lowerd.project.report_model import MethodReport
from lowerd.project.result import CacheSummary, DataFile, ProgramSizes, SourceSite, TargetResult
from lowerd.project.source_map import UserFiles
from lowerd.project.verification import Verification

if TYPE_CHECKING:
    from lowerd.lowering.program_fingerprint import ProgramFingerprint

# stage, target name, detail ("3/42" during preprocess)
Progress = Callable[[str, str, str | None], None]
# method name, its report as soon as partitioning is done (before preprocess): editors show
# coverage while the slow part still runs.
Partitioned = Callable[[str, MethodReport], None]
# The build's result before its verification, once the .pte is written: an editor shows its
# diagnostics while the program runs on the host runtime (lowering/verify.py).
Built = Callable[[TargetResult], None]
# "source_transform": a recipe's torchao quantize_ of the eager model (lowering/recipe.py).
Stage = Literal[
    "load",
    "source_transform",
    "quantize",
    "export",
    "partition",
    "preprocess",
    "emit",
    "verify",
    "write",
]


@dataclass(frozen=True)
class BuildContext:
    """What every stage of one target's build reads and none changes."""

    config: ProjectConfig
    target: TargetConfig
    store: BlobStore | None
    progress: Progress
    on_partitioned: Partitioned | None
    user_files: UserFiles
    started: float  # time.perf_counter() when the build started: the result's seconds
    started_ns: int  # time.time_ns() then: a source modified after it was maybe not read
    blame: Blame  # at the entry, once it is loaded (at_entry)
    # ExecuTorch's ExportRecipe of a recipe target, made once the entry is loaded (with_recipe):
    # every stage configured by it (lowering/recipe.py). None for any other target.
    recipe: Any = None
    # What a verifying target's .pte must reproduce (lowering/verify_reference.py Reference),
    # taken once the entry is loaded; None when the target does not verify.
    reference: Any = None
    bench: bool = False  # measure the latency again, not take a verification's (`--bench`)
    on_built: Built | None = None

    @classmethod
    def start(
        cls,
        config: ProjectConfig,
        target: TargetConfig,
        store: BlobStore | None,
        progress: Progress,
        on_partitioned: Partitioned | None,
    ) -> BuildContext:
        started, started_ns = time.perf_counter(), time.time_ns()
        user_files = UserFiles(config.root)
        blame = Blame(user_files)
        return cls(
            config, target, store, progress, on_partitioned, user_files, started, started_ns, blame
        )

    def at_entry(self, entry: LoadedEntry) -> BuildContext:
        """The context once the entry is loaded: a failure that passed through none of the
        user's frames is blamed at the entry function."""
        deepest = max(nesting(method.module) for method in entry.methods.values())
        return replace(self, blame=Blame(self.user_files, entry.file, entry.line, deepest))

    def with_recipe(self, recipe: Any) -> BuildContext:
        return replace(self, recipe=recipe)

    def stage(self, stage: Stage, detail: str | None = None) -> None:
        self.progress(stage, self.target.name, detail)

    def seconds(self) -> float:
        return time.perf_counter() - self.started


@dataclass(frozen=True)
class Loaded:
    """The target's entry, called: its methods (quantized, after quantize) and where the entry
    function and each method's module class are defined (where editors put the summary)."""

    entry: LoadedEntry
    methods: Mapping[str, Method]
    entry_site: SourceSite | None
    module_sites: Mapping[str, SourceSite]


@dataclass(frozen=True)
class Exported:
    """Each method exported by torch.export, in the entry's order, with the program's
    fingerprint (None: a value with no stable digest, so the program is always lowered)."""

    methods: Mapping[str, Method]  # as exported: the whole-program route calls them again
    programs: Mapping[str, Any]  # method name -> torch.export.ExportedProgram
    fingerprint: ProgramFingerprint | None


@dataclass(frozen=True)
class Lowered:
    """The edge program with every delegate lowered (ExecuTorch's EdgeProgramManager), each
    method's report, and what the blob cache served."""

    edge: Any
    reports: Mapping[str, MethodReport]
    cache: CacheSummary
    partitions: tuple[PartitionFacts, ...]  # for the build record (lowering/rebuild_facts.py)


@dataclass(frozen=True)
class DataBytes:
    """A file to write beside the .pte: a .ptd of external data, or the ETRecord."""

    path: Path
    data: bytes
    kind: str  # "ptd" or "etrecord", as DataFile says


@dataclass(frozen=True)
class Emitted:
    """The program emitted: the .pte's bytes and its data files' (not yet on disk), its sizes,
    and each method's report with its planned memory and constants."""

    manager: Any  # ExecuTorch's ExecutorchProgramManager, for a stage that reads the program
    buffer: bytes
    data_files: tuple[DataBytes, ...]
    sizes: ProgramSizes
    reports: Mapping[str, MethodReport]
    cache: CacheSummary
    partitions: tuple[PartitionFacts, ...]
    needs: ProgramNeeds  # the kernels and backends a runtime must register to load it
    edge: Any = None  # Lowered's edge program: where the verify stage finds a diverging op


# A stage after emission (see the module's docstring).
EmittedStage = Callable[[BuildContext, Emitted], Emitted]


@dataclass(frozen=True)
class Written:
    """The target's .pte and data files on disk, written by this build or kept from the last,
    with what the result says of them."""

    output: str
    sha256: str
    methods: Mapping[str, MethodReport]
    data_files: tuple[DataFile, ...]
    sizes: ProgramSizes | None  # None for a kept .pte whose record predates sizes
    cache: CacheSummary
    partitions: tuple[PartitionFacts, ...]
    seconds: float  # since the build started, as the result reports it
    reused: str | None = None  # "same-program" for the last build's .pte, kept
    needs: ProgramNeeds | None = None  # None: a kept .pte whose record predates them
    verification: Verification | None = None  # the verify stage's, of the bytes of `sha256`
