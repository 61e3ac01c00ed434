"""Why a partitioner left a node off its backend, captured while partition() runs.

XNNPACK reports through WhyNoPartition: a DEBUG record on the
`executorch.backends.xnnpack.partition.config.*` loggers whose `msg` is one reused object holding
`.node` and `.reason`, so it is read inside `emit`. Those checks also run during decomposition,
when nothing is being partitioned; only calls inside partition() are kept. Vulkan reports through
VulkanSupportedOperators.log_skip(node, reason).

The partitioner's words come first; lowerd adds what they leave out, read from the node: which
input has which dtype when XNNPACK says "invalid dtype", and, when a backend says nothing,
whether it has no support for the op at all or has a config for it that declined.
"""

from __future__ import annotations

import inspect
import logging
from collections import defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

XNNPACK_CONFIG_LOGGER = "executorch.backends.xnnpack.partition.config"
# What XNNPACK's common constraints accept (XNNPartitionerConfig._check_node_has_valid_dtype);
# quantized ops also take int8 and qint types, but their refusals are not "invalid dtype" alone.
XNNPACK_DTYPES = ("float32", "float16")
_NOT_A_TENSOR = ", not a tensor"


class PartitionReasons:
    """Node name -> [(backend display name, reason)], in the order the partitioners said them."""

    def __init__(self) -> None:
        self.by_node: dict[str, list[tuple[str, str]]] = defaultdict(list)
        # backend -> the partitioner's configs by target name ("mean.dim"), for partitioners
        # built from configs (XNNPACK): what tells "no support" from "declined" when silent.
        self.configs: dict[str, dict[str, Any]] = {}

    def add(self, node: Any, backend: str, reason: str) -> None:
        said = self.by_node[node.name]
        if (backend, reason) not in said:
            said.append((backend, reason))

    def reason_for(self, node: Any, op: str, backends: list[str]) -> str:
        """Each backend's word on a node, made precise from the node where it is vague; silence
        is told apart into no support for the op and a config that declined it."""
        said = self.by_node.get(node.name, [])
        parts = []
        for backend in backends:
            reasons = [_precise(backend, r, node) for who, r in said if who == backend]
            text = "; ".join(reasons) if reasons else self._silence(backend, node, op)
            parts.append(text if len(backends) == 1 or not reasons else f"{backend}: {text}")
        return "; ".join(parts)

    def _silence(self, backend: str, node: Any, op: str) -> str:
        config = self.configs.get(backend, {}).get(_config_target(node))
        if config is None:
            return f"no {backend} support for {op}"
        declined = f"{backend} has a config for {op} ({type(config).__name__}) but it declined"
        constraint = _constraint_of(config)
        return f"{declined}: {constraint}" if constraint else f"{declined} without a reason"

    def note_configs(self, partitioner: Any, backend: str) -> None:
        """Keep the partitioner's configs by target name, when it is built from configs."""
        configs = getattr(partitioner, "target_partitioner_configs", None)
        if isinstance(configs, dict):
            self.configs[backend] = dict(configs)

    @contextmanager
    def listening(self, backend: str) -> Iterator[None]:
        """While open, what `backend`'s partitioner says of the nodes it leaves is collected:
        open it around partition() only (lowering/observed_partitioner.py)."""
        with ExitStack() as stack:
            if backend == "XNNPACK":
                stack.enter_context(self._xnnpack_log(backend))
            elif backend == "Vulkan":
                stack.enter_context(self._vulkan_skips(backend))
            yield

    @contextmanager
    def _xnnpack_log(self, backend: str) -> Iterator[None]:
        reasons = self

        class WhyNoPartitionHandler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                why = record.msg
                if hasattr(why, "node") and hasattr(why, "reason") and why.node is not None:
                    reasons.add(why.node, backend, str(why.reason))

        logger = logging.getLogger(XNNPACK_CONFIG_LOGGER)
        handler = WhyNoPartitionHandler(logging.DEBUG)
        saved = logger.level, logger.propagate
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False  # the reasons are ours to show; don't spam the user's log
        try:
            yield
        finally:
            logger.removeHandler(handler)
            logger.level, logger.propagate = saved

    @contextmanager
    def _vulkan_skips(self, backend: str) -> Iterator[None]:
        from executorch.backends.vulkan.partitioner.vulkan_partitioner import (
            VulkanSupportedOperators,
        )

        original = VulkanSupportedOperators.__dict__["log_skip"]
        reasons = self

        def log_skip(operators: Any, node: Any, reason: str) -> None:
            if node.op == "call_function":
                reasons.add(node, backend, str(reason))

        VulkanSupportedOperators.log_skip = log_skip
        try:
            yield
        finally:
            VulkanSupportedOperators.log_skip = original


def _precise(backend: str, reason: str, node: Any) -> str:
    """XNNPACK's "invalid dtype" names no dtype and no input: say which, from meta["val"]."""
    if backend != "XNNPACK" or reason != "invalid dtype":
        return reason
    off = _off_dtypes(node)
    if not off:
        return reason
    found = ", ".join(f"{name} is {what}" for name, what in off)
    if all(what.endswith(_NOT_A_TENSOR) for _, what in off):
        # A size read off a dynamic dimension (a SymInt): no dtype is the cause.
        return f"{found}: XNNPACK takes tensor inputs only"
    return f"{reason}: {found} (XNNPACK takes {' or '.join(XNNPACK_DTYPES)})"


def _off_dtypes(node: Any) -> list[tuple[str, str]]:
    """(input or output, what it is) for each tensor XNNPACK's dtype check would refuse."""
    found = []
    for name, arg in _tensor_inputs(node):
        val = arg.meta.get("val")
        if val is None or isinstance(val, tuple):
            continue  # XNNPACK's check skips these too
        what = _dtype_problem(val)
        if what:
            found.append((f"input {name}", what))
    outputs = node.meta.get("val")
    for val in outputs if isinstance(outputs, tuple) else (outputs,):
        what = _dtype_problem(val) if val is not None else None
        if what:
            found.append(("output", what))
    return found


def _dtype_problem(val: Any) -> str | None:
    dtype = getattr(val, "dtype", None)
    if dtype is None:  # a SymInt or a Python number where a tensor was expected
        return f"a {type(val).__name__}{_NOT_A_TENSOR}"
    name = str(dtype).removeprefix("torch.")
    if name not in XNNPACK_DTYPES:
        return name
    numel = val.numel()
    return f"an empty {name} tensor" if isinstance(numel, int) and numel == 0 else None


def _tensor_inputs(node: Any) -> list[tuple[str, Any]]:
    """(argument name, input node) as the op's schema names them: `self`, `tensors[1]`."""
    schema = getattr(node.target, "_schema", None)
    names = [argument.name for argument in schema.arguments] if schema else []
    inputs = []
    for index, arg in enumerate(node.args):
        name = names[index] if index < len(names) else f"#{index}"
        if isinstance(arg, list | tuple):
            inputs += [(f"{name}[{i}]", a) for i, a in enumerate(arg) if hasattr(a, "meta")]
        elif hasattr(arg, "meta"):
            inputs.append((name, arg))
    return inputs


def _config_target(node: Any) -> str:
    """The key ExecuTorch's ConfigerationBasedPartitioner looks a node's config up by
    (format_target_name): the op's name without its namespace, `mean.dim`."""
    names = getattr(node.target, "__name__", str(node.target)).split(".")
    return ".".join(names[1:] if len(names) > 2 else names)


def _constraint_of(config: Any) -> str | None:
    """The constraint a config documents on its own check_constraints (CatConfig: "Only support
    concatenation of 2 - 5 tensors"); None when it documents none."""
    # The check in effect is the first one up the class's MRO; its docstring, not an inherited
    # one (inspect.getdoc would give the abstract base's "Takes in a node and returns true…").
    owner = next((c for c in type(config).__mro__ if "check_constraints" in c.__dict__), None)
    check = owner.__dict__["check_constraints"] if owner else None
    doc = inspect.cleandoc(check.__doc__) if check is not None and check.__doc__ else ""
    first = doc.split("\n\n")[0]
    return " ".join(first.split()) or None
