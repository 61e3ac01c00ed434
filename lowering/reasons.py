"""Why a partitioner left a node off its backend, captured while partition() runs.

XNNPACK reports through WhyNoPartition: a DEBUG record on the
`executorch.backends.xnnpack.partition.config.*` loggers whose `msg` is one reused object holding
`.node` and `.reason`, so it is read inside `emit`. Those checks also run during decomposition,
when nothing is being partitioned; only calls inside partition() are kept. Vulkan reports through
VulkanSupportedOperators.log_skip(node, reason).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

XNNPACK_CONFIG_LOGGER = "executorch.backends.xnnpack.partition.config"


class PartitionReasons:
    """Node name -> [(backend display name, reason)], in the order the partitioners said them."""

    def __init__(self) -> None:
        self.by_node: dict[str, list[tuple[str, str]]] = defaultdict(list)

    def add(self, node: Any, backend: str, reason: str) -> None:
        said = self.by_node[node.name]
        if (backend, reason) not in said:
            said.append((backend, reason))

    def reason_for(self, node_name: str, op: str, backends: list[str]) -> str:
        """Each backend's word on a node; silence means the backend has no support for the op."""
        said = self.by_node.get(node_name, [])
        parts = []
        for backend in backends:
            reasons = [reason for who, reason in said if who == backend]
            text = "; ".join(reasons) if reasons else f"no {backend} support for {op}"
            parts.append(text if len(backends) == 1 or not reasons else f"{backend}: {text}")
        return "; ".join(parts)

    def watch(self, partitioner: Any, backend: str) -> None:
        """Make `partitioner.partition` record its reasons into this collector."""
        partition = partitioner.partition

        def partition_and_record(program: Any) -> Any:
            with self._listening(backend):
                return partition(program)

        partitioner.partition = partition_and_record

    @contextmanager
    def _listening(self, backend: str) -> Iterator[None]:
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
