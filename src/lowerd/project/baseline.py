"""`lowerd check`'s baseline: each target's facts when they were last accepted, in a committed,
diff-friendly file beside pyproject.toml (lowerd.baseline.toml), and what moved the wrong way.

A fact is a number a build gives (the TargetResult): the coverage, the partitions, the .pte's
size, the planned memory; and with a verification (`verify`), each method's largest error
against eager and its median latency on this host. Each fact has a better direction and a band:
a value past the baseline by more than the band is a regression. No torch here: the CLI and the
daemon (the editor's warning at the target's entry) read the same file and the same rule.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lowerd.project.config_reader import KeyReader, describe, did_you_mean, key_name, read_toml
from lowerd.project.result import TargetResult
from lowerd.project.toml_lines import KeyPath

BASELINE_FILE = "lowerd.baseline.toml"

Better = Literal["higher", "lower"]


@dataclass(frozen=True)
class Fact:
    """A kind of fact: which way is better, and how far the worse way is still no regression
    (`relative` of the baseline plus `slack`): a byte count moves with a library's version, a
    host's latency with its load."""

    better: Better
    relative: float = 0.0
    slack: float = 0.0
    what: str = ""

    def allows(self, baseline: float) -> float:
        """The worst value still accepted against `baseline`."""
        margin = abs(baseline) * self.relative + self.slack
        return baseline - margin if self.better == "higher" else baseline + margin


# Per target, then per method (`<method>.<fact>`), in the file's order.
TARGET_FACTS: dict[str, Fact] = {
    "coverage_percent": Fact("higher", what="ops delegated, %"),
    "partitions": Fact("lower", what="delegate partitions"),
    "pte_bytes": Fact("lower", relative=0.01, what=".pte size, bytes (1 % band)"),
    "planned_memory_bytes": Fact("lower", relative=0.01, what="planned memory, bytes (1 % band)"),
}
METHOD_FACTS: dict[str, Fact] = {
    "verified": Fact("higher", what="the verification passed (1) or not (0)"),
    "max_abs_error": Fact("lower", relative=1.0, slack=1e-6, what="max error vs eager (2×)"),
    "latency_ms": Fact("lower", relative=0.5, slack=0.05, what="host median latency (1.5×)"),
}

Facts = dict[str, float]  # fact name ("pte_bytes", "forward.latency_ms") -> value


def facts_of(result: TargetResult) -> Facts:
    """The facts a built target gives, those it measured only."""
    facts: Facts = {"coverage_percent": result.coverage.percent}
    facts["partitions"] = sum(len(report.partitions) for report in result.methods.values())
    if result.sizes is not None:
        facts["pte_bytes"] = result.sizes.pte_bytes
    planned = [report.planned_memory_bytes for report in result.methods.values()]
    if planned and all(bytes_ is not None for bytes_ in planned):
        facts["planned_memory_bytes"] = sum(bytes_ or 0 for bytes_ in planned)
    verification = result.verification
    for name, method in (verification.methods if verification else {}).items():
        facts[f"{name}.verified"] = 1 if method.verdict == "pass" else 0
        if method.inputs:
            facts[f"{name}.max_abs_error"] = method.max_abs
        if method.latency is not None:
            facts[f"{name}.latency_ms"] = method.latency.median_ms
    return facts


def fact_kind(name: str) -> Fact | None:
    """The kind of a fact by its name in the file: a target's, or a method's after its dot."""
    return TARGET_FACTS.get(name) or METHOD_FACTS.get(name.rpartition(".")[2])


@dataclass(frozen=True)
class Change:
    """A fact of a target that moved: the wrong way past its band (a regression), or the better
    way (shown, so that --update locks it in); a fact only one side has (`None` on the other)."""

    target: str
    fact: str
    baseline: float | None
    now: float | None
    regression: bool


@dataclass(frozen=True)
class CheckDocument:
    """`lowerd check --json`: what moved against the baseline file, regressions first; the
    targets that failed to build or would not load on their runtime ("NAME: why"); how many
    targets were compared; `passed` when nothing regressed and none is broken (exit 0)."""

    baseline: str
    targets: int
    changes: tuple[Change, ...]
    broken: tuple[str, ...]
    passed: bool

    @classmethod
    def of(
        cls, path: Path, targets: int, changes: Sequence[Change], broken: Sequence[str]
    ) -> CheckDocument:
        ordered = tuple(sorted(changes, key=lambda change: not change.regression))
        passed = not broken and not any(change.regression for change in changes)
        return cls(str(path), targets, ordered, tuple(broken), passed)


def compare(baseline: Mapping[str, Facts], now: Mapping[str, Facts]) -> list[Change]:
    """Every change of the targets built `now` against the baseline, in the baseline's order of
    facts; a target the baseline lacks is all new (no regression)."""
    changes = []
    for target, facts in now.items():
        before = baseline.get(target, {})
        for name in [*before, *(name for name in facts if name not in before)]:
            change = _change(target, name, before.get(name), facts.get(name))
            if change is not None:
                changes.append(change)
    return changes


def _change(target: str, name: str, before: float | None, now: float | None) -> Change | None:
    if before is None or now is None:
        return Change(target, name, before, now, regression=False)
    kind = fact_kind(name)
    if kind is None or before == now:
        return None
    limit = kind.allows(before)
    worse = now < limit if kind.better == "higher" else now > limit
    better = now > before if kind.better == "higher" else now < before
    return Change(target, name, before, now, regression=worse) if worse or better else None


def shown_fact(value: float | None) -> str:
    """A fact as the table and the editor show it: an integer as one, "-" when not measured."""
    if value is None:
        return "-"
    return str(int(value)) if float(value).is_integer() else f"{value:.4g}"


# The file ------------------------------------------------------------------------------------


def baseline_path(config_path: Path) -> Path:
    return config_path.parent / BASELINE_FILE


def read_baseline(path: Path) -> dict[str, Facts]:
    """The baseline's facts by target, read as the config is (config_reader.py): a file that is
    no TOML, a key it does not know, a value of the wrong shape (`targets = 5`, a table where a
    number belongs) or a fact no build gives (`nan`, `inf`, a negative count, an integer past a
    float's range) is a ConfigError at its line. Each of them, read as a number, would make a
    gate pass for ever (NaN compares false) or fail for ever."""
    text, data = read_toml(path)  # a regular file under a cap: the daemon reads it too
    reader = KeyReader(path, text)
    reader.check_keys(data, ["targets"], (), path.name)
    targets = data.get("targets", {})
    if not isinstance(targets, dict):
        message = f"targets must be a table of [targets.NAME] tables, got {describe(targets)}"
        raise reader.error(message, ("targets",))
    return {name: _facts(reader, facts, ("targets", name)) for name, facts in targets.items()}


def _facts(reader: KeyReader, table: object, key: KeyPath) -> Facts:
    if not isinstance(table, dict):
        message = f"[targets.{_key(key_name(key))}] must be a table of facts, got {describe(table)}"
        raise reader.error(message, key)
    return {name: _fact(reader, value, (*key, name)) for name, value in table.items()}


# What `forward.latency_ms = 1.2` (a dotted key: a table) is told.
_DOTTED_FACT = ' (a method\'s fact is one quoted key: "METHOD.FACT" = ...)'


def _fact(reader: KeyReader, value: object, key: KeyPath) -> float:
    name = key_name(key)
    number = _finite(value)
    if number is None or number < 0:
        dotted = _DOTTED_FACT if isinstance(value, dict) else ""
        message = f"{name} must be a finite number >= 0, got {describe(value)}{dotted}"
        raise reader.error(message, key)
    if fact_kind(name) is None:
        hint = did_you_mean(name, [*TARGET_FACTS, *METHOD_FACTS])
        methods = ", ".join(f'"METHOD.{fact}"' for fact in METHOD_FACTS)
        raise reader.error(
            f"unknown fact {name!r}{hint}; facts: {', '.join(TARGET_FACTS)}, {methods}", key
        )
    return number


def _finite(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer past a float's range
        return None
    return number if math.isfinite(number) else None


def baseline_text(facts: Mapping[str, Facts]) -> str:
    """The file: targets sorted by name, each fact in TARGET_FACTS' order then its methods'
    sorted, one per line, integers written as integers: one fact that moves is one line."""
    lines = [
        "# lowerd check's baseline: each target's facts when last accepted.",
        "# Written by `lowerd check --update`; commit it. docs/runtime.md says what each means.",
    ]
    for target in sorted(facts):
        lines += ["", f"[targets.{_key(target)}]"]
        lines += [f"{_key(name)} = {_value(value)}" for name, value in _ordered(facts[target])]
    return "\n".join(lines) + "\n"


def _ordered(facts: Facts) -> list[tuple[str, float]]:
    """The target's facts in TARGET_FACTS' order, then its methods' by name."""
    first = [name for name in TARGET_FACTS if name in facts]
    rest = sorted(name for name in facts if name not in TARGET_FACTS)
    return [(name, facts[name]) for name in [*first, *rest]]


def _key(name: str) -> str:
    bare = name.replace("_", "").replace("-", "").isalnum() and name.isascii()
    return name if bare else json.dumps(name)


def _value(value: float) -> str:
    """An integer as one; else Python's shortest repr (a fact is finite: read_baseline refuses
    any other)."""
    if math.isfinite(value) and float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))
