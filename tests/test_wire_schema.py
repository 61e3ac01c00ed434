"""docs/schema/lowerd.schema.json and the editors' test fixtures are what Python writes from the
classes (python -m lowerd.cli.wire_documents; python tests/editor_fixtures.py), and the
documents lowerd writes are valid by the schema."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import msgpack
import pytest
from editor_fixtures import NEOVIM, REPO, VSCODE, written
from wire_samples import SAMPLES

from lowerd.cli.wire_documents import SCHEMA_PATH, lowerd_schema, schema_text
from lowerd.daemon.commands import (
    BuildFinished,
    BuildStarted,
    CompareArguments,
    ReportAnswer,
    TargetNames,
)
from lowerd.project.batch import BuildDocument
from lowerd.project.build_state import STATE_VERSION, BuildRecord
from lowerd.project.compare_result import CompareResult
from lowerd.project.result import TargetResult
from lowerd.project.wire import WIRE_FORMS, encode

from helpers import TESTS


def test_the_schema_is_the_classes() -> None:
    assert (REPO / SCHEMA_PATH).read_text() == schema_text(), (
        "run: python -m lowerd.cli.wire_documents"
    )


def test_the_editors_fixtures_are_what_python_writes() -> None:
    for path, text in written().items():
        assert path.read_text() == text, f"{path}: run python tests/editor_fixtures.py"


def validator(root: type) -> Any:
    """The schema's definition of `root` (or of its wire form) alone."""
    schema = lowerd_schema()
    del schema["anyOf"]
    schema["$ref"] = f"#/$defs/{WIRE_FORMS.get(root, root).__name__}"
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def problems(root: type, document: Any) -> list[str]:
    return [error.message for error in validator(root).iter_errors(document)]


@pytest.mark.parametrize(
    ("root", "path"),
    [
        (BuildDocument, VSCODE / "report.json"),
        (BuildDocument, VSCODE / "llama-report.json"),
        (CompareResult, VSCODE / "compare.json"),
        (ReportAnswer, NEOVIM / "report.json"),
        (CompareResult, NEOVIM / "compare.json"),
    ],
)
def test_each_fixture_is_valid(root: type, path: Any) -> None:
    assert problems(root, json.loads(written()[path])) == []


def test_each_shape_and_record_is_valid() -> None:
    for name, (cls, make) in SAMPLES.items():
        assert problems(cls, json.loads(json.dumps(encode(make())))) == [], name
    record = msgpack.unpackb((TESTS / "golden/build-record-v1.msgpack").read_bytes(), raw=False)
    assert problems(BuildRecord, {**record, "version": STATE_VERSION}) == []
    finished = BuildFinished.of("net", None, TargetResult.failed("n", "cancelled", "x"), False)
    assert problems(BuildFinished, encode(finished)) == []
    assert problems(BuildStarted, encode(BuildStarted("net", 3))) == []


def test_command_arguments_are_lists() -> None:
    assert problems(TargetNames, ["a", "b"]) == [] and problems(TargetNames, []) == []
    assert problems(TargetNames, [1]) != []
    assert problems(CompareArguments, ["net", ["xnnpack"]]) == []
    assert problems(CompareArguments, []) != [] and problems(CompareArguments, ["a", [], 3]) != []


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ({"name": "net"}, "'status' is a required property"),
        ({"name": "net", "status": "fine"}, "'fine' is not one of ['ok', 'error']"),
        ({"name": "net", "status": "ok", "colour": "red"}, "('colour' was unexpected)"),
        ({"name": "net", "status": "ok", "seconds": "1"}, "'1' is not of type 'number'"),
    ],
)
def test_the_schema_refuses_what_decode_refuses(document: dict[str, Any], problem: str) -> None:
    assert any(problem in found for found in problems(TargetResult, document))
