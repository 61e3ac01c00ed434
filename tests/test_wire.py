"""project/wire.py, the one converter of every wire shape: it writes exactly the bytes the
hand-written to_json/to_frame methods wrote (tests/golden/wire.json, recorded from them), reads
back what it writes, refuses a document of another shape naming the field; and the build record
(project/build_state.py) is versioned: the previous version's record reads, another is rebuilt."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgpack
import pytest
from wire_samples import MESSAGES, SAMPLES, target_state

from lowerd.project.build_state import STATE_VERSION, read_record
from lowerd.project.compare_result import CompareResult
from lowerd.project.edge_generation import EdgeGeneration
from lowerd.project.result import TargetResult
from lowerd.project.wire import WireError, decode, encode
from lowerd.worker.protocol import WorkerJob

from helpers import TESTS

GOLDEN = TESTS / "golden"
RECORDED = json.loads((GOLDEN / "wire.json").read_text())
V1_RECORD = (GOLDEN / "build-record-v1.msgpack").read_bytes()


def text(document: Any) -> str:
    """The JSON text, key order and int/float kept: equal texts are equal bytes on every wire
    (msgpack packs the same dicts, lists and scalars in the same order)."""
    return json.dumps(document)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_each_shape_writes_what_the_hand_written_method_wrote(name: str) -> None:
    cls, make = SAMPLES[name]
    assert text(encode(make())) == text(RECORDED[name])
    assert msgpack.packb(encode(make())) == msgpack.packb(RECORDED[name])
    # and reads back what it writes
    assert text(encode(decode(cls, RECORDED[name]))) == text(RECORDED[name])


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_each_message_writes_the_frame_it_wrote(name: str) -> None:
    assert text(encode(MESSAGES[name]())) == text(RECORDED[name])


def test_a_job_without_backends_or_folder_is_one_with_none() -> None:
    """As the hand-written to_frame wrote an empty backends or out_dir: null."""
    bare = WorkerJob("/p/pyproject.toml", "net", backends=(), out_dir="")
    assert bare == WorkerJob("/p/pyproject.toml", "net")
    assert (encode(bare)["backends"], encode(bare)["out_dir"]) == (None, None)


def test_a_value_reads_back_equal() -> None:
    for name, (cls, make) in SAMPLES.items():
        value = make()
        if getattr(value, "seconds", 0) in (0, 0.0) and not isinstance(value, CompareResult):
            assert decode(cls, json.loads(text(encode(value)))) == value, name


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda d: d.pop("name"), "name: missing"),
        (lambda d: d.update(shape="round"), "shape: unknown field"),
        (lambda d: d.update(seconds="1.5"), "seconds: expected float, got str '1.5'"),
        (lambda d: d["cache"].update(hits=True), "cache.hits: expected int, got bool True"),
        (
            lambda d: d["methods"]["forward"]["partitions"][0].update(ops="5"),
            "methods['forward'].partitions[0].ops: expected int, got str '5'",
        ),
        (lambda d: d.update(status="fine"), "status: "),
        (lambda d: d.update(data_files={}), "data_files: "),
        (lambda d: d.update(entry=[1]), "entry: expected a map, got list [1]"),
    ],
)
def test_a_document_of_another_shape_is_refused_naming_the_field(change: Any, problem: str) -> None:
    document = json.loads(text(RECORDED["target_result.built"]))
    change(document)
    with pytest.raises(WireError) as refused:
        decode(TargetResult, document)
    assert any(found.startswith(problem) for found in refused.value.problems), refused.value


def test_computed_fields_are_written_never_read() -> None:
    document = json.loads(text(RECORDED["target_result.built"]))
    document["coverage"] = {"percent": 1, "backends": ["nowhere"]}
    forward = document["methods"]["forward"]
    forward["summary"] = "made up"
    del forward["fixes_hint"]
    again = encode(decode(TargetResult, document))
    assert again["coverage"] == RECORDED["target_result.built"]["coverage"]
    assert again["methods"]["forward"]["summary"] == RECORDED["method_report"]["summary"]


def test_a_method_s_edge_generation_reads_back_and_an_older_report_reads_without_it() -> None:
    """The recorded method report (written before the field) reads with no path; a written path
    reads back; a path or count of another kind is refused, naming the field (records are
    untrusted input)."""
    recorded = json.loads(text(RECORDED["target_result.built"]))
    assert "edge_generation" not in recorded["methods"]["forward"]
    assert decode(TargetResult, recorded).methods["forward"].edge_generation is None
    kept = EdgeGeneration.regional(6, 4, reused=3)
    assert kept.words == "regional (6 regions from 4 templates, 3 read from the cache)"
    assert encode(EdgeGeneration.regional(6, 4)) == encode(EdgeGeneration("regional", 6, 4))
    for generation in (
        EdgeGeneration.regional(6, 4),
        EdgeGeneration.stock("2 methods", 3, 1),
        kept,
    ):
        document = json.loads(text(recorded))
        document["methods"]["forward"]["edge_generation"] = encode(generation)
        assert decode(TargetResult, document).methods["forward"].edge_generation == generation
    where = "methods['forward'].edge_generation"
    for wrong, problem in (
        ({"path": "by region"}, f"{where}.path: "),
        ({"path": "regional", "regions": -1}, f"{where}.regions: expected a count >= 0"),
        ({"path": "stock", "reason": 7}, f"{where}.reason: expected str"),
        ({"path": "regional", "reused": -2}, f"{where}.reused: expected a count >= 0"),
    ):
        document = json.loads(text(recorded))
        document["methods"]["forward"]["edge_generation"] = wrong
        with pytest.raises(WireError) as refused:
            decode(TargetResult, document)
        assert any(found.startswith(problem) for found in refused.value.problems), refused.value


# The build record -------------------------------------------------------------------------------


def test_a_record_is_written_as_the_previous_version_wrote_it_but_for_its_version() -> None:
    old = msgpack.unpackb(V1_RECORD, raw=False)
    assert old["version"] == 1 and STATE_VERSION == 2
    state = read_record(old)
    assert state is not None
    written = encode(state)
    # fields added since v1 are written with their defaults; the rest is what v1 wrote
    assert written["report"]["cache"]["remote_counts"].pop("rejected") == 0
    assert written["report"].pop("verdict") == "ok"  # computed, never read back
    assert written.pop("module_digests") == {}
    assert written.pop("source_tokens") == {} and written.pop("libraries") is None
    assert msgpack.packb({"version": STATE_VERSION, "state": written}, use_bin_type=True) == (
        msgpack.packb({**old, "version": STATE_VERSION}, use_bin_type=True)
    )


def test_a_record_of_the_previous_version_is_read() -> None:
    state = read_record(msgpack.unpackb(V1_RECORD, raw=False))
    expected = target_state()
    assert state is not None and state.report.seconds == 1.235  # as written, rounded
    state.report.seconds = expected.report.seconds
    # a v1 record never said whose entries its build took (no signed entries then)
    assert state.report.cache.remote_trust is None
    assert state == replace(
        expected,
        report=replace(expected.report, cache=replace(expected.report.cache, remote_trust=None)),
    )


def test_a_previous_records_unreadable_rebuild_is_dropped_as_its_reader_did() -> None:
    old = msgpack.unpackb(V1_RECORD, raw=False)
    del old["state"]["rebuild"]["kept"]  # a shape an older lowerd wrote
    state = read_record(old)
    assert state is not None and state.rebuild is None and state.report.name == "net"
    # this version's record is read whole or not at all: the target is rebuilt
    assert read_record({**old, "version": STATE_VERSION}) is None


def test_a_record_of_another_version_or_shape_is_not_read() -> None:
    old = msgpack.unpackb(V1_RECORD, raw=False)
    current = {**old, "version": STATE_VERSION}
    assert read_record(current) is not None
    assert read_record({**old, "version": STATE_VERSION + 1}) is None  # a newer lowerd's
    assert read_record({**old, "version": 0}) is None
    assert read_record({"state": old["state"]}) is None
    assert read_record([1, 2]) is None
    misread = {**current, "state": {**old["state"], "peak_rss": "2 GiB"}}
    assert read_record(misread) is None
    renamed = dict(old["state"])
    renamed["digests"] = renamed.pop("method_digests")
    assert read_record({**current, "state": renamed}) is None


def test_load_state_reads_a_record_file_of_the_previous_version(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from lowerd.project.build_state import load_state, state_path

    config, target = SimpleNamespace(out_dir=tmp_path), SimpleNamespace(name="net")
    path = state_path(config, target)  # type: ignore[arg-type]
    path.parent.mkdir(parents=True)
    path.write_bytes(V1_RECORD)
    state = load_state(config, target)  # type: ignore[arg-type]
    assert state is not None and state.target == "net"
    path.write_bytes(V1_RECORD[:-10])  # truncated
    assert load_state(config, target) is None  # type: ignore[arg-type]
