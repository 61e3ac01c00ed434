"""The two ways a target's program reaches its backends, behind one `LoweringRoute` protocol.

- partitioners (lowering/partitioner_route.py): ExecuTorch's to_edge_transform_and_lower with the
  backends' partitioners, or the ones the target's `partitioners` function gives, after its
  `transform_passes`;
- whole program (lowering/whole_program_route.py): to_edge, then backend_api.to_backend of each
  method whole to the one backend the target's `whole_program` names, as ExecuTorch documents.

What both do the same way is written once, in lower.py: the compile configs and constant methods
(EdgeSettings), the blob cache around the backends' preprocess, the progress of preprocess
(LoweringProgress), the reports and the failures. A route only turns the exported programs into
an edge program with its delegates, and says which backends its reports name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from lowerd.lowering.reasons import PartitionReasons
from lowerd.lowering.stages import BuildContext, Exported
from lowerd.project.backends import backend_by_details_class
from lowerd.project.config import TargetConfig
from lowerd.project.edge_generation import EdgeGeneration
from lowerd.project.lowering_options import ConstantMethods, Options


@dataclass(frozen=True)
class EdgeSettings:
    """The target's edge compile config, constant methods and ETRecord switch, as a script
    passes them to ExecuTorch (TargetConfig's `edge_compile_config`, ... keys)."""

    edge_compile_config: Options
    constant_methods: ConstantMethods | None
    generate_etrecord: bool

    @classmethod
    def of(cls, target: TargetConfig) -> EdgeSettings:
        return cls(target.edge_compile_config, target.constant_methods or None, target.etrecord)

    def compile_config(self) -> Any:
        """A new EdgeCompileConfig for each ExecuTorch call: to_edge_transform_and_lower
        changes the one it is given (its exception list of ops kept from decomposition)."""
        from executorch.exir import EdgeCompileConfig

        return EdgeCompileConfig(**self.edge_compile_config)


@dataclass(frozen=True)
class EdgeProgram:
    """What a route gives back: ExecuTorch's EdgeProgramManager with every delegate lowered,
    and what its partitioners said of the nodes they left (empty for a whole program)."""

    edge: Any
    reasons: PartitionReasons
    # Per method, which way edge generation ran (empty: the route does not say).
    generation: Mapping[str, EdgeGeneration] = field(default_factory=dict)


def stock_edge_generation(methods: Iterable[str], reason: str) -> dict[str, EdgeGeneration]:
    """Every method's edge generation stock's, for `reason` (a route that never goes by region)."""
    return {name: EdgeGeneration.stock(reason) for name in methods}


class LoweringProgress:
    """How far preprocess is, for the progress line: partitions preprocessed of those the
    partitioners made ("3/42"). It counts while ExecuTorch runs, so it is an observer, not a
    record."""

    def __init__(self, ctx: BuildContext):
        self._ctx = ctx
        self._expected = 0
        self._done = 0

    def expect(self, partitions: int) -> None:
        self._expected += partitions

    def preprocessed(self, record: Any) -> None:
        """A PreprocessCache's on_preprocess: one preprocess call, of one or more blobs."""
        self._done += len(record.blob_digests)
        self._ctx.stage("preprocess", f"{self._done}/{max(self._expected, 1)}")


# The lowering a route prepared, to run while the blob cache serves the backends' preprocess.
Lowering = Callable[[], EdgeProgram]


class LoweringRoute(Protocol):
    """Turns the exported programs into an edge program whose delegates are lowered, in two
    steps: `prepare` makes what the lowering needs (the partitioners: importing one registers
    its backend, which the blob cache wraps only if registered when it is installed), and
    returns the lowering, which lower.py runs inside the cache. An exception but a LowerdError
    from the lowering is reported as ExecuTorch's lowering failure at the user's line."""

    @property
    def displays(self) -> tuple[str, ...]:
        """The backends as the reports name them, in the order they take ops."""
        ...

    def prepare(
        self,
        ctx: BuildContext,
        exported: Exported,
        settings: EdgeSettings,
        progress: LoweringProgress,
    ) -> Lowering: ...


def backend_display(backend_id: str) -> str:
    """A backend as the report names it: a known backend by its display name, another by the
    backend id (its BackendDetails class name)."""
    backend = backend_by_details_class(backend_id)
    return backend.display if backend else backend_id
