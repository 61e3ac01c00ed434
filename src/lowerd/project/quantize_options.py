"""[tool.lowerd.targets.T.quantize]: how each method is quantized before its final export, read and
checked at its lines without importing torch.

Two flows, as ExecuTorch and the LLM tools quantize:

* PT2E (`scheme = "xnnpack-int8"` or `"xnnpack-int8-dynamic"`): ExecuTorch's documented flow,
  torch.export, prepare_pt2e with XNNPACKQuantizer, calibration, convert_pt2e
  (lowering/quantize.py). `calibration` names the samples.
* torchao's source transform (`scheme = "8da4w"` or `"8da8w"`): on the eager module,
  `quantize_(module, Int8DynamicActivationIntxWeightConfig(...), filter_fn)` then
  `unwrap_tensor_subclass(module)` (lowering/torchao_quantize.py), as optimum-executorch's
  `--qlinear 8da4w` and ExecuTorch's `xnnpack_torchao_*` recipes do. Int8 activations quantized
  per token at run time, int4 or int8 weights quantized ahead of time; no calibration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lowerd.project.config_reader import KeyReader, Table, describe, did_you_mean
from lowerd.project.config_values import positive_int, reference
from lowerd.project.located import Located
from lowerd.project.toml_lines import KeyPath

# PT2E scheme -> is_dynamic of ExecuTorch's get_symmetric_quantization_config (both symmetric,
# per-channel).
PT2E_SCHEMES = {"xnnpack-int8": False, "xnnpack-int8-dynamic": True}
# torchao scheme -> the bits of Int8DynamicActivationIntxWeightConfig's weight_dtype (torch.intN)
# and the granularity it takes unless told: per group for int4 (optimum's 8da4w, ExecuTorch's
# int8da_int4w recipes), per channel for int8 (optimum's 8da8w; XNNPACK takes 4-bit groups only).
TORCHAO_SCHEMES = {"8da4w": (4, "per_group"), "8da8w": (8, "per_channel")}
QUANTIZE_SCHEMES = (*PT2E_SCHEMES, *TORCHAO_SCHEMES)
# torchao's weight_granularity: PerGroup(group_size) or PerAxis(axis=0).
GRANULARITIES = ("per_group", "per_channel")
DEFAULT_GROUP_SIZE = 32  # torchao's PerGroup(32), optimum's qlinear_group_size
# torchao's IntxChooseQParamsAlgorithm values; its default first.
QPARAMS_ALGORITHMS = ("affine", "hqq_scale_only")
# "linear": torchao's default filter, every nn.Linear; "linear_divisible": optimum's, those whose
# in_features is a multiple of the group size (per channel too: optimum filters so for 8da8w).
FILTERS = ("linear", "linear_divisible")
TORCHAO_KEYS = ("granularity", "group_size", "qparams_algorithm", "filter")
QUANTIZE_KEYS = ("scheme", "calibration", *TORCHAO_KEYS)


@dataclass(frozen=True)
class TorchaoLinears:
    """The linears a torchao scheme quantizes and how: every field resolved (defaults filled)."""

    weight_bits: int  # 4 or 8: weight_dtype=torch.int4 or torch.int8
    granularity: str  # one of GRANULARITIES
    # per_group's group size, and linear_divisible's divisor; None when neither is asked.
    group_size: int | None
    qparams_algorithm: str  # intx_choose_qparams_algorithm, one of QPARAMS_ALGORITHMS
    filter: str  # one of FILTERS

    def to_json(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"granularity": self.granularity}
        if self.group_size is not None:
            shown["group_size"] = self.group_size
        return {**shown, "qparams_algorithm": self.qparams_algorithm, "filter": self.filter}


@dataclass(frozen=True)
class QuantizeConfig:
    """[tool.lowerd.targets.T.quantize]: a PT2E scheme (with its calibration) or a torchao one
    (with its linears)."""

    scheme: str  # one of QUANTIZE_SCHEMES
    # PT2E only: "file.py:fn" or "package.module:fn" returning example-argument tuples; None: the
    # target's own example args.
    calibration: Located[str] | None
    line: int  # the table's (or its scheme key's) line
    torchao: TorchaoLinears | None = None  # the torchao schemes' (None for PT2E)

    @property
    def is_dynamic(self) -> bool:
        """PT2E's is_dynamic (False for a torchao scheme, whose activations are always so)."""
        return PT2E_SCHEMES.get(self.scheme, False)

    def calibration_parts(self) -> tuple[str, str]:
        """(file path or module name, function name) of the calibration function."""
        calibration = self.calibration.value if self.calibration else ""
        module_or_path, _, function = calibration.rpartition(":")
        return module_or_path, function

    def to_json(self) -> dict[str, Any]:
        """What the inputs digest and the result's options hold: PT2E's as it always was."""
        if self.torchao is not None:
            return {"scheme": self.scheme, **self.torchao.to_json()}
        calibration = self.calibration.value if self.calibration else None
        return {"scheme": self.scheme, "calibration": calibration}


def quantize(reader: KeyReader, value: object, key: KeyPath) -> QuantizeConfig:
    """The quantize table's reader (config_keys.py)."""
    if not isinstance(value, dict):
        raise reader.error(
            f'quantize must be a table like {{ scheme = "8da4w" }}, got {describe(value)}', key
        )
    reader.check_keys(value, QUANTIZE_KEYS, key, "quantize")
    scheme = _scheme(reader, value, key)
    line = reader.locator.header_line(key) or reader.line((*key, "scheme")) or 1
    if scheme in TORCHAO_SCHEMES:
        return QuantizeConfig(scheme, None, line, _torchao(reader, value, key, scheme))
    given = [name for name in TORCHAO_KEYS if name in value]
    if given:
        raise reader.error(
            f"{given[0]} is a key of the torchao schemes ({', '.join(TORCHAO_SCHEMES)}); "
            f"{scheme} is ExecuTorch's PT2E flow, which takes scheme and calibration",
            (*key, given[0]),
        )
    calibration = None
    if value.get("calibration") is not None:
        calibration_key = (*key, "calibration")
        calibration = Located(
            reference(reader, value["calibration"], calibration_key),
            reader.line(calibration_key) or line,
        )
    return QuantizeConfig(scheme=scheme, calibration=calibration, line=line)


def _scheme(reader: KeyReader, value: Table, key: KeyPath) -> str:
    schemes = ", ".join(QUANTIZE_SCHEMES)
    if "scheme" not in value:
        raise reader.error(f"quantize has no scheme; valid schemes: {schemes}", key)
    scheme = value["scheme"]
    if not isinstance(scheme, str):
        raise reader.error(
            f"quantize scheme must be a string, one of {schemes}; got {describe(scheme)}",
            (*key, "scheme"),
        )
    if scheme not in QUANTIZE_SCHEMES:
        hint = did_you_mean(scheme, QUANTIZE_SCHEMES)
        raise reader.error(
            f"unknown quantize scheme {scheme!r}{hint}; valid schemes: {schemes}",
            (*key, "scheme"),
        )
    return scheme


def _torchao(reader: KeyReader, value: Table, key: KeyPath, scheme: str) -> TorchaoLinears:
    """A torchao scheme's keys, each checked at its line, the defaults filled in."""
    if "calibration" in value:
        raise reader.error(
            f"calibration is for the PT2E schemes ({', '.join(PT2E_SCHEMES)}); {scheme} "
            "quantizes weights ahead of time and activations as they come: it takes none",
            (*key, "calibration"),
        )
    bits, default_granularity = TORCHAO_SCHEMES[scheme]
    granularity = _granularity(reader, value.get("granularity", default_granularity), key)
    algorithm = _name(reader, value, key, "qparams_algorithm", QPARAMS_ALGORITHMS)
    linears = _name(reader, value, key, "filter", FILTERS)
    # The group size of per_group, and the divisor of linear_divisible (optimum filters by its
    # group size whatever the granularity).
    if granularity != "per_group" and linears != "linear_divisible":
        if "group_size" in value:
            raise reader.error(
                "group_size is per_group's group size (and linear_divisible's divisor); "
                'per_channel with filter = "linear" quantizes each output channel whole',
                (*key, "group_size"),
            )
        return TorchaoLinears(bits, granularity, None, algorithm, linears)
    group_size = value.get("group_size", DEFAULT_GROUP_SIZE)
    if not positive_int(group_size):
        raise reader.error(
            f"group_size must be a positive integer, got {describe(group_size)}",
            (*key, "group_size"),
        )
    return TorchaoLinears(bits, granularity, group_size, algorithm, linears)


def _granularity(reader: KeyReader, granularity: object, key: KeyPath) -> str:
    if granularity == "per_tensor":
        raise reader.error(
            'granularity "per_tensor" is not one torchao\'s Int8DynamicActivationIntxWeightConfig '
            "takes (PerGroup or PerAxis(0)); ExecuTorch's recipe "
            "xnnpack_torchao_int8da_int4w_per_tensor is PerGroup(group_size): write "
            'granularity = "per_group"',
            (*key, "granularity"),
        )
    return _checked_name(reader, granularity, (*key, "granularity"), GRANULARITIES)


def _name(reader: KeyReader, value: Table, key: KeyPath, name: str, valid: tuple[str, ...]) -> str:
    """value[name], one of valid; the first of them when absent."""
    return _checked_name(reader, value.get(name, valid[0]), (*key, name), valid)


def _checked_name(reader: KeyReader, given: object, key: KeyPath, valid: tuple[str, ...]) -> str:
    name = str(key[-1])
    if not isinstance(given, str):
        raise reader.error(
            f"{name} must be a string, one of {', '.join(valid)}; got {describe(given)}", key
        )
    reader.check_name(name, given, valid, key)
    return given
