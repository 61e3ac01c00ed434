"""The op list a set of programs needs, in the format of ExecuTorch's selective build: the
`selected_operators.yaml` its gen_oplist writes (executorch/codegen/tools/gen_oplist.py
_dump_yaml) and its build reads with torchgen's SelectiveBuilder. For one program it is what
`gen_oplist --model_file_path` writes, byte for byte; for several, each operator lists the
programs that need it as its debug_info, and its kernel keys are merged.
"""

from __future__ import annotations

from collections.abc import Mapping

from lowerd.project.loadability import ProgramNeeds


def selected_operators(programs: Mapping[str, ProgramNeeds]) -> dict[str, object]:
    """The op list of `programs` (each by the .pte path its debug_info names)."""
    operators: dict[str, dict[str, object]] = {}
    kernel_keys: dict[str, set[str]] = {}
    for pte, needs in programs.items():
        for kernel, keys in needs.kernels.items():
            operator = operators.setdefault(kernel, _operator())
            debug_info = operator["debug_info"]
            assert isinstance(debug_info, list)
            debug_info.append(pte)
            kernel_keys.setdefault(kernel, set()).update(keys)
    return {
        "build_features": [],
        "custom_classes": [],
        "et_kernel_metadata": {name: sorted(kernel_keys[name]) for name in sorted(kernel_keys)},
        "include_all_non_op_selectives": False,
        "include_all_operators": False,
        "kernel_metadata": {},
        "operators": {name: operators[name] for name in sorted(operators)},
    }


def _operator() -> dict[str, object]:
    """An operator as gen_oplist lists one a model calls (SelectiveBuildOperator.to_dict)."""
    return {
        "debug_info": [],
        "include_all_overloads": False,
        "is_root_operator": True,
        "is_used_for_training": True,
    }


def oplist_text(programs: Mapping[str, ProgramNeeds]) -> str:
    """selected_operators(programs) as gen_oplist dumps it (yaml.safe_dump, block style)."""
    import yaml

    return str(yaml.safe_dump(selected_operators(programs), default_flow_style=False))
