"""The edited region's refusals in seconds: the modules an edit changed, lowered alone, shown
provisionally while the whole program is exported and lowered (issue 23 §4).

A one-line edit of a 32-layer model waits for the whole program's export and edge generation
before its partitioned report (lowering/partitioner_route.py). Once the entry is loaded, its
module tree is compared with the last build's (lowering/module_tree.py: a short digest per module
path, in the build record); the deepest changed subtrees are each exported alone, with the inputs
they were called with in one forward of the entry's example inputs on fake tensors (forward
pre-hooks; no real compute, and every tensor and attribute the forward replaced is put back, so the
build's program is the one it would be without this), and lowered by the target's own partitioners
up to the report made as soon as they have split it (before any edge pass past partitioning, any
preprocess). Their refused ops, at their lines, take the place of the ops the last build's report
had inside those subtrees, and the report goes to the editor marked provisional (final=False,
provisional=True); the edited program's partitioned report replaces it.

Nothing is said when it could be wrong: a target that quantizes, uses a recipe, a whole-program
backend, transform_passes or module_passes; a change of the target's configuration; a change of
the root module itself (the whole program is the region) or outside the module tree (the entry's
inputs, a helper the tree does not name: nothing changed in the tree); a changed module called
with other than tensors and plain values, never called, or that does not export or lower alone.
Each such case is logged at debug level, never guessed at.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from lowerd.lowering.module_tree import changed_roots, inside
from lowerd.lowering.stages import BuildContext, Exported, Loaded
from lowerd.project.build_state import TargetState, program_inputs_digest, target_inputs
from lowerd.project.method import Method
from lowerd.project.module_paths import collapse_module_paths
from lowerd.project.report_model import MethodReport, NotDelegatedOp, RefusalGroup
from lowerd.project.source_map import SourceLine, UserFiles

if TYPE_CHECKING:  # they import ExecuTorch, which capturing a module's inputs needs not
    from lowerd.lowering.route import LoweringRoute

log = logging.getLogger(__name__)

_PLAIN = (type(None), bool, int, float, str)
# Changed modules unlike each other lowered alone, at most: more is an edit of the whole model,
# which the build's own partitioned report answers about as soon.
MAX_LOWERED_ALONE = 4


@dataclass(frozen=True)
class EditedRegion:
    """The subtrees an edit changed in one method, and what the partitioners refused in them."""

    roots: tuple[str, ...]
    not_delegated: tuple[NotDelegatedOp, ...]
    refusals: tuple[RefusalGroup, ...]

    def over(self, base: MethodReport) -> MethodReport:
        """`base` (the last build's report) with the region's refused ops in place of those it
        had inside the region: provisional, and without the per-fix partition counts, which
        were the whole program's."""
        kept = [op for op in base.not_delegated if not self._holds(op.module_path)]
        kept_nodes = {op.node for op in kept}
        groups = [_narrowed(group, kept_nodes) for group in base.refusals]
        return replace(
            base,
            not_delegated=kept + list(self.not_delegated),
            refusals=[group for group in groups if group is not None] + list(self.refusals),
            partitions_if_fixed=[],
            final=False,
            provisional=True,
            graph=None,
        )

    def _holds(self, path: str | None) -> bool:
        return path is not None and any(inside(path, root) for root in self.roots)


def edited_regions(
    ctx: BuildContext,
    loaded: Loaded,
    route: LoweringRoute,
    trees: Mapping[str, Mapping[str, str]],
    earlier: TargetState | None,
) -> dict[str, EditedRegion]:
    """Each method's edited region, its provisional report sent to `ctx.on_partitioned`; none
    when the build has no listener or the region cannot be told exactly (see the docstring)."""
    if ctx.on_partitioned is None or earlier is None:
        return {}
    why_not = _why_no_region(ctx, route, earlier)
    if why_not is not None:
        log.debug("%s: no provisional report of the edited region: %s", ctx.target.name, why_not)
        return {}
    regions = {}
    for name, method in loaded.methods.items():
        base = earlier.report.methods.get(name)
        before = earlier.module_digests.get(name)
        if base is None or not before or name not in trees:
            continue
        try:
            region = _edited_region(ctx, route, name, method, before, trees[name])
        except Exception as error:  # the build says what is wrong with the model, not this
            log.debug("%s: the edited region failed: %r", name, error)
            region = None
        if region is not None:
            regions[name] = region
            ctx.on_partitioned(name, region.over(base))
    return regions


def _why_no_region(ctx: BuildContext, route: LoweringRoute, earlier: TargetState) -> str | None:
    from lowerd.lowering.partitioner_route import PartitionerRoute

    target = ctx.target
    if target.quantize is not None or ctx.recipe is not None:
        return "the target quantizes (its modules alone are not what it lowers)"
    if not isinstance(route, PartitionerRoute) or route.transform_passes is not None:
        return "the target lowers whole or runs transform_passes over the whole program"
    if target.export.module_passes:
        return "the target runs module_passes over the whole program"
    inputs = program_inputs_digest(target_inputs(ctx.config, target))
    if inputs != program_inputs_digest(earlier.inputs):
        return "the target's configuration changed since the last build"
    return None


def _edited_region(
    ctx: BuildContext,
    route: LoweringRoute,
    name: str,
    method: Method,
    before: Mapping[str, str],
    tree: Mapping[str, str],
) -> EditedRegion | None:
    roots = changed_roots(before, tree)
    if not roots or "" in roots:
        why = "the module tree is unchanged" if not roots else "the root module changed"
        log.debug("%s: no edited region: %s", name, why)
        return None
    calls = captured_calls(method, roots, ctx.user_files)
    if calls is None:
        return None
    modules = dict(method.module.named_modules())
    ops: list[NotDelegatedOp] = []
    groups: list[RefusalGroup] = []
    alike: dict[tuple[Any, ...], MethodReport | None] = {}  # every layer's edited block: once
    for root in roots:
        key = (_subtree(tree, root), calls[root].signature())
        if key not in alike and len(alike) == MAX_LOWERED_ALONE:
            log.debug("%s: more than %d unlike modules changed", name, MAX_LOWERED_ALONE)
            return None
        if key not in alike:
            alike[key] = _partitioned_alone(ctx, route, name, modules[root], calls[root])
        report = alike[key]
        if report is None:
            return None
        site = calls[root].site
        ops += [_placed(op, root, site, ctx.user_files) for op in report.not_delegated]
        groups += [_placed_group(group, root, site, ctx.user_files) for group in report.refusals]
    return EditedRegion(tuple(roots), tuple(ops), tuple(groups))


# The changed modules' inputs --------------------------------------------------------------------


@dataclass(frozen=True)
class _Call:
    """A module's first call in the forward: its inputs (real tensors of the fake ones' shapes
    and dtypes) and the user's innermost line on the stack (where its ops are reported when their
    own trace has none of the user's)."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    site: SourceLine | None

    def signature(self) -> str:
        """The inputs' shapes, dtypes and plain values: two modules alike in code and called
        alike make the same ops."""
        import torch
        from torch.utils._pytree import tree_map

        def described(value: Any) -> Any:
            if isinstance(value, torch.Tensor):
                return (tuple(value.shape), str(value.dtype))
            return value

        return repr(tree_map(described, (self.args, self.kwargs)))


def _subtree(tree: Mapping[str, str], root: str) -> tuple[tuple[str, str], ...]:
    """The digests under `root`, by path relative to it."""
    cut = len(root)
    return tuple(sorted((p[cut:], d) for p, d in tree.items() if inside(p, root)))


def captured_calls(
    method: Method, roots: Sequence[str], user_files: UserFiles
) -> dict[str, _Call] | None:
    """Each root's first call, from one forward of the method's example inputs on fake tensors;
    None when the forward fails, a root is not called, or one is called with other values."""
    import torch
    from torch.utils._pytree import tree_leaves, tree_map

    calls = _fake_forward(method, roots, user_files)
    if calls is None:
        return None

    def real(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return torch.zeros(tuple(int(size) for size in value.shape), dtype=value.dtype)
        return value

    found = {}
    for root in roots:
        if root not in calls:
            log.debug("%s is not called by the forward", root)
            return None
        args, kwargs, site = calls[root]
        leaves = tree_leaves((args, kwargs))
        if not all(isinstance(leaf, (torch.Tensor, *_PLAIN)) for leaf in leaves):
            log.debug("%s is called with other than tensors and plain values", root)
            return None
        found[root] = _Call(tuple(tree_map(real, args)), dict(tree_map(real, kwargs)), site)
    return found


class _AllCalled(BaseException):
    """Ends the fake forward once every root was called: the rest of the model is not needed.
    A BaseException, so that a forward's `except Exception` lets it through."""


def _fake_forward(
    method: Method, roots: Sequence[str], user_files: UserFiles
) -> dict[str, tuple[Any, Any, SourceLine | None]] | None:
    """Each root's first (args, kwargs, user's line) in a forward on fake tensors (no compute),
    forward pre-hooks listening; the model put back as it was after it."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._pytree import tree_map

    modules = dict(method.module.named_modules())
    calls: dict[str, tuple[Any, Any, SourceLine | None]] = {}

    def hook_of(root: str) -> Callable[..., None]:
        def hook(module: Any, args: Any, kwargs: Any) -> None:
            if root not in calls:
                stack = "".join(traceback.format_list(traceback.extract_stack()))
                calls[root] = (args, kwargs, user_files.innermost_in_stack_trace(stack))
            if len(calls) == len(roots):
                raise _AllCalled()

        return hook

    handles = [
        modules[root].register_forward_pre_hook(hook_of(root), with_kwargs=True) for root in roots
    ]
    saved = _SavedState(method.module)
    try:
        with FakeTensorMode(allow_non_fake_inputs=True) as mode, torch.no_grad():
            fake = tree_map(
                lambda v: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v,
                (method.args, dict(method.kwargs)),
            )
            method.module(*fake[0], **fake[1])
    except _AllCalled:
        pass
    except Exception as error:
        log.debug("the forward on fake tensors failed: %r", error)
        return None
    finally:
        for handle in handles:
            handle.remove()
        saved.restore()
    return calls


class _SavedState:
    """Every module's attributes and its parameter, buffer and child dicts as they were, put
    back after the fake forward wherever it replaced one (a rotary embedding that recomputes its
    frequencies assigns a new buffer): the program exported next is the untouched model's."""

    def __init__(self, root: Any):
        self._modules = [
            (vars(module), dict(vars(module)), _own_dicts(module)) for module in root.modules()
        ]

    def restore(self) -> None:
        for attrs, saved, dicts in self._modules:
            _put_back(attrs, saved)
            for now, before in dicts:
                _put_back(now, before)


def _own_dicts(module: Any) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    own = (module._parameters, module._buffers, module._modules)
    return [(found, dict(found)) for found in own]


def _put_back(now: dict[str, Any], before: dict[str, Any]) -> None:
    if len(now) != len(before) or any(now.get(k, now) is not v for k, v in before.items()):
        now.clear()
        now.update(before)


# One changed module lowered alone -------------------------------------------------------------


class _Partitioned(Exception):
    """Ends the lowering of a region as soon as its report is made: nothing after partitioning
    is needed of it."""

    def __init__(self, report: MethodReport):
        super().__init__("partitioned")
        self.report = report


def _partitioned_alone(
    ctx: BuildContext, route: LoweringRoute, name: str, module: Any, call: _Call
) -> MethodReport | None:
    """The module exported alone and split by the target's partitioners: the report made then."""
    from lowerd.lowering.export_call import export_method
    from lowerd.lowering.route import EdgeSettings, LoweringProgress

    alone = Method(module, call.args, call.kwargs)
    program = export_method(alone, ctx.target.export, ctx.blame, "the edited module's export")

    def partitioned(method: str, report: MethodReport) -> None:
        raise _Partitioned(report)

    region_ctx = replace(ctx, on_partitioned=partitioned, progress=_unwatched)
    exported = Exported({name: alone}, {name: program}, None)
    settings = replace(EdgeSettings.of(ctx.target), generate_etrecord=False)
    lowering = route.prepare(region_ctx, exported, settings, LoweringProgress(region_ctx))
    try:
        lowering()
    except _Partitioned as done:
        return done.report
    log.debug("%s: the partitioners made no report", name)
    return None


def _unwatched(stage: str, target: str, detail: str | None) -> None:
    """The region's lowering shows no progress: the build's stages are the editor's."""


# The region's ops at their places in the whole model --------------------------------------------


def _placed(
    op: NotDelegatedOp, root: str, site: SourceLine | None, files: UserFiles
) -> NotDelegatedOp:
    """An op of the module exported alone as the whole program's report has it: its module path
    under the root, its node named apart from the last build's, and, when its own trace holds
    no line of the user's, the user's line the module was called from."""
    op = replace(op, module_path=_joined(root, op.module_path), node=f"{root}:{op.node}")
    if op.file is None and site is not None:
        op = replace(op, file=files.display(site.file), line=site.line)
    return op


def _placed_group(
    group: RefusalGroup, root: str, site: SourceLine | None, files: UserFiles
) -> RefusalGroup:
    paths = [_joined(root, path) or root for path in group.module_paths] or [root]
    group = replace(
        group,
        nodes=[f"{root}:{node}" for node in group.nodes],
        module_paths=paths,
        modules=collapse_module_paths(paths),
    )
    if group.file is None and site is not None:
        group = replace(group, file=files.display(site.file), line=site.line)
    return group


def _joined(root: str, path: str | None) -> str:
    return f"{root}.{path}" if path else root


def _narrowed(group: RefusalGroup, kept: set[str]) -> RefusalGroup | None:
    nodes = [node for node in group.nodes if node in kept]
    if not nodes:
        return None
    return (
        group if len(nodes) == len(group.nodes) else replace(group, nodes=nodes, count=len(nodes))
    )
