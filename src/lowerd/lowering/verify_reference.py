"""What a verified .pte must reproduce: each method's input tuples and the eager outputs on them.

Computed once the entry is loaded and before any quantization, on a copy of each module: a
quantized target is held to its float model, and neither the eager calls nor torchao's in-place
quantize_ touch what the other sees (a module with a KV cache keeps the state export reads). The
inputs are the entry's example inputs, then the tuples `verify_inputs` gives each method.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lowerd.lowering.quantize import calibration_samples
from lowerd.lowering.stages import BuildContext, Loaded
from lowerd.project.errors import EntryError
from lowerd.project.method import Method


@dataclass(frozen=True)
class Case:
    """One input tuple of a method: its label, its inputs flat as the runtime takes them, and
    the eager module's outputs on it (its tensors, flat)."""

    label: str
    inputs: tuple[Any, ...]
    expected: tuple[Any, ...]


@dataclass(frozen=True)
class Reference:
    """Each method's cases, and whether the program is a quantized one's (held to its float
    model under the quantized tolerance)."""

    cases: Mapping[str, tuple[Case, ...]]
    quantized: bool
    # Each method's ExportedProgram, once exported: the eager ops a diverging op is found among.
    programs: Mapping[str, Any] = field(default_factory=dict)
    # A quantized target's float methods, untouched: exported when a divergence is looked for,
    # their ops are the float model's (what the quantized program is held to).
    floats: Mapping[str, Method] = field(default_factory=dict)

    def digest(self) -> str:
        """The inputs and eager outputs, by their bytes: part of the verification's memo key."""
        digest = hashlib.sha256()
        for name, cases in self.cases.items():
            digest.update(name.encode())
            for case in cases:
                digest.update(case.label.encode())
                for value in (*case.inputs, b"->", *case.expected):
                    digest.update(_bytes_of(value))
        return digest.hexdigest()


def eager_reference(ctx: BuildContext, loaded: Loaded) -> Reference | None:
    """The reference of a target that verifies or is bundled (its test cases are these); None
    for one that does neither."""
    target = ctx.target
    if not (target.verify or target.bundled):
        return None
    samples = calibration_samples(
        ctx.config, target, target.verify_inputs, list(loaded.methods), role="verify_inputs"
    )
    cases = {
        name: _cases(ctx, name, method, samples.get(name, []))
        for name, method in loaded.methods.items()
    }
    quantized = target.quantize is not None or target.recipe is not None and _quantizing(ctx)
    floats = {name: _copy(method) for name, method in loaded.methods.items()} if quantized else {}
    return Reference(cases, quantized, floats=floats)


def _copy(method: Method) -> Method:
    return Method(
        copy.deepcopy(method.module),
        method.args,
        method.kwargs,
        dynamic_shapes=method.dynamic_shapes,
    )


def float_program(method: Method) -> Any:
    """The float method exported as torch.export does by default: the eager ops to compare a
    quantized program's with."""
    import torch

    return torch.export.export(
        method.module, tuple(method.args), dict(method.kwargs), dynamic_shapes=method.dynamic_shapes
    )


def _cases(ctx: BuildContext, name: str, method: Method, samples: list[Any]) -> tuple[Case, ...]:
    import torch

    module = copy.deepcopy(method.module)
    asked = [("example", method.args, dict(method.kwargs))]
    for i, sample in enumerate(samples):
        args, kwargs = (sample, {}) if isinstance(sample, tuple) else ((), sample)
        asked.append((f"verify_inputs[{i}]", args, kwargs))
    cases = []
    for label, args, kwargs in asked:
        try:
            with torch.no_grad():
                outputs = module(*args, **kwargs)
        except Exception as error:
            where = ctx.target.verify_inputs
            raise EntryError(
                f"method {name!r} on {label} raised: {type(error).__name__}: {error}",
                str(ctx.config.path) if where else None,
                where.line if where else None,
            ) from error
        cases.append(Case(label, _flat((args, kwargs)), _tensors(outputs)))
    return tuple(cases)


def _flat(value: Any) -> tuple[Any, ...]:
    from torch.utils._pytree import tree_leaves

    return tuple(tree_leaves(value))


def _tensors(value: Any) -> tuple[Any, ...]:
    import torch

    return tuple(leaf.detach().clone() for leaf in _flat(value) if isinstance(leaf, torch.Tensor))


def _bytes_of(value: Any) -> bytes:
    import torch

    if isinstance(value, bytes):
        return value
    if isinstance(value, torch.Tensor):
        tensor = value.detach().contiguous().cpu()
        head = f"{tensor.dtype}{tuple(tensor.shape)}".encode()
        return head + tensor.reshape(-1).view(torch.uint8).numpy().tobytes()
    return repr(value).encode()


def _quantizing(ctx: BuildContext) -> bool:
    """A recipe target quantizes when its recipe has a quantization recipe."""
    recipe = ctx.recipe
    return recipe is not None and getattr(recipe, "quantization_recipe", None) is not None
