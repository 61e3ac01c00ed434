"""Backends by the names users write in [tool.lowerd]: partitioner and preprocess class of each,
by name, so that config validation never imports torch or executorch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backend:
    name: str
    display: str
    # ExecuTorch resolves a backend by this class name among BackendDetails.__subclasses__().
    details_class: str
    # "module:Class" of its partitioner, imported by the engine (lowerd.lowering.partitioners).
    partitioner: str


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend(
            "xnnpack",
            "XNNPACK",
            "XnnpackBackend",
            "executorch.backends.xnnpack.partition.xnnpack_partitioner:XnnpackPartitioner",
        ),
        Backend(
            "vulkan",
            "Vulkan",
            "VulkanBackend",
            "executorch.backends.vulkan.partitioner.vulkan_partitioner:VulkanPartitioner",
        ),
        Backend(
            "coreml",
            "CoreML",
            "CoreMLBackend",
            "executorch.backends.apple.coreml.partition:CoreMLPartitioner",
        ),
    )
}

KNOWN_BACKENDS: tuple[str, ...] = tuple(BACKENDS)


def backend_by_details_class(class_name: str) -> Backend | None:
    return next((b for b in BACKENDS.values() if b.details_class == class_name), None)
