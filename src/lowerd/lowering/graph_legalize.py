"""torch's legalize_graph without the copy: the same graph, reordered where it stands (issue 23).

ExecuTorch cuts each partition out of the top-level graph with `create_submodule_from_nodes`,
which ends with torch's `legalize_graph`: a topological sort (Kahn's algorithm, FIFO, a few
assertion-like ops to the front) that copies every node of the graph into a new Graph and
assigns it to the GraphModule. One copy per partition of a graph whose size grows with the model:
O(nodes x partitions), the term that grew fastest in cutting (4.3 s at 16 layers of the depth
bench's Llama, 17 s at 32).

`legalize_in_place` gives the graph the state the copy would have, without making new nodes:

- the order: the same Kahn order, computed by the same algorithm over the same graph (the users
  of each node read in their order before anything moves), the nodes moved to it by appending
  each in turn, as the copy appends each new node;
- each node's users in the order the copy creates them (the order of the users in the new
  order); its inputs, args, kwargs, name, op, target and type are those the copy maps over;
- a shallow copy of each node's meta (node_copy copies it so) and no custom repr function;
- the graph's namespace, the side table of find_nodes and the tracer fields as a new Graph has
  them after the copy's appends (the names registered in the new order, so the next node named
  `getitem` gets the name it would get after the copy);
- the graph assigned to the module again (the setter's recompile: partition_speedups holds it
  back to the end of the cut, as with the copy).

What stays different is unobservable by ExecuTorch: the Node and Graph objects are the old ones
(nothing holds the old nodes across a cut: the cut finds its call_module node again by name), and
the private `_sort_key` values keep the same relative order with other numbers. A graph whose
nodes carry attributes of their own (the copy drops them), or whose names a new namespace would
not give back unchanged, is handed to torch's legalize_graph. tests/test_partition_speedups.py
compares the state after both on a cut graph, and the .pte bytes with stock's.
"""

from __future__ import annotations

import collections
import copy
import functools
import operator
from typing import Any


def prioritized_ops() -> frozenset[Any]:
    """The ops torch 2.13's legalize_graph puts at the front of its queue."""
    import torch

    aten = torch.ops.aten
    return frozenset(
        {
            operator.add,
            operator.mul,
            operator.sub,
            operator.floordiv,
            operator.truediv,
            operator.mod,
            operator.le,
            operator.lt,
            operator.ge,
            operator.gt,
            operator.eq,
            operator.ne,
            aten.sym_constrain_range.default,
            aten.sym_constrain_range_for_size.default,
            aten._assert_async.msg,
            aten.scalar_tensor.default,
            aten._assert_scalar.default,
        }
    )


def kahn_order(nodes: list[Any], prioritized: frozenset[Any]) -> list[Any]:
    """The order torch's legalize_graph copies the nodes in (a shorter list on a cycle)."""
    indeg = dict.fromkeys(nodes, 0)
    for node in nodes:
        for user in node.users:
            indeg[user] += 1
    queue = collections.deque(node for node in nodes if indeg[node] == 0)
    order = []
    while queue:
        current = queue.popleft()
        order.append(current)
        for user in current.users:
            indeg[user] -= 1
            if indeg[user] == 0:
                if user.op == "call_function" and user.target in prioritized:
                    queue.appendleft(user)
                else:
                    queue.append(user)
    return order


def legalize_in_place(graph_module: Any, prioritized: frozenset[Any]) -> bool:
    """graph_module's graph put in the state torch's legalize_graph would leave it in; False,
    with nothing changed, where that cannot be shown (then the caller runs legalize_graph)."""
    graph = graph_module.graph
    nodes = list(graph.nodes)
    if any(node.__dict__ for node in nodes):
        return False
    order = kahn_order(nodes, prioritized)
    namespace = _namespace_in(order)
    if len(order) < len(nodes) or namespace is None:
        return False  # a cycle (torch raises) or names a copy would change
    position = {node: index for index, node in enumerate(order)}
    root = graph._root
    for node in order:
        root._prepend(node)  # to the end, as the copy's create_node appends
        # Set past Node.__setattr__, whose only other work for these names is taking the node
        # out of the graph's find_nodes table and putting it back: that table is replaced by a
        # new one below (two table updates per node were a third of this function's time).
        _set(node, "meta", copy.copy(node.meta))
        _set(node, "_repr_fn", None)
        users = node.users
        if len(users) > 1:
            ordered = sorted(users, key=position.__getitem__)
            if list(users) != ordered:
                users.clear()
                users.update(dict.fromkeys(ordered))
    _renew_graph_fields(graph, order, namespace)
    graph_module.graph = graph  # as the copy is assigned: the setter's recompile
    return True


_set = object.__setattr__


def _namespace_in(order: list[Any]) -> Any:
    """A new Graph's namespace with the nodes' names registered in this order, as node_copy
    registers them (create_name, then associate_name_with_obj); None if one would come back
    renamed.

    It is filled as create_name fills it for a name it gives back unchanged: the name added to
    the used names, its base's count set to its number (a name without one: the count as it
    was, 0 if none), in the same order. Whether a name comes back unchanged depends on the
    namespace only through the used names (a name given out before is renamed); the rest (the
    name pattern, keywords and builtins) is the name's own, read once per name by torch's
    create_name on an empty namespace (`_registered_as`). One cut of a partition re-registers
    every node of the graph, so this runs O(nodes x partitions) times."""
    from torch.fx.graph import _Namespace

    used: set[str] = set()
    counts: dict[str, int] = {}
    named: dict[Any, str] = {}
    for node in order:
        name = node.name
        parts = _registered_as(name)
        if parts is None or name in used:
            return None
        base, number = parts
        counts[base] = counts.get(base, 0) if number is None else number
        used.add(name)
        named[node] = name
    namespace = _Namespace()
    namespace._used_names = used
    namespace._base_count = counts
    namespace._obj_to_name = named
    return namespace


@functools.lru_cache(maxsize=1 << 16)
def _registered_as(name: str) -> tuple[str, int | None] | None:
    """The base and number torch's create_name files `name` under when it gives it back
    unchanged to a namespace that has not given it out; None when it would rename it."""
    from torch.fx.graph import _name_regex, _Namespace

    if _Namespace().create_name(name, None) != name:
        return None
    match = _name_regex.match(name)
    if match is None:
        return None
    base, number = match.group(1, 2)
    return base, None if number is None else int(number)


def _renew_graph_fields(graph: Any, order: list[Any], namespace: Any) -> None:
    """The fields torch.fx.Graph() starts with, as the copy has them after its appends (its
    codegen is the old graph's: legalize_graph carries it over)."""
    from torch.fx.graph import _FindNodesLookupTable

    table = _FindNodesLookupTable()
    for node in order:
        table.insert(node)
    graph._graph_namespace = namespace
    graph._find_nodes_lookup_table = table
    graph._used_names = {}
    graph._tracer_cls = None
    graph._tracer_extras = None
    graph._co_fields = {}
    graph._insert = graph._root.prepend
