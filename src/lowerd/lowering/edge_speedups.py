"""Exact shortcuts through ExecuTorch's edge generation, installed only while lowerd lowers.

1. Redundant decomposition replays. For a partitioner that filters the ops it keeps (XNNPACK,
   Vulkan), `_gen_edge_manager_for_partitioners` calls `program.run_decompositions` three times
   per method: `({})` to functionalize, then the default table without the partitioner's ops,
   then the whole default table after the kept ops were renamed. Each call re-exports the program
   through make_fx (0.3 to 1 s on the examples) even when no op of the table is left in the
   graph. Such a replay returns the program it was given, up to two node-metadata fields it
   rewrites: `original_aten` (the op being traced) and `eager_input_vals` (the inputs of custom
   ops); its `from_node` chains are one link longer but lead to the same first ancestor, from
   which debug handles are numbered. No ExecuTorch pass, partitioner or emitter of these
   versions reads either field (only `DontPartition`, which no lowerd backend uses, and Arm's
   passes read `original_aten`), so skipping the replay yields the same .pte:
   tests/test_edge_speedups.py compares the bytes and the programs, node by node, with stock's.

   A replay is skipped only when all of these hold, and runs otherwise:
   - it is called by `_gen_edge_manager_for_partitioners` itself, with a non-empty plain table
     (the first, empty-table call always runs: it functionalizes);
   - the program is the output of an earlier replay in this lowering (so already functional);
   - no call_function target of the graph is in the table (an overload packet in the table
     covers all its overloads), and every target is an aten, EDGE_DO_NOT_DECOMP or
     quantized_decomposed overload or `operator.getitem`: no higher-order op, no other call;
   - the graph holds no nested graph, no get_attr or call_module node, and no call without users
     but `_assert_tensor_metadata` checks;
   - every node's metadata keys are ones a replay reproduces (a key it does not know, such as
     XNNPACK's IS_IMPLICIT_Q_DQ_TAG on quantized graphs, is dropped by a replay: it must run);
   - inputs and outputs are plain tensors, parameters, buffers or buffer mutations, and the
     weights are plain tensors (no subclass for a replay to unwrap);
   - torch and ExecuTorch are the versions this argument was checked against.

   Running a replay with the table cut down to the ops present is not exact: a decomposition
   emits ops the cut table would no longer decompose, and a composite op missing from a table is
   preserved where the full table decomposes it. So a replay runs whole or not at all.

2. The edge dialect's op table. Importing `executorch.exir` parses `edge.yaml` (1.2 s of
   pure-Python YAML in each fresh process). The parse is a pure function of the file's text and
   of ruamel.yaml, so it is served from the store (memo kind "optable"), keyed by the text's
   digest and ruamel's version, as msgpack: only plain str/int/bool/None/list/dict data is
   stored, and only if it decodes to exactly what the parse returned. The store verifies every
   entry on read. Only the first import in a process can be served; later ones are no-ops.
"""

from __future__ import annotations

import hashlib
import importlib.util
import operator
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Literal

import msgpack

from lowerd.cache.store import BlobStore

MEMO_KIND = "optable"
FORMAT_VERSION = 1
# The versions whose code the replay skip was checked against; any other runs every replay.
VALIDATED_VERSIONS = {"torch": "2.13.0", "executorch": "1.5.1"}

_OPS_MODULE = "executorch.exir.dialects.edge._ops"
_EDGE_YAML = ("exir", "dialects", "edge", "edge.yaml")
_NAMESPACES = frozenset({"aten", "EDGE_DO_NOT_DECOMP", "quantized_decomposed"})
# Node metadata a replay of an op-free table gives back as it was (or rewrites in a field no
# lowering step reads: original_aten, eager_input_vals), by node kind.
_REPLAYED_META = {
    "call_function": frozenset(
        {
            "val",
            "tensor_meta",
            "stack_trace",
            "nn_module_stack",
            "torch_fn",
            "original_aten",
            "from_node",
            "seq_nr",
            "eager_input_vals",
            "custom",
        }
    ),
    "placeholder": frozenset(
        {"val", "tensor_meta", "desc", "from_node", "original_aten", "torch_fn"}
    ),
    "output": frozenset({"from_node"}),
}
# Calls that have no users by nature: they check, and a replay keeps them.
_CHECKS = frozenset({"aten._assert_tensor_metadata.default"})
_INPUT_KINDS = frozenset({"USER_INPUT", "PARAMETER", "BUFFER", "CONSTANT_TENSOR"})
_OUTPUT_KINDS = frozenset({"USER_OUTPUT", "BUFFER_MUTATION"})

OpTableOutcome = Literal["hit", "miss", "uncached"]


@dataclass(frozen=True)
class Replay:
    """One run_decompositions call made by ExecuTorch's edge generation."""

    table_size: int | None
    skipped: bool
    why: str  # why it had to run, or "no op of the table in the graph"
    seconds: float


@dataclass
class EdgeSpeedups:
    store: BlobStore | None
    replays: list[Replay] = field(default_factory=list)
    # How this process's op table was loaded, if it was loaded while installed.
    op_table: OpTableOutcome | None = None

    @property
    def skipped(self) -> int:
        return sum(1 for r in self.replays if r.skipped)

    @property
    def replayed(self) -> int:
        return sum(1 for r in self.replays if not r.skipped)

    # -- decomposition replays ---------------------------------------------------------------

    @contextmanager
    def installed(self) -> Iterator[EdgeSpeedups]:
        """Skip ExecuTorch's redundant decomposition replays until exit, then put
        run_decompositions back."""
        if not validated_versions():
            yield self
            return
        from executorch.exir.program import _program
        from torch.export import ExportedProgram

        raw = ExportedProgram.__dict__["run_decompositions"]
        caller = _program._gen_edge_manager_for_partitioners.__code__
        functional: weakref.WeakSet[Any] = weakref.WeakSet()  # outputs of this lowering's replays

        def run_decompositions(
            program: Any, decomp_table: Any = None, *args: Any, **kwargs: Any
        ) -> Any:
            if sys._getframe(1).f_code is not caller:
                return raw(program, decomp_table, *args, **kwargs)
            started = time.perf_counter()
            why = why_replay(program, decomp_table, args, kwargs, program in functional)
            if why is None:
                self._record(decomp_table, True, "no op of the table in the graph", started)
                return program
            result = raw(program, decomp_table, *args, **kwargs)
            functional.add(result)
            self._record(decomp_table, False, why, started)
            return result

        run_decompositions.__wrapped__ = raw  # type: ignore[attr-defined]
        # The method is swapped for this lowering only and restored below, as mock.patch would.
        ExportedProgram.run_decompositions = run_decompositions  # type: ignore[method-assign]
        try:
            yield self
        finally:
            ExportedProgram.run_decompositions = raw  # type: ignore[method-assign]

    def _record(self, table: Any, skipped: bool, why: str, started: float) -> None:
        size = len(table) if isinstance(table, dict) else None
        self.replays.append(Replay(size, skipped, why, time.perf_counter() - started))

    # -- the op table --------------------------------------------------------------------------

    @contextmanager
    def op_table_served(self) -> Iterator[EdgeSpeedups]:
        """While open, the first import of ExecuTorch's edge dialect in this process reads its op
        table from the store (or parses it and stores it); a no-op once it is imported."""
        text = None if self.store is None or _OPS_MODULE in sys.modules else _edge_yaml_text()
        yaml = _ruamel_yaml() if text is not None else None
        if yaml is None:
            yield self
            return
        real = yaml.YAML
        serve = self._load_op_table

        class ServedYAML(real):  # type: ignore[misc, valid-type]
            def load(self, stream: Any) -> Any:
                if self.typ == ["safe"] and isinstance(stream, str) and stream == text:
                    return serve(stream, lambda: real.load(self, stream))
                return real.load(self, stream)

        before = set(sys.modules)
        yaml.YAML = ServedYAML
        try:
            yield self
        finally:
            yaml.YAML = real
            # Modules imported meanwhile bound the name (`from ruamel.yaml import YAML`).
            for name in set(sys.modules) - before:
                namespace = getattr(sys.modules.get(name), "__dict__", None)
                if isinstance(namespace, dict) and namespace.get("YAML") is ServedYAML:
                    namespace["YAML"] = real

    def _load_op_table(self, text: str, parse: Callable[[], Any]) -> Any:
        assert self.store is not None
        key = op_table_key(text)
        stored = self.store.get(key, MEMO_KIND)
        if stored is not None:
            value = decode_plain(stored)
            if value is not None:
                self.op_table = "hit"
                return value
        value = parse()
        payload = encode_plain(value)
        stored_now = payload is not None and self.store.put(key, payload, MEMO_KIND)
        self.op_table = "miss" if stored_now else "uncached"
        return value


def why_replay(
    program: Any, table: Any, args: tuple[Any, ...], kwargs: dict[str, Any], functional: bool
) -> str | None:
    """Why this run_decompositions call must run, or None if it would give the program back."""
    import torch

    if args or kwargs:
        return "called with options"
    from torch.export.decomp_utils import CustomDecompTable

    # ExecuTorch's tables are CustomDecompTables: reading one materializes it, as the replay would.
    if type(table) not in (dict, CustomDecompTable):
        return f"a table of type {type(table).__name__}"
    if not table:
        return "an empty table: the replay functionalizes"
    if not functional:
        return "the program did not come out of an earlier replay"
    packets = set()
    for key in table:
        if isinstance(key, torch._ops.OpOverloadPacket):
            packets.add(key)
        elif not isinstance(key, torch._ops.OpOverload):
            return f"the table holds a {type(key).__name__}"
    signature = program.graph_signature
    for specs, kinds in (
        (signature.input_specs, _INPUT_KINDS),
        (signature.output_specs, _OUTPUT_KINDS),
    ):
        if unusual := [spec.kind.name for spec in specs if spec.kind.name not in kinds]:
            return f"a {unusual[0]} in the signature"
    for name, value in [*program.state_dict.items(), *program.constants.items()]:
        if type(value) not in (torch.Tensor, torch.nn.Parameter):
            return f"{name} is a {type(value).__name__}"
    return _why_graph(program.graph_module, table, packets)


def _why_graph(graph_module: Any, table: dict[Any, Any], packets: set[Any]) -> str | None:
    import torch

    for name, child in graph_module.named_modules():
        if child is not graph_module and isinstance(child, torch.fx.GraphModule):
            return f"a nested graph ({name})"
    for node in graph_module.graph.nodes:
        known = _REPLAYED_META.get(node.op)
        if known is None:
            return f"a {node.op} node ({node.name})"
        if unknown := [key for key in node.meta if key not in known]:
            return f"metadata {unknown[0]!r} on {node.name}"
        if node.op == "placeholder" and not isinstance(node.meta.get("val"), torch.Tensor):
            return f"input {node.name} is no tensor"
        if node.op != "call_function":
            continue
        target = node.target
        if target is operator.getitem:
            pass
        elif not isinstance(target, torch._ops.OpOverload) or isinstance(
            target, torch._ops.TorchBindOpOverload
        ):
            return f"a call to {target}"
        elif target.namespace not in _NAMESPACES:
            return f"an op of namespace {target.namespace} ({target})"
        elif target in table or target.overloadpacket in packets:
            return f"{target} is in the table"
        if not node.users and str(target) not in _CHECKS:
            return f"{node.name} has no users"
    return None


def validated_versions() -> bool:
    import torch

    try:
        executorch = version("executorch")
    except PackageNotFoundError:
        return False
    found = {"torch": torch.__version__.split("+")[0], "executorch": executorch.split("+")[0]}
    return found == VALIDATED_VERSIONS


def _ruamel_yaml() -> Any:
    try:
        import ruamel.yaml
    except ImportError:
        return None
    return ruamel.yaml


def _edge_yaml_text() -> str | None:
    """The text of ExecuTorch's edge.yaml, found without importing ExecuTorch."""
    try:
        spec = importlib.util.find_spec("executorch")
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        try:
            return Path(folder, *_EDGE_YAML).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
    return None


def op_table_key(text: str) -> str:
    """What the parse depends on: the text, ruamel.yaml's version and which parser it uses."""
    try:
        ruamel = version("ruamel.yaml")
    except PackageNotFoundError:
        ruamel = "unknown"
    parser = "c" if importlib.util.find_spec("_ruamel_yaml") else "python"
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    details = [FORMAT_VERSION, "edge.yaml", ruamel, parser, "safe", digest]
    return hashlib.sha256(msgpack.packb(details, use_bin_type=True)).hexdigest()


_SCALARS = (str, int, bool, type(None))


def _plain(value: Any, depth: int = 0) -> bool:
    """Only data msgpack gives back exactly: str, int, bool, None, and lists and dicts of them."""
    if depth > 64:
        return False
    kind = type(value)
    if kind in _SCALARS:
        return True
    if kind is list:
        return all(_plain(item, depth + 1) for item in value)
    if kind is dict:
        return all(type(k) in _SCALARS and _plain(v, depth + 1) for k, v in value.items())
    return False


def _same(a: Any, b: Any) -> bool:
    """Equal with the same types all the way down (1 == True == 1.0 for ==, not here)."""
    if type(a) is not type(b):
        return False
    if type(a) is list:
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is dict:
        return list(a) == list(b) and all(
            type(k) is type(j) and _same(a[k], b[j]) for k, j in zip(a, b, strict=True)
        )
    return bool(a == b)


def encode_plain(value: Any) -> bytes | None:
    """msgpack of value if it decodes to exactly value, else None (then nothing is stored)."""
    if not _plain(value):
        return None
    try:
        payload = msgpack.packb(value, use_bin_type=True)
    except (OverflowError, ValueError, TypeError):
        return None
    decoded = decode_plain(payload)
    return payload if decoded is not None and _same(decoded, value) else None


def decode_plain(payload: bytes) -> Any:
    """The stored value, or None if the payload is not plain data (then the YAML is parsed)."""
    try:
        value = msgpack.unpackb(payload, raw=False, strict_map_key=False, use_list=True)
    except (ValueError, TypeError, msgpack.UnpackException):
        return None
    return value if value is not None and _plain(value) else None
