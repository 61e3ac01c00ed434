"""torchao's source-transform quantization ([tool.lowerd.targets.T.quantize] scheme "8da4w" or
"8da8w"), on each method's eager module before export, as LLMs are quantized.

What the stock script does (optimum-executorch's quantize_model_, ExecuTorch's SOURCE_TRANSFORM
stage), for each distinct module of the target's methods, in method order:

    config = Int8DynamicActivationIntxWeightConfig(
        weight_dtype=torch.int4,                 # int8 for 8da8w
        weight_granularity=PerGroup(32),         # or PerAxis(0)
        intx_choose_qparams_algorithm="affine",  # or "hqq_scale_only"
    )
    quantize_(module, config, filter_fn=selected)
    unwrap_tensor_subclass(module)

`selected` is torchao's default filter (every nn.Linear but nn.MultiheadAttention's
out-projection), with optimum's `in_features % group_size == 0` for `filter = "linear_divisible"`
(whatever the granularity, as optimum filters), and a linear whose weight torchao quantized
already skipped: methods that share a layer (a multi-method program's shared weights) quantize it
once. The modules are changed in place, as quantize_ changes them: a copy would double an LLM's
memory, and the entry made them for this build alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lowerd.lowering.blame import summary
from lowerd.project.errors import LoweringError
from lowerd.project.method import Method
from lowerd.project.quantize_options import QuantizeConfig, TorchaoLinears

# The stage's progress: told each method's name as its module is quantized.
OnMethod = Callable[[str], None]


def quantize_linears(
    methods: Mapping[str, Method], quantize: QuantizeConfig, config_path: str, on: OnMethod
) -> None:
    """Each distinct module of the methods quantized in place; a failure is blamed on the
    quantize table's line, naming the layer torchao was quantizing."""
    from torchao.quantization.quant_api import quantize_  # type: ignore[import-untyped]
    from torchao.utils import unwrap_tensor_subclass  # type: ignore[import-untyped]

    assert quantize.torchao is not None
    config = linear_config(quantize.torchao)
    done: set[int] = set()
    for name, method in methods.items():
        on(name)
        if id(method.module) in done:
            continue
        done.add(id(method.module))
        selected = _Selected(quantize.torchao)
        try:
            quantize_(method.module, config, filter_fn=selected)
            unwrap_tensor_subclass(method.module)
        except Exception as error:
            raise LoweringError(
                f"{quantize.scheme}: torchao's quantize_ of {name!r} failed"
                f"{selected.where()}: {summary(error)}{selected.hint()}",
                config_path,
                quantize.line,
            ) from error


def linear_config(linears: TorchaoLinears) -> Any:
    """torchao's Int8DynamicActivationIntxWeightConfig, as the stock script makes it."""
    import torch
    from torchao.quantization.granularity import (  # type: ignore[import-untyped]
        PerAxis,
        PerGroup,
    )
    from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig

    if linears.granularity == "per_group":
        granularity: Any = PerGroup(linears.group_size)
    else:
        granularity = PerAxis(0)
    return Int8DynamicActivationIntxWeightConfig(
        weight_dtype=getattr(torch, f"int{linears.weight_bits}"),
        weight_granularity=granularity,
        intx_choose_qparams_algorithm=linears.qparams_algorithm,
    )


@dataclass
class _Selected:
    """quantize_'s filter_fn; remembers the last layer it gave torchao, to name it on failure."""

    linears: TorchaoLinears
    last: tuple[str, Any] | None = None

    def __call__(self, module: Any, fqn: str) -> bool:
        import torch
        from torchao.utils import TorchAOBaseTensor

        if not isinstance(module, torch.nn.Linear):
            return False
        if isinstance(module, torch.nn.modules.linear.NonDynamicallyQuantizableLinear):
            return False  # as torchao's default filter: nn.MultiheadAttention uses it unwrapped
        if isinstance(module.weight, TorchAOBaseTensor):
            return False  # quantized already, through a method that shares it
        divisor = self.linears.group_size
        if self.linears.filter == "linear_divisible" and divisor is not None:
            if module.weight.shape[1] % divisor != 0:
                return False
        self.last = (fqn, module)
        return True

    def where(self) -> str:
        if self.last is None:
            return ""
        fqn, module = self.last
        kind = type(module).__name__
        return f" at {fqn or 'the module'} ({kind}, in_features {module.in_features})"

    def hint(self) -> str:
        group_size = self.linears.group_size
        if self.last is None or self.linears.granularity != "per_group" or group_size is None:
            return ""
        if self.last[1].in_features % group_size == 0:
            return ""
        return (
            f"\n(per_group needs in_features divisible by group_size {group_size}; "
            'filter = "linear_divisible" leaves the other linears in float)'
        )
