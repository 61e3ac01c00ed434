"""A stock ExecuTorch script that reproduces a target: what lowerd does for it, written out as the
script a user would have written without lowerd — export as its [..export] table says, (declared
quantization,) lowering with the target's partitioners and options, emission with its configs and
passes — so that running it gives the
.pte (and data files) lowerd wrote, byte for byte. It imports ExecuTorch, never lowerd.

Made from the config alone (no torch here): the editor's *Copy a stock ExecuTorch script* and
`lowerd reproduce TARGET` print it.
"""

from __future__ import annotations

from typing import Any

from lowerd.project.backends import BACKENDS
from lowerd.project.bundle_script import bundle_cases, bundle_write
from lowerd.project.compile_configs import SYM_SHAPE_EVAL_PASSES
from lowerd.project.config import ProjectConfig, TargetConfig
from lowerd.project.export_options import ExportConfig
from lowerd.project.lowering_options import Options, WholeProgram
from lowerd.project.python_literal import identifier, literal
from lowerd.project.quantize_options import TorchaoLinears
from lowerd.project.recipe_script import recipe_export

# Every value in the script is written by python_literal (a string through repr, `float("inf")`
# for an infinite float), never pasted into its text: a project folder's name may hold quotes,
# backslashes or code. The docstring holds no value for that reason.
_HEADER = '''\
"""Stock ExecuTorch, no lowerd: reproduces lowerd target TARGET of the project in PROJECT.

Run it with the project's Python: `python TARGET_stock.py`. It writes TARGET.pte (and any data
files) to the current folder and prints each file's sha256, which equal lowerd's.
"""

import hashlib
import importlib
import importlib.util
import os
import sys
from pathlib import Path

import torch
'''

_LOAD = '''
TARGET = {name}
PROJECT = Path({root})
OUT = Path.cwd()  # where the files go: the folder the script runs in
sys.path.insert(0, str(PROJECT))
os.chdir(PROJECT)  # entries open files relative to their project, as lowerd runs them


def load(reference):
    """`models/net.py:make` (a file of the project) or `package.module:make`."""
    where, _, name = reference.rpartition(":")
    if where.endswith(".py"):
        module_name = ".".join(Path(where).with_suffix("").parts)
        spec = importlib.util.spec_from_file_location(module_name, PROJECT / where)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    return getattr(module, name)


returned = load({entry})()
methods = returned if isinstance(returned, dict) else {{"forward": returned}}


def inputs(method):
    """(module, args, kwargs, dynamic_shapes) of a method as the entry returned it: a
    lowerd.Method, or a (module, args[, dynamic_shapes]) tuple."""
    if isinstance(method, tuple):
        module, args, *rest = method
        return module, args, {{}}, rest[0] if rest else None
    return method.module, method.args, dict(method.kwargs), method.dynamic_shapes
'''

_QUANTIZE = """
from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
    XNNPACKQuantizer,
    get_symmetric_quantization_config,
)
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

samples = {samples}
if not isinstance(samples, dict):
    samples = {{name: samples for name in methods}}


def quantized(name, module, args, kwargs, shapes):
    graph = export(module, args, kwargs, shapes).module()
    quantizer = XNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=True, is_dynamic={is_dynamic})
    )
    prepared = prepare_pt2e(graph, quantizer)
    calls = [(args, kwargs)]  # the example inputs, unless the calibration gives samples
    if samples.get(name):  # a tuple of positional inputs, or a dict of keyword inputs
        calls = [((), s) if isinstance(s, dict) else (s, {{}}) for s in samples[name]]
    for sample_args, sample_kwargs in calls:
        prepared(*sample_args, **sample_kwargs)
    return convert_pt2e(prepared)

"""

_TORCHAO = '''
from torchao.quantization.granularity import {granularity_class}
from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig, quantize_
from torchao.utils import TorchAOBaseTensor, unwrap_tensor_subclass

config = Int8DynamicActivationIntxWeightConfig(
    weight_dtype=torch.int{weight_bits},
    weight_granularity={granularity},
    intx_choose_qparams_algorithm={qparams_algorithm},
)


def selected(module, fqn):
    """torchao's default filter (every nn.Linear but nn.MultiheadAttention's out-projection),
    {which}skipping a linear quantized already (methods may share one)."""
    return (
        isinstance(module, torch.nn.Linear)
        and not isinstance(module, torch.nn.modules.linear.NonDynamicallyQuantizableLinear)
        and not isinstance(module.weight, TorchAOBaseTensor){divisible}
    )


quantized_modules = set()


def quantized(name, module, args, kwargs, shapes):
    if id(module) not in quantized_modules:  # methods may share a module: quantize it once
        quantized_modules.add(id(module))
        quantize_(module, config, filter_fn=selected)
        unwrap_tensor_subclass(module)
    return module

'''

_EXPORT = """
{passes}programs = {{}}
for name, method in methods.items():
    module, args, kwargs, shapes = inputs(method)
{quantize}    programs[name] = export(module, args, kwargs, shapes{given})
"""

_WRITE = """
OUT.mkdir(parents=True, exist_ok=True)
pte = OUT / (TARGET + ".pte")
pte.write_bytes(manager.buffer)
print(f"{pte}: sha256 {hashlib.sha256(manager.buffer).hexdigest()}")
"""


def stock_script(config: ProjectConfig, target: TargetConfig) -> str:
    """The script's text, for the target as the config declares it."""
    parts = [_HEADER]
    parts.append(
        _LOAD.format(
            name=literal(target.name),
            root=literal(str(config.root)),
            entry=literal(target.entry.value),
        )
    )
    parts.append(bundle_cases(target))
    if target.recipe:  # executorch.export.export with the recipe does all the rest
        parts.append(recipe_export(target, target.recipe))
        parts.append(_WRITE)
        parts.append(_data_files(target))
        parts.append(bundle_write(target))
        return "".join(parts)
    parts.append(_export_function(target.export))
    parts.append(_quantize(target))
    quantize = "    module = quantized(name, module, args, kwargs, shapes)\n"
    module_passes = target.export.module_passes
    passes = f"module_passes = load({literal(module_passes.value)})()\n" if module_passes else ""
    parts.append(
        _EXPORT.format(
            passes=passes,
            quantize=quantize if target.quantize else "",
            given=", module_passes" if module_passes else "",
        )
    )
    whole = target.whole_program
    parts.append(_whole_program(target, whole.value) if whole else _lower(target))
    parts.append(_emit(target))
    parts.append(_WRITE)
    parts.append(_data_files(target))
    parts.append(bundle_write(target))
    return "".join(parts)


def _export_function(settings: ExportConfig) -> str:
    """export(module, args, kwargs, shapes[, passes]): torch.export as the target's [..export]
    table says, the module passes' graph exported again."""
    strict = ", strict=True" if settings.strict else ""
    call = f"torch.export.export({{}}, args, kwargs, dynamic_shapes=shapes{strict})"
    body = [f"program = {call.format('module')}"]
    if settings.module_passes:
        body += [
            "graph = program.module()  # [export] module_passes: each pass, then export again",
            "for module_pass in passes:",
            "    graph = module_pass(graph)",
            "    graph = graph[0] if isinstance(graph, tuple) else graph  # a PassResult",
            f"program = {call.format('graph')}",
        ]
    body.append("return program")
    if settings.no_grad:
        with_no_grad = "with torch.no_grad():  # [export] no_grad: the lowering runs in grad mode"
        body = [with_no_grad, *(f"    {line}" for line in body)]
    lines = ["", "", "def export(module, args, kwargs, shapes, passes=()):"]
    lines += [f"    {line}" for line in body]
    return "\n".join(lines) + "\n\n"


def _quantize(target: TargetConfig) -> str:
    if target.quantize is None:
        return ""
    if target.quantize.torchao is not None:
        return _torchao(target.quantize.torchao)
    calibration = target.quantize.calibration
    samples = f"load({literal(calibration.value)})()" if calibration else "{}"
    return _QUANTIZE.format(samples=samples, is_dynamic=literal(target.quantize.is_dynamic))


def _torchao(linears: TorchaoLinears) -> str:
    """torchao's quantize_ on each distinct module, as lowering/torchao_quantize.py runs it."""
    group_size = linears.group_size
    divisible = linears.filter == "linear_divisible" and group_size is not None
    per_group = linears.granularity == "per_group"
    return _TORCHAO.format(
        granularity_class="PerGroup" if per_group else "PerAxis",
        granularity=f"PerGroup({literal(group_size)})" if per_group else "PerAxis(0)",
        weight_bits=literal(int(linears.weight_bits)),
        qparams_algorithm=literal(linears.qparams_algorithm),
        which=f"kept if in_features divides by {int(group_size or 0)} (optimum's), "
        if divisible
        else "",
        divisible=f"\n        and module.weight.shape[1] % {literal(group_size)} == 0"
        if divisible
        else "",
    )


def _lower(target: TargetConfig) -> str:
    lines = ["", "from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower", ""]
    if target.partitioners:
        lines.append(f"partitioner = load({literal(target.partitioners.value)})()")
    else:
        imports, made = _partitioners(target)
        lines[1:1] = imports
        lines.append(f"partitioner = [{', '.join(made)}]")
    transform = target.transform_passes
    passes = f"load({literal(transform.value)})()" if transform else "None"
    lines += [
        "edge = to_edge_transform_and_lower(",
        "    programs,",
        f"    transform_passes={passes},",
        "    partitioner=partitioner,",
        f"    constant_methods={literal(target.constant_methods or None)},",
        f"    compile_config=EdgeCompileConfig({_keywords(target.edge_compile_config)}),",
        f"    generate_etrecord={literal(target.etrecord)},",
        ")",
    ]
    return "\n".join(lines) + "\n"


def _partitioners(target: TargetConfig) -> tuple[list[str], list[str]]:
    """The imports and the expressions of the target's backends' partitioners, each made with
    the target's options as lowerd makes it (lowering/partitioners.py)."""
    imports, made = [], []
    for name in target.backends:
        backend = BACKENDS[name]
        module, _, cls = backend.partitioner.partition(":")
        imports.append(f"from {module} import {cls}")
        options = target.backend_options.get(name) or {}
        option_imports, arguments = _partitioner_arguments(name, options)
        imports += option_imports
        made.append(f"{cls}({arguments})")
    return imports, made


def _partitioner_arguments(backend: str, options: dict[str, Any]) -> tuple[list[str], str]:
    if not options:
        return [], ""
    if backend == "xnnpack":
        imports, arguments = [], []
        if "config_precisions" in options:
            imports.append(
                "from executorch.backends.xnnpack.partition.config.xnnpack_config import"
                " ConfigPrecisionType"
            )
            members = ", ".join(
                f"ConfigPrecisionType.{identifier(p.upper())}" for p in options["config_precisions"]
            )
            arguments.append(f"config_precisions=[{members}]")
        if "per_op_mode" in options:
            arguments.append(f"per_op_mode={literal(bool(options['per_op_mode']))}")
        return imports, ", ".join(arguments)
    if backend == "vulkan":
        return _vulkan_arguments(options.get("compile_options", {}))
    if backend == "coreml":
        return _coreml_arguments(options)
    raise ValueError(f"backend {backend!r} takes no options")


def _vulkan_arguments(compile_options: dict[str, Any]) -> tuple[list[str], str]:
    imports = []
    items = []
    for key, value in compile_options.items():
        if key in ("storage_type_override", "memory_layout_override"):
            enum = "VkStorageType" if key == "storage_type_override" else "VkMemoryLayout"
            imports.append(
                f"from executorch.backends.vulkan.serialization.vulkan_graph_schema import {enum}"
            )
            items.append(f"{literal(key)}: {enum}.{identifier(value)}")
        elif key == "texture_limits":
            items.append(f"{literal(key)}: {literal(tuple(value))}")
        else:
            items.append(f"{literal(key)}: {literal(value)}")
    return imports, "compile_options={" + ", ".join(items) + "}"


def _coreml_arguments(options: dict[str, Any]) -> tuple[list[str], str]:
    imports = [
        "import coremltools as ct",
        "from executorch.backends.apple.coreml.compiler import CoreMLBackend",
    ]
    arguments = []
    if "compute_unit" in options:
        arguments.append(
            f"compute_unit=ct.ComputeUnit.{identifier(options['compute_unit'].upper())}"
        )
    if "minimum_deployment_target" in options:
        arguments.append(
            f"minimum_deployment_target=ct.target.{identifier(options['minimum_deployment_target'])}"
        )
    if "model_type" in options:
        arguments.append(f"model_type=CoreMLBackend.MODEL_TYPE({literal(options['model_type'])})")
    return imports, f"compile_specs=CoreMLBackend.generate_compile_specs({', '.join(arguments)})"


def _whole_program(target: TargetConfig, whole: WholeProgram) -> str:
    specs = ", ".join(
        f"CompileSpec({literal(key)}, {literal(value)}.encode())"
        for key, value in whole["compile_specs"].items()
    )
    backend_module = _backend_module(whole["backend_id"])
    return f"""
from executorch.exir import EdgeCompileConfig, to_edge
from executorch.exir.backend.backend_api import to_backend
from executorch.exir.backend.compile_spec_schema import CompileSpec
{backend_module}

class Composite(torch.nn.Module):  # ExecuTorch's documented whole-module lowering
    def __init__(self, lowered_module):
        super().__init__()
        self.lowered_module = lowered_module

    def forward(self, *args):
        return self.lowered_module(*args)


compile_config = EdgeCompileConfig({_keywords(target.edge_compile_config)})
edge = to_edge(programs, compile_config=compile_config)
composites = {{}}
for name, method in methods.items():
    module, args, kwargs, shapes = inputs(method)
    lowered = to_backend({literal(whole["backend_id"])}, edge.exported_program(name), [{specs}])
    if isinstance(shapes, dict):  # by the forward's parameter names, in their order
        import inspect

        names = list(inspect.signature(module.forward).parameters)[: len(args)]
        shapes = tuple(shapes.get(n) for n in names)
    shapes = {{"args": tuple(shapes)}} if shapes is not None else None
    composites[name] = torch.export.export(Composite(lowered), args, dynamic_shapes=shapes)
edge = to_edge(
    composites,
    constant_methods={literal(target.constant_methods or None)},
    compile_config=compile_config,
    generate_etrecord={literal(target.etrecord)},
)
"""


def _backend_module(backend_id: str) -> str:
    """The import that registers a known backend's BackendDetails (to_backend finds it by
    class name among those imported)."""
    modules = {
        "XnnpackBackend": "import executorch.backends.xnnpack.xnnpack_preprocess  # noqa: F401",
        "VulkanBackend": "import executorch.backends.vulkan.vulkan_preprocess  # noqa: F401",
        "CoreMLBackend": "import executorch.backends.apple.coreml.compiler  # noqa: F401",
    }
    return modules.get(
        backend_id, f"# {identifier(backend_id)}: import the module that defines it here"
    )


def _emit(target: TargetConfig) -> str:
    lines = ["", "from executorch.exir import ExecutorchBackendConfig"]
    arguments = [_keywords(target.executorch_backend_config)]
    if target.memory_planning:
        lines += [
            "from executorch.exir import memory_planning",
            "from executorch.exir.passes import MemoryPlanningPass",
        ]
        arguments.append(f"memory_planning_pass={_memory_planning_pass(target.memory_planning)}")
    if target.sym_shape_eval:
        name = SYM_SHAPE_EVAL_PASSES[target.sym_shape_eval]
        lines.append(f"from executorch.exir.passes.sym_shape_eval_pass import {name}")
        arguments.append(f"sym_shape_eval_pass={name}()")
    config = ", ".join(argument for argument in arguments if argument)
    lines += ["", f"manager = edge.to_executorch(ExecutorchBackendConfig({config}))"]
    return "\n".join(lines) + "\n"


def _memory_planning_pass(arguments: Options) -> str:
    given: dict[str, Any] = dict(arguments)
    algorithm = given.pop("memory_planning_algo", None)
    keywords = [_keywords(given)] if given else []
    if algorithm is not None:
        suite = "memory_planning.MemoryPlanningAlgorithmSuite"
        suite += f"(algo_list=[memory_planning.{identifier(str(algorithm))}])"
        keywords.append(f"memory_planning_algo={suite}")
    return f"MemoryPlanningPass({', '.join(keywords)})"


def _data_files(target: TargetConfig) -> str:
    """The program's external data (constants, backends' named data) and the ETRecord, named
    as lowerd names them beside the .pte: the target's name first (ExecuTorch's
    write_tensor_data_to_file names a file by its tag alone)."""
    lines = [
        "for tag, data in sorted((manager._tensor_data or {}).items()):",
        '    default = tag == "_default_external_constant"',
        '    suffix = ".ptd" if default else "." + tag.removesuffix(".ptd") + ".ptd"',
        "    file = TARGET + suffix",
        "    (OUT / file).write_bytes(bytes(data))",
        '    print(f"{OUT / file}: sha256 {hashlib.sha256(bytes(data)).hexdigest()}")',
    ]
    if target.etrecord:
        lines.append('manager.get_etrecord().save(str(OUT / (TARGET + ".etrecord")))')
    return "\n".join(lines) + "\n"


def _keywords(values: dict[str, Any]) -> str:
    return ", ".join(f"{identifier(key)}={literal(value)}" for key, value in values.items())
