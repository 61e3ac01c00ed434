"""Backends by the names users write in [tool.lowerd]: partitioner and preprocess class of each.

Nothing here imports torch or executorch at module import, so config validation stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Backend:
    name: str
    display: str
    # ExecuTorch resolves a backend by this class name among BackendDetails.__subclasses__().
    details_class: str
    make_partitioner: Callable[[], Any]


def _xnnpack() -> Any:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    return XnnpackPartitioner()


def _vulkan() -> Any:
    from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner

    return VulkanPartitioner()


def _coreml() -> Any:
    from executorch.backends.apple.coreml.partition import CoreMLPartitioner

    return CoreMLPartitioner()


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend("xnnpack", "XNNPACK", "XnnpackBackend", _xnnpack),
        Backend("vulkan", "Vulkan", "VulkanBackend", _vulkan),
        Backend("coreml", "CoreML", "CoreMLBackend", _coreml),
    )
}

KNOWN_BACKENDS: tuple[str, ...] = tuple(BACKENDS)


def backend_by_details_class(class_name: str) -> Backend | None:
    return next((b for b in BACKENDS.values() if b.details_class == class_name), None)
