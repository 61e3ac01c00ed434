"""docs/schema/lowerd.schema.json and the editors' test fixtures are what Python writes from the
classes (python -m lowerd.cli.wire_documents; python tests/editor_fixtures.py), and the
documents lowerd writes are valid by the schema."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import msgpack
import pytest
from editor_fixtures import NEOVIM, RECORD_FORMAT, REPO, VSCODE, record_definitions, written
from wire_samples import MESSAGES, SAMPLES

from lowerd.cli.wire_documents import SCHEMA_PATH, lowerd_schema, schema_text
from lowerd.daemon.commands import (
    BuildFinished,
    BuildStarted,
    BuildWritten,
    CompareArguments,
    ReportAnswer,
    TargetNames,
)
from lowerd.daemon.rpc_messages import REPLIES, REQUESTS
from lowerd.project.batch import BuildDocument
from lowerd.project.build_state import STATE_VERSION, BuildRecord
from lowerd.project.compare_result import CompareResult
from lowerd.project.result import TargetResult
from lowerd.project.wire import WIRE_FORMS, encode
from lowerd.worker.protocol import EVENTS, FORK_SERVER_MESSAGES, PreloadRequest, WorkerJob

from helpers import TESTS


def test_the_schema_is_the_classes() -> None:
    assert (REPO / SCHEMA_PATH).read_text() == schema_text(), (
        "run: python -m lowerd.cli.wire_documents"
    )


def test_the_editors_fixtures_are_what_python_writes() -> None:
    for path, text in written().items():
        assert path.read_text() == text, f"{path}: run python tests/editor_fixtures.py"


def validator(*roots: type) -> Any:
    """The schema's definitions of `roots` (or of their wire forms) alone: any of them."""
    schema = lowerd_schema()
    schema["anyOf"] = [{"$ref": f"#/$defs/{WIRE_FORMS.get(r, r).__name__}"} for r in roots]
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def problems(root: type, document: Any) -> list[str]:
    errors = validator(root).iter_errors(document)
    return [inner.message for error in errors for inner in error.context or [error]]


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
    assert problems(BuildWritten, encode(BuildWritten("net", 3, "ab" * 32))) == []


def test_each_message_between_processes_is_valid() -> None:
    requests, replies = validator(*REQUESTS), validator(*REPLIES)
    by_kind = {
        "rpc.": requests,
        "reply.": replies,
        "event.": validator(*EVENTS),
        "fork.": validator(*FORK_SERVER_MESSAGES, PreloadRequest),
        "worker_job": validator(WorkerJob, PreloadRequest),
    }
    for name, make in MESSAGES.items():
        for kind, valid in by_kind.items():
            if name.startswith(kind):
                assert valid.is_valid(json.loads(json.dumps(encode(make())))), name
    assert not requests.is_valid({"op": "build"}) and not requests.is_valid({"op": "rebuild"})
    assert not replies.is_valid({"type": "final", "document": None, "outcome": "fine"})


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


# The build record's format ----------------------------------------------------------------------


def test_a_record_of_this_version_is_still_read_as_it_was_written() -> None:
    """Since STATE_VERSION was last set, a build record's classes may only gain fields with a
    default (an older record reads with it). Any other change (a field renamed, removed, of
    another type, or required) would misread the records on disk: bump STATE_VERSION, teach
    build_state.read_record the previous version (migrated or None), and run
    tests/editor_fixtures.py, which records the new version's format."""
    recorded = json.loads(RECORD_FORMAT.read_text())
    now = record_definitions(lowerd_schema())
    for name, was in recorded.items():
        assert name in now, f"{name}: gone from the build record"
        for key, schema in was["properties"].items():
            assert now[name]["properties"].get(key) == schema, f"{name}.{key} changed"
        assert set(now[name]["required"]) <= set(was["required"]), f"{name}: a field now required"
