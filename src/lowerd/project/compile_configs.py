"""The fields of ExecuTorch's EdgeCompileConfig and ExecutorchBackendConfig that [tool.lowerd]
takes ([...edge_compile_config] and [...executorch_backend_config] tables), and the arguments of
the passes it names ([...memory_planning], sym_shape_eval), with the kind of value each takes, so
that a config is checked without importing torch or executorch.

Only fields of plain types (bool, int) are taken; the others (passes, ops, callables) are listed
as not taken. tests/test_lowering_configs.py compares both lists with the dataclasses in
executorch/exir/capture/_config.py, so a field added, removed or retyped there is caught.
"""

from __future__ import annotations

from lowerd.project.backends import OptionKind

_BOOL = OptionKind("bool")
_INT = OptionKind("int")  # positive: the alignments (powers of two) and segment_alignment

# executorch.exir.EdgeCompileConfig: to_edge_transform_and_lower(compile_config=...).
EDGE_COMPILE_CONFIG: dict[str, OptionKind] = {
    "_check_ir_validity": _BOOL,
    "_skip_dim_order": _BOOL,
}
# Fields of OpOverload lists: not plain values.
EDGE_COMPILE_CONFIG_NOT_TAKEN: tuple[str, ...] = ("_core_aten_ops_exception_list", "preserve_ops")

# executorch.exir.ExecutorchBackendConfig: to_executorch(config=...).
EXECUTORCH_BACKEND_CONFIG: dict[str, OptionKind] = {
    "emit_stacktrace": _BOOL,
    "extract_delegate_segments": _BOOL,
    "segment_alignment": _INT,
    "constant_tensor_alignment": _INT,  # Optional[int]: absent is None
    "delegate_alignment": _INT,  # Optional[int]: absent is None
    "remove_view_copy": _BOOL,
    "external_constants": _BOOL,  # or a callable: only the bool is taken
    "external_mutable_weights": _BOOL,
    "emit_mutable_buffer_names": _BOOL,
    "do_quant_fusion_and_const_prop": _BOOL,
    "run_reinplace_pass": _BOOL,
    "enable_non_cpu_memory_planning": _BOOL,
}
# Passes, pass dicts, enums and op sets: not plain values.
EXECUTORCH_BACKEND_CONFIG_NOT_TAKEN: tuple[str, ...] = (
    "passes",
    "memory_planning_pass",
    "propagate_device_config",
    "to_out_var_pass",
    "dynamic_memory_planning_mode",
    "sym_shape_eval_pass",
    "reinplace_extra_ops",
)

# executorch.exir.memory_planning's algorithms, by function name: memory_planning_algo =
# "greedy" is MemoryPlanningPass(memory_planning_algo=MemoryPlanningAlgorithmSuite(
# algo_list=[greedy])), the pass's own default.
MEMORY_PLANNING_ALGOS: tuple[str, ...] = ("greedy", "naive")

# executorch.exir.passes.MemoryPlanningPass's arguments: ExecutorchBackendConfig(
# memory_planning_pass=MemoryPlanningPass(...)), the algorithm by name.
MEMORY_PLANNING: dict[str, OptionKind] = {
    "memory_planning_algo": OptionKind("choice", MEMORY_PLANNING_ALGOS),
    "allow_lifetime_and_storage_overlap": _BOOL,
    "alloc_graph_input": _BOOL,
    "alloc_graph_output": _BOOL,
    "alloc_mutable_buffers": _BOOL,
    "share_mutable_buffers": _BOOL,  # needs alloc_mutable_buffers (ExecuTorch refuses it else)
    "alignment": _INT,
}

# ExecutorchBackendConfig(sym_shape_eval_pass=...) by the name [tool.lowerd] gives it: the class
# in executorch.exir.passes.sym_shape_eval_pass. "constraint" is ExecuTorch's default.
SYM_SHAPE_EVAL_PASSES: dict[str, str] = {
    "hint": "HintBasedSymShapeEvalPass",
    "constraint": "ConstraintBasedSymShapeEvalPass",
}

# The tables by their key in [tool.lowerd] and in a target.
COMPILE_CONFIGS: dict[str, dict[str, OptionKind]] = {
    "edge_compile_config": EDGE_COMPILE_CONFIG,
    "executorch_backend_config": EXECUTORCH_BACKEND_CONFIG,
    "memory_planning": MEMORY_PLANNING,
}
