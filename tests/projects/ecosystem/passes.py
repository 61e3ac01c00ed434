"""The module passes optimum-executorch runs between its two exports."""

from executorch.extension.llm.export.export_passes import RemoveRedundantTransposes


def module_passes() -> list[RemoveRedundantTransposes]:
    return [RemoveRedundantTransposes()]
