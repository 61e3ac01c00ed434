"""The field table of [tool.lowerd] (project/config_keys.py): the configs it fills hold a field
for each key, and docs/config-keys.md is what the table makes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from lowerd.project.config import ProjectConfig, TargetConfig
from lowerd.project.config_keys import KEYS, Scope
from lowerd.project.config_reference import main, reference
from lowerd.project.team_config import RemoteCacheConfig

from helpers import TESTS

CHECKED_IN = TESTS.parent / "docs" / "config-keys.md"

# Fields that no key fills: where the config was found, what was made of its tables.
PROJECT_OWN = {"path", "root", "targets", "digest", "remote_cache"}
TARGET_OWN = {"name", "line"}
REMOTE_OWN = {"line"}


def test_the_checked_in_reference_is_what_the_table_makes() -> None:
    assert CHECKED_IN.read_text(encoding="utf-8") == reference(), (
        "docs/config-keys.md differs from the field table: "
        "run `python -m lowerd.project.config_reference`"
    )


def test_the_reference_has_a_section_for_every_key(tmp_path: Path) -> None:
    written = tmp_path / "keys.md"
    assert main([str(written)]) == 0
    text = written.read_text(encoding="utf-8")
    assert [line[4:-1] for line in text.splitlines() if line.startswith("## `")] == [
        key.name for key in KEYS
    ]


def _filled(scope: Scope, group: str | None) -> set[str]:
    return {
        key.attribute
        for key in KEYS
        if key.scope.allowed_in(scope)
        and key.attribute is not None
        and key.read is not None
        and key.group == group
    }


def test_every_key_fills_a_field_and_every_field_has_its_key() -> None:
    fields = {f.name for f in dataclasses.fields(ProjectConfig)}
    assert fields - PROJECT_OWN == _filled(Scope.PROJECT, None)
    fields = {f.name for f in dataclasses.fields(TargetConfig)}
    assert fields - TARGET_OWN == _filled(Scope.TARGET, None)
    fields = {f.name for f in dataclasses.fields(RemoteCacheConfig)}
    assert fields - REMOTE_OWN == _filled(Scope.PROJECT, "remote_cache")


def test_each_key_is_declared_once() -> None:
    names = [key.name for key in KEYS]
    assert len(set(names)) == len(names)
