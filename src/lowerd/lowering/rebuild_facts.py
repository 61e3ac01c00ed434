"""Each partition of a build as its build record keeps it (project/rebuild_record.py): the
report's backend, cache outcome and first source line, with the key its preprocess call had."""

from __future__ import annotations

from typing import Any

from lowerd.lowering.preprocess_cache import PreprocessCache
from lowerd.lowering.report import lowered_modules
from lowerd.project.key_summary import KeySummary
from lowerd.project.rebuild_record import PartitionFacts
from lowerd.project.report_model import MethodReport, PartitionSummary


def lowered_partitions(
    edge: Any, reports: dict[str, MethodReport], preprocess: PreprocessCache
) -> list[PartitionFacts]:
    """The partitions of a lowered program, each with its preprocess call's key."""
    facts = []
    for method, report in reports.items():
        delegates = lowered_modules(edge.exported_program(method).graph_module)
        for index, (partition, lowered) in enumerate(
            zip(report.partitions, delegates, strict=False), start=1
        ):
            record = preprocess.outcome_of_blob(lowered.processed_bytes)
            key = record.key_summary if record else None
            note = record.note if record else None
            facts.append(_facts(method, index, partition, partition.cache, key, note))
    return facts


def kept_partitions(
    reports: dict[str, MethodReport], earlier: list[PartitionFacts]
) -> list[PartitionFacts]:
    """The partitions of a kept .pte: the earlier build's keys (the blobs are its), at the lines
    where the code is now."""
    keys = {(p.method, p.index): p.key for p in earlier}
    return [
        _facts(method, index, partition, "kept", keys.get((method, index)), None)
        for method, report in reports.items()
        for index, partition in enumerate(report.partitions, start=1)
    ]


def _facts(
    method: str,
    index: int,
    partition: PartitionSummary,
    cache: str | None,
    key: KeySummary | None,
    note: str | None,
) -> PartitionFacts:
    site = partition.sources[0][:2] if partition.sources else None
    return PartitionFacts(method, index, partition.backend, cache, site, key, note)
