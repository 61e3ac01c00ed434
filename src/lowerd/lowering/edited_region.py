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

The rest of the program is the last build's report at the lines where the code is now: a
recorded source that changed is diffed line by line (the record's CRC-32 per line, project/
rebuild_record.py line_checksums), each op or refusal group on an unchanged line moved with it,
one on a changed line left out (it names code that is no longer there), as are the last build's
ops inside the edited subtrees (their code changed). That is the provisional report lowerd sends
after export (build.py _report_provisionally) with the edited subtrees' stale ops left out; it
needs only the module trees, so where no region is lowered it goes out as soon as the entry is
loaded (issue 31 §6: optimum's recipe at L = 16 would otherwise wait for quantize and two strict
exports, tens of seconds). Where a region is lowered, its report is the first one (a second
report a second apart would only flicker; and a module that does not export alone says nothing,
as the program probably does not export either).

A target that quantizes with torchao's quantize_ (8da4w, 8da8w), runs module_passes or
transform_passes gets its edited region too, each argued to give the module alone the ops the
whole program gives it:

- quantize_ replaces each selected nn.Linear's weight by itself: the filter reads the module
  alone (its class, in_features; torchao_quantize.py), the config is the target's, and what it
  makes of a weight depends on that weight only. A copy of the edited module quantized alone has
  the linears the whole model's quantize_ gives it (the model itself is quantized later, in
  place: the copy leaves it as it was). A PT2E quantization (a whole-graph quantizer's
  annotations, calibration of the whole model) or a recipe has no such argument: refused.
- transform_passes run on the edge program before partitioning; those region_passes.py allows
  read each node alone (its op, target and argument count) and rewrite it alone, so on the
  region's edge program they do what they do to its nodes in the whole program's.
- module_passes: ExecuTorch's RemoveRedundantTransposes (the class itself, nothing shadowing its
  `call`) is the one allowed. It replaces the uses of a transpose (or permute) that undoes the
  one it reads. A pair inside the module is removed alike alone; a pair across the module's edge
  (a transpose reading the module's input or read by its output) is not seen alone, so the
  module's first export is read before the passes run, and one with a transpose or permute at
  its edge is refused (`a module pass could change the edited module's ops`). Other passes could
  rewrite anything: refused.
- A method exported with dynamic shapes is refused: the module alone is called with one example
  input's shapes, and a backend may take an op at static shapes that it refuses at symbolic ones.

Nothing is said when it could be wrong: a target that uses a recipe, a PT2E quantization, a
whole-program backend, passes not covered above, dynamic shapes; a change of the target's
configuration; a change of the root module itself (the whole program is the region) or outside
the module tree (the entry's inputs, a helper the tree does not name: nothing changed in the
tree); a changed module called with other than tensors and plain values, never called, or that
does not export or lower alone. Each such case is logged at debug level, never guessed at.
"""

from __future__ import annotations

import copy
import difflib
import logging
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from lowerd.lowering.module_tree import changed_roots, inside
from lowerd.lowering.region_passes import why_passes
from lowerd.lowering.stages import BuildContext, Exported, Loaded
from lowerd.project.build_state import TargetState, program_inputs_digest, target_inputs
from lowerd.project.method import Method
from lowerd.project.module_paths import collapse_module_paths
from lowerd.project.rebuild_record import line_checksums
from lowerd.project.report_model import MethodReport, NotDelegatedOp, RefusalGroup
from lowerd.project.source_map import SourceLine, UserFiles
from lowerd.project.source_tokens import LineMap

if TYPE_CHECKING:  # they import ExecuTorch, which capturing a module's inputs needs not
    from lowerd.lowering.export_call import ModulePasses
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
    """Each method's edited region, its provisional report sent to `ctx.on_partitioned`: with
    the region's own refusals, or, where no region is lowered (the docstring says when), the
    rest of the program's alone, right away; none when the build has no listener or nothing
    can be told exactly."""
    if ctx.on_partitioned is None or earlier is None:
        return {}
    inputs = program_inputs_digest(target_inputs(ctx.config, ctx.target))
    if inputs != program_inputs_digest(earlier.inputs):
        log.debug("%s: no provisional report at load: the configuration changed", ctx.target.name)
        return {}
    why_not, module_passes = _why_no_region(ctx, route, loaded)
    lines_now = _lines_now(ctx, earlier)
    regions = {}
    for name, method in loaded.methods.items():
        base = earlier.report.methods.get(name)
        before = earlier.module_digests.get(name)
        if base is None or not before or name not in trees:
            continue
        roots = changed_roots(before, trees[name])
        if not roots or "" in roots:
            why = "the module tree is unchanged" if not roots else "the root module changed"
            log.debug("%s: no edited region: %s", name, why)
            continue
        base = _at_lines_now(base, lines_now)
        if why_not is not None:  # the rest of the program now; the region's ops from export
            log.debug("%s: no provisional report of the edited region: %s", name, why_not)
            regions[name] = EditedRegion(tuple(roots), (), ())
            ctx.on_partitioned(name, regions[name].over(base))
            continue
        try:
            region = _edited_region(ctx, route, name, method, roots, trees[name], module_passes)
        except Exception as error:  # the build says what is wrong with the model, not this
            log.debug("%s: the edited region failed: %r", name, error)
            region = None
        if region is not None:
            regions[name] = region
            ctx.on_partitioned(name, region.over(base))
    return regions


def _why_no_region(
    ctx: BuildContext, route: LoweringRoute, loaded: Loaded
) -> tuple[str | None, ModulePasses | None]:
    """Why the edited modules alone would not be lowered as the program lowers them (None: they
    would), and the target's module passes."""
    from lowerd.lowering.partitioner_route import PartitionerRoute
    from lowerd.lowering.user_lowering import load_module_passes

    target = ctx.target
    if ctx.recipe is not None:
        return "the target uses a recipe (its modules alone are not what it lowers)", None
    if target.quantize is not None and target.quantize.torchao is None:
        return "the target quantizes the whole program (PT2E)", None
    if not isinstance(route, PartitionerRoute):
        return "the target lowers whole", None
    if (why := why_passes(route.transform_passes)) is not None:
        return f"{why}, over the whole program", None
    if any(method.dynamic_shapes is not None for method in loaded.methods.values()):
        return "a method exports with dynamic shapes (its modules alone: static)", None
    try:
        module_passes = load_module_passes(ctx)
    except Exception as error:  # the build's export says it at the user's line
        return f"the module passes failed: {error!r}", None
    for each in module_passes.passes if module_passes else ():
        if not _transposes_pass(each):
            name = getattr(each, "__name__", None) or type(each).__name__
            return f"a module pass the edited region does not cover ({name})", None
    return None, module_passes


def _transposes_pass(each: Any) -> bool:
    """Whether a module pass is ExecuTorch's RemoveRedundantTransposes, as it is."""
    from executorch.extension.llm.export.export_passes import RemoveRedundantTransposes

    shadowed = {"call", "requires", "ensures", "__call__"} & set(getattr(each, "__dict__", {}))
    return type(each) is RemoveRedundantTransposes and not shadowed


def _transposes_at_edge(program: Any) -> str | None:
    """A transpose or permute reading the program's input or read by its output: one
    RemoveRedundantTransposes could pair with one outside the module in the whole program."""
    import torch

    aten = torch.ops.aten
    user_inputs = set(program.graph_signature.user_inputs)
    for node in program.graph.nodes:
        if node.op != "call_function" or node.target not in (
            aten.transpose.int,
            aten.permute.default,
        ):
            continue
        read = node.args[0]
        reads_input = getattr(read, "op", None) == "placeholder" and read.name in user_inputs
        if reads_input or any(user.op == "output" for user in node.users):
            return f"a module pass could change the edited module's ops ({node.name} at its edge)"
    return None


def _edited_region(
    ctx: BuildContext,
    route: LoweringRoute,
    name: str,
    method: Method,
    roots: Sequence[str],
    tree: Mapping[str, str],
    module_passes: ModulePasses | None,
) -> EditedRegion | None:
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
            alone = _Alone(modules[root], calls[root], module_passes)
            alike[key] = _partitioned_alone(ctx, route, name, alone)
        report = alike[key]
        if report is None:
            return None
        site = calls[root].site
        ops += [_placed(op, root, site, ctx.user_files) for op in report.not_delegated]
        groups += [_placed_group(group, root, site, ctx.user_files) for group in report.refusals]
    return EditedRegion(tuple(roots), tuple(ops), tuple(groups))


# The last build's lines where the code is now ---------------------------------------------------


def _lines_now(ctx: BuildContext, earlier: TargetState) -> dict[str, LineMap]:
    """Each recorded source that changed, by its name in reports: where its unchanged lines are
    now (the record's line checksums diffed with the file's); no line placed when either is
    unknown."""
    maps = {}
    for source in earlier.sources:
        if source.unchanged():
            continue
        old = earlier.source_lines.get(source.path)
        new = line_checksums([source.path]).get(source.path)
        moves: dict[int, int] = {}
        if old is not None and new is not None:
            matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
            for first, to, size in matcher.get_matching_blocks():
                moves.update((first + i + 1, to + i + 1) for i in range(size))
        maps[ctx.user_files.display(source.path)] = LineMap(moves)
    return maps


def _at_lines_now(report: MethodReport, maps: Mapping[str, LineMap]) -> MethodReport:
    """The report's ops and refusal groups on unchanged lines, moved to where they are now; those
    on a changed line left out (a copy: the record stays as it was read)."""
    if not maps:
        return report

    def placed(item: Any) -> Any:
        there, line = _line_now(maps, item.file, item.line)
        library = item.library
        if library is not None:
            there_too, library_line = _line_now(maps, library.file, library.line)
            there = there and there_too
            library = replace(library, line=library_line or library.line)
        return replace(item, line=line, library=library) if there else None

    ops = [op for op in map(placed, report.not_delegated) if op is not None]
    groups = [group for group in map(placed, report.refusals) if group is not None]
    moved = copy.deepcopy(replace(report, not_delegated=ops, refusals=groups))
    for partition in moved.partitions:
        for source in partition.sources:
            there, line = _line_now(maps, source[0], source[1])
            source[1] = line if there else source[1]
    return moved


def _line_now(
    maps: Mapping[str, LineMap], file: str | None, line: int | None
) -> tuple[bool, int | None]:
    """Whether a reported line is still in its file, and where: a changed file's map places it
    or not; any other line stays."""
    if file is None or line is None or file not in maps:
        return True, line
    moved = maps[file].move(line)
    return moved is not None, moved


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


class _AtEdge(Exception):
    """Ends the edited module's export: a module pass could change its ops (why)."""


@dataclass(frozen=True)
class _Alone:
    """A changed module to lower alone: the module, its call, the target's module passes."""

    module: Any
    call: _Call
    module_passes: ModulePasses | None


def _partitioned_alone(
    ctx: BuildContext, route: LoweringRoute, name: str, alone: _Alone
) -> MethodReport | None:
    """The module exported alone and split by the target's partitioners: the report made then;
    None when a module pass could change its ops."""
    from lowerd.lowering.export_call import export_method
    from lowerd.lowering.route import EdgeSettings, LoweringProgress

    method = Method(_quantized_alone(ctx, alone.module), alone.call.args, alone.call.kwargs)

    def at_edge(program: Any) -> None:  # before the module passes: what they would pair
        if (why := _transposes_at_edge(program)) is not None:
            raise _AtEdge(why)

    try:
        program = export_method(
            method,
            ctx.target.export,
            ctx.blame,
            "the edited module's export",
            alone.module_passes,
            at_edge if alone.module_passes else None,
        )
    except _AtEdge as refused:
        log.debug("%s: %s", name, refused)
        return None

    def partitioned(method: str, report: MethodReport) -> None:
        raise _Partitioned(report)

    region_ctx = replace(ctx, on_partitioned=partitioned, progress=_unwatched)
    exported = Exported({name: method}, {name: program}, None)
    settings = replace(EdgeSettings.of(ctx.target), generate_etrecord=False)
    lowering = route.prepare(region_ctx, exported, settings, LoweringProgress(region_ctx))
    try:
        lowering()
    except _Partitioned as done:
        return done.report
    log.debug("%s: the partitioners made no report", name)
    return None


def _quantized_alone(ctx: BuildContext, module: Any) -> Any:
    """The module as the target's torchao quantization makes it inside the model: a copy,
    quantized alone (the model is quantized later, in place); the module itself without one."""
    declared = ctx.target.quantize
    if declared is None:
        return module
    from lowerd.lowering.torchao_quantize import quantize_linears

    module = copy.deepcopy(module)
    quantize_linears({"region": Method(module)}, declared, str(ctx.config.path), _no_method)
    return module


def _no_method(name: str) -> None:
    """The region's quantization shows no progress."""


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
