"""Will the .pte load on its runtime? The program's needs read from its execution plans, the
runtime's kernels and backends (this host's, or a declared device runtime's), and what it lacks.

The needs are what ExecuTorch's own selective build reads of a program: gen_oplist
(executorch/codegen/tools/gen_oplist.py) lists the operators of its execution plans with
selective_build._get_program_operators and each one's kernel keys (the dtype and dim order of its
tensor arguments) with _get_io_metadata_for_program_operators; lowerd calls the same functions on
the same bytes, so `lowerd oplist` writes what gen_oplist writes. The delegates' backend ids come
from the execution plans too (ExecuTorch's Program schema).

A declared op list is read with torchgen's SelectiveBuilder, the parser ExecuTorch's build uses
for selected_operators.yaml (a list of `- op:` entries, functions.yaml's form, with gen_oplist's
own reader). ExecuTorch's prim ops (`executorch_prim::`) are registered by the runtime's core,
whatever the op list says, so a declared op list is not asked for them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from lowerd.project.config import ProjectConfig, TargetConfig
from lowerd.project.errors import ConfigError
from lowerd.project.loadability import ProgramNeeds, RuntimeCheck, Site, find_problems
from lowerd.project.report_model import MethodReport

_PRIM_OPS = "executorch_prim::"
_TENSOR_KINDS = (5, 10, 11)  # gen_oplist's KernelType: TENSOR, TENSOR_LIST, OPTIONAL_TENSOR_LIST


def program_needs(program: Any, buffer: bytes) -> ProgramNeeds:
    """The operators of `program` (ExecuTorch's Program, whose bytes are `buffer`) with their
    kernel keys as gen_oplist makes them, and its delegates' backend ids."""
    from executorch.codegen.tools.selective_build import (
        _get_io_metadata_for_program_operators,
        _get_program_from_buffer,
        _get_program_operators,
    )

    parsed = _get_program_from_buffer(buffer)
    keys = _kernel_keys(_get_io_metadata_for_program_operators(parsed))
    kernels = {name: keys.get(name, []) for name in sorted(set(_get_program_operators(parsed)))}
    backends = {d.id for plan in program.execution_plan for d in plan.delegates}
    return ProgramNeeds(kernels=kernels, backends=sorted(backends))


def needs_of_file(path: Path) -> ProgramNeeds:
    """A written .pte's needs (a kept .pte whose record predates them)."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    buffer = path.read_bytes()
    return program_needs(deserialize_pte_binary(buffer).program, buffer)


def _kernel_keys(metadata: dict[str, Any]) -> dict[str, list[str]]:
    """gen_oplist's _get_kernel_metadata_for_model on a parsed program: per operator, one key
    `v1/<dtype>;<dim order>|...` per specialization (tensor arguments only)."""
    keys: dict[str, list[str]] = {}
    for name, specializations in metadata.items():
        found = keys.setdefault(name, [])
        for arguments in specializations:
            tensors = (a for a in arguments if a.kernel_type in _TENSOR_KINDS)
            # gen_oplist's key, its last character cut: `v1` for an op with no tensor argument.
            found.append(("v1/" + "".join(f"{a.dtype};{_dims(a)}|" for a in tensors))[:-1])
    # Sorted: the runtime hands the specializations over as a set, in no stable order.
    return {name: sorted(set(found)) for name, found in keys.items()}


def _dims(argument: Any) -> str:
    return ",".join(map(str, argument.dim_order))


@dataclass(frozen=True)
class Runtime:
    """What a runtime registers: a kernel test, the backend ids, and its name in messages."""

    has_kernel: Callable[[str], bool]
    backends: frozenset[str]
    name: str
    sources: tuple[str, str]  # where its kernels and its backends are listed, in words


def target_runtime(config: ProjectConfig, target: TargetConfig) -> Runtime:
    """The target's declared runtime, each part not declared this host's."""
    declared = target.runtime
    has_kernel = _host_kernels() if declared.ops is None else _op_list(config, target)
    if declared.backends is not None:
        backends = frozenset(declared.backends.value)
    else:
        backends = frozenset(_host().backends)
    sources = (declared.kernel_source(), declared.backend_source())
    return Runtime(has_kernel, backends, declared.describe(), sources)


def check_runtime(
    config: ProjectConfig,
    target: TargetConfig,
    needs: ProgramNeeds,
    methods: dict[str, MethodReport],
    entry: Site,
) -> RuntimeCheck:
    runtime = target_runtime(config, target)
    problems = find_problems(
        needs, runtime.has_kernel, runtime.backends, runtime.sources, methods, entry
    )
    return RuntimeCheck(runtime.name, needs, problems)


@dataclass(frozen=True)
class _HostRuntime:
    kernels: frozenset[str]
    backends: tuple[str, ...]


@cache  # what this process's runtime registers does not change while it runs
def _host() -> _HostRuntime:
    from executorch.extension.pybindings import portable_lib

    kernels = frozenset(portable_lib._get_operator_names())
    return _HostRuntime(kernels, tuple(portable_lib._get_registered_backend_names()))


def _host_kernels() -> Callable[[str], bool]:
    return _host().kernels.__contains__


def _op_list(config: ProjectConfig, target: TargetConfig) -> Callable[[str], bool]:
    """The declared op list's test, by torchgen's parser; an unreadable list is an error at
    its key's line."""
    import yaml
    from torchgen.selective_build.selector import SelectiveBuilder

    located = target.runtime.ops
    assert located is not None
    path = config.root / Path(located.value).expanduser()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        if isinstance(data, list):  # functions.yaml's form: `- op: cumsum.out`
            listed = _listed_ops(path)
            return lambda name: name.startswith(_PRIM_OPS) or name in listed
        selector = SelectiveBuilder.from_yaml_dict(data or {})
    except Exception as error:
        message = f"ops: {located.value!r} is no op list ExecuTorch reads: {error}"
        raise ConfigError(message, config.path, located.line) from error
    return lambda name: name.startswith(_PRIM_OPS) or selector.is_operator_selected(name)


def _listed_ops(path: Path) -> frozenset[str]:
    """A functions.yaml-style list's operators, by gen_oplist's own reader."""
    from executorch.codegen.tools.gen_oplist import _get_et_kernel_metadata_from_ops_yaml

    return frozenset(_get_et_kernel_metadata_from_ops_yaml(str(path)))
