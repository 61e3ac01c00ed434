"""A backend's partitioner, imported from the name the project model gives it, built with the
target's options for it ([tool.lowerd] backend_options; names checked by project/config.py)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from executorch.exir.backend.partitioner import Partitioner

from lowerd.project.backends import Backend


def make_partitioner(backend: Backend, options: Mapping[str, Any] | None = None) -> Partitioner:
    """The partitioner as a script would make it: `XnnpackPartitioner()`, or with the options
    `XnnpackPartitioner(config_precisions=[ConfigPrecisionType.FP32], per_op_mode=True)`,
    `VulkanPartitioner(compile_options={...})`,
    `CoreMLPartitioner(compile_specs=CoreMLBackend.generate_compile_specs(...))`."""
    module, _, name = backend.partitioner.partition(":")
    kwargs = partitioner_arguments(backend.name, options or {})
    partitioner: Partitioner = getattr(importlib.import_module(module), name)(**kwargs)
    return partitioner


def partitioner_arguments(backend: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The partitioner's keyword arguments for the options as the config holds them."""
    if not options:
        return {}
    if backend == "xnnpack":
        return _xnnpack_arguments(options)
    if backend == "vulkan":
        return {"compile_options": _vulkan_compile_options(options.get("compile_options", {}))}
    if backend == "coreml":
        return {"compile_specs": _coreml_compile_specs(options)}
    raise ValueError(f"backend {backend!r} takes no options")


def _xnnpack_arguments(options: Mapping[str, Any]) -> dict[str, Any]:
    from executorch.backends.xnnpack.partition.config.xnnpack_config import ConfigPrecisionType

    arguments: dict[str, Any] = {}
    if "config_precisions" in options:
        precisions = options["config_precisions"]
        arguments["config_precisions"] = [ConfigPrecisionType[p.upper()] for p in precisions]
    if "per_op_mode" in options:
        arguments["per_op_mode"] = bool(options["per_op_mode"])
    return arguments


def _vulkan_compile_options(options: Mapping[str, Any]) -> dict[str, Any]:
    from executorch.backends.vulkan.serialization.vulkan_graph_schema import (
        VkMemoryLayout,
        VkStorageType,
    )

    compile_options: dict[str, Any] = {}
    for key, value in options.items():
        if key == "storage_type_override":
            compile_options[key] = VkStorageType[value]
        elif key == "memory_layout_override":
            compile_options[key] = VkMemoryLayout[value]
        elif key == "texture_limits":
            compile_options[key] = tuple(value)  # utils.ImageExtents
        else:
            compile_options[key] = value
    return compile_options


def _coreml_compile_specs(options: Mapping[str, Any]) -> list[Any]:
    from executorch.backends.apple.coreml.compiler import CoreMLBackend

    ct: Any = importlib.import_module("coremltools")  # no type information
    arguments: dict[str, Any] = {}
    if "compute_unit" in options:
        arguments["compute_unit"] = ct.ComputeUnit[options["compute_unit"].upper()]
    if "minimum_deployment_target" in options:
        arguments["minimum_deployment_target"] = ct.target[options["minimum_deployment_target"]]
    if "model_type" in options:
        arguments["model_type"] = CoreMLBackend.MODEL_TYPE(options["model_type"])
    specs: list[Any] = CoreMLBackend.generate_compile_specs(**arguments)
    return specs
