"""Each partition of a lowered build as its build record keeps it (project/rebuild_record.py): the
report's backend, cache outcome and first source line, with the key its preprocess call had (a
kept .pte's: rebuild_record.kept_partitions)."""

from __future__ import annotations

from typing import Any

from lowerd.lowering.preprocess_cache import PreprocessCache
from lowerd.lowering.report import lowered_modules
from lowerd.project.rebuild_record import PartitionFacts, partition_facts
from lowerd.project.report_model import MethodReport


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
            facts.append(partition_facts(method, index, partition, partition.cache, key, note))
    return facts
