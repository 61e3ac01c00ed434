"""[<table>.export]: how each method is given to torch.export.export (strict, no_grad,
module_passes), its check (the reader the field table, config_keys.py, names) and how a target's
keys are laid over the project's. The engine's side is lowering/export_call.py."""

from __future__ import annotations

from dataclasses import dataclass, replace

from lowerd.project.config_reader import KeyReader, describe
from lowerd.project.config_values import flag, reference
from lowerd.project.located import Located
from lowerd.project.toml_lines import KeyPath

EXPORT_KEYS = ("strict", "no_grad", "module_passes")


@dataclass(frozen=True)
class ExportConfig:
    """[<table>.export]: how each method is given to torch.export.export."""

    strict: bool = False  # torch.export.export(..., strict=True): TorchDynamo traces the module
    no_grad: bool = False  # exported under torch.no_grad(); lowered with the process's grad mode
    # "file.py:fn" returning callables applied in order to the exported program's module
    # (ep.module()), which is then exported again as the method was (optimum-executorch's
    # RemoveRedundantTransposes); None: exported once.
    module_passes: Located[str] | None = None
    given: frozenset[str] = frozenset()  # the keys its table wrote: laid over the project's

    def to_json(self) -> dict[str, object]:
        """What differs from torch.export's defaults: {} for a plain export."""
        shown: dict[str, object] = {
            "strict": self.strict,
            "no_grad": self.no_grad,
            "module_passes": self.module_passes.value if self.module_passes else None,
        }
        return {name: value for name, value in shown.items() if value}


def export_settings(reader: KeyReader, value: object, key: KeyPath) -> ExportConfig:
    """[<table>.export]: strict and no_grad (true or false), module_passes (a reference)."""
    if not isinstance(value, dict):
        raise reader.error(
            f"export must be a table like {{ strict = true }}, got {describe(value)}", key
        )
    reader.check_keys(value, EXPORT_KEYS, key, "export")
    passes = None
    if "module_passes" in value:
        passes_key = (*key, "module_passes")
        passes = Located(
            reference(reader, value["module_passes"], passes_key), reader.line(passes_key) or 1
        )
    return ExportConfig(
        strict="strict" in value and flag(reader, value["strict"], (*key, "strict")),
        no_grad="no_grad" in value and flag(reader, value["no_grad"], (*key, "no_grad")),
        module_passes=passes,
        given=frozenset(value),
    )


def lay_export(default: ExportConfig, given: ExportConfig | None) -> ExportConfig:
    """A target's export keys laid over the project's, key by key."""
    if given is None:
        return default
    laid = {name: getattr(given, name) for name in given.given}
    return replace(default, **laid, given=default.given | given.given)
