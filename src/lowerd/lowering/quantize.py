"""Declared quantization ([tool.lowerd.targets.T.quantize]) by a PT2E scheme: ExecuTorch's
documented flow (the torchao schemes are torchao_quantize.py's).

For each method, what the stock script does:

    graph = torch.export.export(module, args, kwargs, dynamic_shapes=..., strict=...).module()
    quantizer = XNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=True, is_dynamic=...)
    )
    prepared = prepare_pt2e(graph, quantizer)
    for sample in calibration:  # the calibration function's, else the example inputs
        prepared(*sample)  # a tuple of positional inputs; a dict: prepared(**sample)
    module = convert_pt2e(prepared)

and the build then exports `module` with the method's inputs as it exports any method (the export
before quantization is called as the target's [..export] table says, strict and no_grad, without
its module passes). The calibration function returns a list of samples (every method calibrates
with it) or a dict of them by method name (a method it does not name calibrates with its example
inputs); a sample is a tuple of positional inputs or a dict of keyword inputs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from lowerd.lowering.blame import Blame
from lowerd.lowering.entry import find_function
from lowerd.lowering.export_call import export_method
from lowerd.project.config import ProjectConfig, TargetConfig
from lowerd.project.errors import EntryError, LoweringError
from lowerd.project.export_options import ExportConfig
from lowerd.project.located import Located
from lowerd.project.method import Method
from lowerd.project.quantize_options import QuantizeConfig
from lowerd.project.source_map import UserFiles

# Each a tuple of positional inputs or a dict of keyword inputs.
Samples = list[tuple[Any, ...] | dict[str, Any]]


def calibration_samples(
    config: ProjectConfig,
    target: TargetConfig,
    calibration: Located[str] | None,
    methods: list[str],
    role: str = "calibration",
) -> dict[str, Samples]:
    """Each method's calibration tuples, from the calibration function (called once) if any;
    `role` names the key that gave it in errors (verify_inputs reads the same way)."""
    if calibration is None:
        return {}
    found = find_function(config, target, calibration, role)
    file, line = found.file, found.line
    try:
        returned = found.function()
    except Exception as error:
        source = UserFiles(config.root).innermost_in_exception(error)
        if source is not None:
            file, line = source.file, source.line
        raise EntryError(
            f"{role} {calibration.value} raised: {type(error).__name__}: {error}",
            file,
            line,
        ) from error
    what = f"{role} {calibration.value}"
    if isinstance(returned, dict):
        unknown = [name for name in returned if name not in methods]
        if unknown:
            raise EntryError(
                f"{what} returned samples for {unknown[0]!r}, which is not a method of target "
                f"{target.name!r} (methods: {', '.join(methods)})",
                file,
                line,
            )
        return {
            name: _samples(value, f"{what} for {name!r}", file, line)
            for name, value in returned.items()
        }
    samples = _samples(returned, what, file, line)
    return {name: samples for name in methods}


def _samples(value: Any, what: str, file: str | None, line: int | None) -> Samples:
    expected = "a list of example-argument tuples (or keyword dicts), like [(x1,), (x2,)]"
    if not isinstance(value, list | tuple) or not value:
        raise EntryError(f"{what} returned {_describe(value)}; expected {expected}", file, line)
    for i, sample in enumerate(value):
        if not isinstance(sample, tuple | dict):
            raise EntryError(
                f"{what}: sample {i} is {_describe(sample)}, not a tuple of arguments or a dict "
                "of keyword arguments (write (x,) for a single input)",
                file,
                line,
            )
    return list(value)


def quantize_method(
    method: Method,
    quantize: QuantizeConfig,
    samples: Samples | None,
    blame: Blame,
    settings: ExportConfig,
) -> Method:
    """The method with its module quantized by the PT2E flow; the inputs and shapes as given."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import (  # type: ignore[import-untyped]
        convert_pt2e,
        prepare_pt2e,
    )

    doing = "torch.export before quantization failed"
    graph = export_method(method, settings, blame, doing).module()
    try:
        quantizer = XNNPACKQuantizer().set_global(
            get_symmetric_quantization_config(is_per_channel=True, is_dynamic=quantize.is_dynamic)
        )
        prepared = prepare_pt2e(graph, quantizer)
    except Exception as error:
        raise blame(LoweringError, error, f"{quantize.scheme}: prepare_pt2e failed") from error
    calls = [_inputs(s) for s in samples] if samples is not None else [_inputs(method)]
    for i, (args, kwargs) in enumerate(calls):
        try:
            prepared(*args, **kwargs)
        except Exception as error:
            raise blame(
                LoweringError, error, f"{quantize.scheme}: calibration sample {i} failed"
            ) from error
    try:
        converted = convert_pt2e(prepared)
    except Exception as error:
        raise blame(LoweringError, error, f"{quantize.scheme}: convert_pt2e failed") from error
    return replace(method, module=converted)


def _inputs(sample: tuple[Any, ...] | dict[str, Any] | Method) -> tuple[Any, dict[str, Any]]:
    """(positional, keyword) inputs of a calibration sample, or of the method's examples."""
    if isinstance(sample, Method):
        return sample.args, dict(sample.kwargs)
    if isinstance(sample, dict):
        return (), sample
    return sample, {}


def _describe(value: Any) -> str:
    if isinstance(value, tuple):
        return f"a tuple of {len(value)}"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    return f"a {type(value).__name__}"
