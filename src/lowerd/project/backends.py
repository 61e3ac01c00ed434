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


# Backend options: [tool.lowerd.backend_options.<backend>] and [...targets.T.backend_options.<b>].
# Each backend's options by name, with the kind of value each takes, so that a config is checked
# without importing torch, executorch or coremltools. Names listed here from ExecuTorch's classes
# are compared with those classes by tests/test_backend_options.py, so drift is caught.

# executorch.backends.xnnpack.partition.config.xnnpack_config.ConfigPrecisionType, lowercased.
XNNPACK_PRECISIONS: tuple[str, ...] = ("fp32", "static_quant", "dynamic_quant")
# coremltools.ComputeUnit members, lowercased (CoreMLBackend writes them so in its compile spec).
COREML_COMPUTE_UNITS: tuple[str, ...] = ("all", "cpu_and_gpu", "cpu_only", "cpu_and_ne")
# coremltools.target members, as spelled there.
COREML_DEPLOYMENT_TARGETS: tuple[str, ...] = (
    "iOS13",
    "iOS14",
    "iOS15",
    "iOS16",
    "iOS17",
    "iOS18",
    "iOS26",
)
# CoreMLBackend.MODEL_TYPE values.
COREML_MODEL_TYPES: tuple[str, ...] = ("model", "compiled_model")
# executorch.backends.vulkan.serialization.vulkan_graph_schema enums, by member name.
VULKAN_STORAGE_TYPES: tuple[str, ...] = ("BUFFER", "TEXTURE_3D", "TEXTURE_2D", "DEFAULT_STORAGE")
VULKAN_MEMORY_LAYOUTS: tuple[str, ...] = (
    "TENSOR_WIDTH_PACKED",
    "TENSOR_HEIGHT_PACKED",
    "TENSOR_CHANNELS_PACKED",
    "PACKED_INT8_4W4C",
    "PACKED_INT8_4H4W",
    "PACKED_INT8_4W",
    "PACKED_INT8_4C",
    "PACKED_INT8_4C1W",
    "PACKED_INT8_CONV2D",
    "DEFAULT_LAYOUT",
)


@dataclass(frozen=True)
class OptionKind:
    """What an option takes: "bool", "int" (positive), "names" (a list of `choices`), "choice"
    (one of `choices`), "ints3" (three positive integers) or "table" (of the options in
    `table`, e.g. Vulkan's compile_options)."""

    kind: str
    choices: tuple[str, ...] = ()
    table: tuple[tuple[str, OptionKind], ...] = ()

    def describe(self) -> str:
        if self.kind == "bool":
            return "true or false"
        if self.kind == "int":
            return "a positive integer"
        if self.kind == "ints3":
            return "an array of three positive integers"
        if self.kind == "names":
            return f"a list of names from {', '.join(self.choices)}"
        if self.kind == "choice":
            return f"one of {', '.join(self.choices)}"
        return "a table"


_BOOL = OptionKind("bool")
_INT = OptionKind("int")

# VulkanPartitioner's compile_options: the keys its partitioner and VulkanBackend.preprocess read
# (vulkan_partitioner.py, parse_compile_options; vulkan_preprocess.py, parse_compile_spec).
VULKAN_COMPILE_OPTIONS: tuple[tuple[str, OptionKind], ...] = (
    ("texture_limits", OptionKind("ints3")),
    ("small_texture_limits", _BOOL),
    ("buffer_limit", _INT),
    ("require_dynamic_shapes", _BOOL),
    ("skip_bool_tensors", _BOOL),
    ("storage_type_override", OptionKind("choice", VULKAN_STORAGE_TYPES)),
    ("memory_layout_override", OptionKind("choice", VULKAN_MEMORY_LAYOUTS)),
    ("skip_tag_memory_metadata", _BOOL),
    ("downcast_64_bit", _BOOL),
    ("force_fp16", _BOOL),
    ("skip_memory_planning", _BOOL),
    ("alias_buffer_mutations", _BOOL),
    ("external_constants_max_data_bytes", _INT),
)

BACKEND_OPTIONS: dict[str, dict[str, OptionKind]] = {
    # XnnpackPartitioner(config_precisions=..., per_op_mode=...)
    "xnnpack": {
        "config_precisions": OptionKind("names", XNNPACK_PRECISIONS),
        "per_op_mode": _BOOL,
    },
    # VulkanPartitioner(compile_options={...})
    "vulkan": {"compile_options": OptionKind("table", table=VULKAN_COMPILE_OPTIONS)},
    # CoreMLPartitioner(compile_specs=CoreMLBackend.generate_compile_specs(...))
    "coreml": {
        "compute_unit": OptionKind("choice", COREML_COMPUTE_UNITS),
        "minimum_deployment_target": OptionKind("choice", COREML_DEPLOYMENT_TARGETS),
        "model_type": OptionKind("choice", COREML_MODEL_TYPES),
    },
}
