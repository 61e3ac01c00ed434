"""The typed contracts (project/result.py, project/report_model.py, worker/protocol.py,
daemon/rpc_messages.py): each reads back what it writes, every constructor makes the whole
document shape, and the daemon's request parser makes the typed request of each op."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lowerd.daemon.rpc import RequestError, parse_request
from lowerd.daemon.rpc_messages import (
    BuildCall,
    ErrorFrame,
    FinalFrame,
    PeakInfo,
    ProgressFrame,
    RunningBuildInfo,
    StatusCall,
    StatusFrame,
    StopCall,
    StoppingFrame,
    parse_reply,
)
from lowerd.project.errors import ExportError
from lowerd.project.method_graph import CPU, GraphNode, MethodGraph
from lowerd.project.report_model import (
    Frame,
    MethodReport,
    ModuleCoverage,
    NotDelegatedOp,
    PartitionSummary,
    RefusalGroup,
)
from lowerd.project.result import (
    CacheSummary,
    ErrorInfo,
    ProgramSizes,
    SourceSite,
    TargetResult,
)
from lowerd.worker.protocol import (
    LibrariesEvent,
    PartitionedEvent,
    PeakRssEvent,
    ProgressEvent,
    ResultEvent,
    WorkerJob,
    parse_event,
)

DOCUMENT_KEYS = {
    "name",
    "status",
    "output",
    "sha256",
    "seconds",
    "reused",
    "cache",
    "methods",
    "error",
    "entry",
    "modules",
    "memo",
    "coverage",
    "data_files",
    "backend_options",
    "quantize",
    "options",
    "sizes",
}


def method_report() -> MethodReport:
    library = Frame("/site-packages/lib/norm.py", 12, "forward")
    return MethodReport(
        delegated_nodes=7,
        non_delegated_nodes=3,
        subgraphs=2,
        ops=10,
        ops_delegated=7,
        coverage=0.7,
        backends={"XNNPACK": {"ops": 5, "partitions": 1}, "Vulkan": {"ops": 2, "partitions": 1}},
        partitions=[
            PartitionSummary("XNNPACK", 5, "hit", [["m.py", 3, "aten.linear.default"]], 720, 288)
        ],
        not_delegated=[
            NotDelegatedOp("aten.mean.dim", "m.py", 4, "rank 3", "mean", library, "l.0", "Norm", 8)
        ],
        refusals=[
            RefusalGroup("aten.mean.dim", "rank 3", 1, "m.py", 4, library, ["mean"], ["l.0"])
        ],
        modules=[ModuleCoverage("", "Net", 10, 7)],
        partitions_if_fixed=[1],
        planned_memory_bytes=192,
        constant_bytes=512,
        graph=MethodGraph(
            [GraphNode("aten.linear.default", 0), GraphNode("aten.mean.dim", CPU, "mean")],
            [(0, 1)],
            total_nodes=2,
        ),
    )


def built() -> TargetResult:
    return TargetResult(
        name="net",
        status="ok",
        seconds=1.25,
        output="/p/build/net.pte",
        sha256="ab" * 32,
        cache=CacheSummary(1, 1, 1),
        methods={"forward": method_report()},
        entry=SourceSite("models/net.py", 20),
        modules={"forward": SourceSite("models/net.py", 5, "Net")},
        reused=None,
        memo={"qparams": {"hits": 2, "misses": 0}},
        sizes=ProgramSizes(4256, 512, 1440, 576),
    )


def through_json(raw: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(json.dumps(raw))
    return result


# Round trips ---------------------------------------------------------------------------------


def test_each_contract_reads_back_what_it_writes() -> None:
    result = built()
    assert TargetResult.from_json(through_json(result.to_json())) == result
    failed = TargetResult.failed("net", "worker-crash", "killed", "models/net.py", 20)
    assert TargetResult.from_json(through_json(failed.to_json())) == failed
    report = method_report()
    assert MethodReport.from_json(through_json(report.to_json())) == report
    error = ErrorInfo("export-error", "torch.export failed", "m.py", 3)
    assert ErrorInfo.from_json(error.to_json()) == error
    assert CacheSummary.from_json(CacheSummary(3, 2, 1).to_json()) == CacheSummary(3, 2, 1)


def test_a_record_of_an_older_lowerd_reads_with_no_sizes_and_no_graph() -> None:
    raw = through_json(built().to_json())
    del raw["sizes"]
    for method in raw["methods"].values():
        for key in ("planned_memory_bytes", "constant_bytes", "graph"):
            del method[key]
        for partition in method["partitions"]:
            del partition["blob_bytes"], partition["data_bytes"]
    old = TargetResult.from_json(raw)
    assert old.sizes is None
    forward = old.methods["forward"]
    assert (forward.planned_memory_bytes, forward.constant_bytes, forward.graph) == (None,) * 3
    assert forward.partitions[0].blob_bytes is None and forward.partitions[0].data_bytes is None
    assert old.to_json()["sizes"] is None


def test_a_lowerd_errors_json_is_the_error_info() -> None:
    error = ExportError("torch.export of 'forward' failed", "models/net.py", 12)
    assert error.to_json() == error.info().to_json()
    assert ErrorInfo.from_json(error.to_json()) == ErrorInfo(
        "export-error", "torch.export of 'forward' failed", "models/net.py", 12
    )


def test_a_method_reports_computed_fields() -> None:
    raw = method_report().to_json()
    assert raw["coverage_percent"] == 70
    assert raw["summary"] == (
        "7 of 10 ops delegated (5 on XNNPACK in 1 partition, 2 on Vulkan in 1 partition; 70 %)"
    )
    assert raw["fixes_hint"] == "1 fix would make this 1 partition"
    # A report stored before they existed reads with them filled in.
    old = {k: v for k, v in raw.items() if k not in ("coverage_percent", "summary", "fixes_hint")}
    assert MethodReport.from_json(old).to_json() == raw


def test_each_module_row_carries_its_percent() -> None:
    report = method_report()
    report.modules = [ModuleCoverage("", "Net", 271, 270), ModuleCoverage("fc", "Linear", 4, 4)]
    raw = through_json(report.to_json())
    # One rounding rule (coverage_percent): 270 of 271 is 99, never 100 unless every op is.
    assert [row["percent"] for row in raw["modules"]] == [99, 100]
    assert MethodReport.from_json(raw) == report
    # A row stored before it carried a percent reads with it filled in.
    for row in raw["modules"]:
        del row["percent"]
    assert MethodReport.from_json(raw).to_json()["modules"][0]["percent"] == 99


def test_the_target_coverage_is_over_every_method_most_ops_first() -> None:
    result = built()
    second = method_report()
    second.backends = {"Vulkan": {"ops": 9, "partitions": 1}}
    second.ops, second.ops_delegated = 10, 9
    result.methods["encode"] = second
    # 16 of 20 ops; Vulkan took 11, XNNPACK 5.
    assert result.to_json()["coverage"] == {"percent": 80, "backends": ["Vulkan", "XNNPACK"]}
    almost = method_report()
    almost.ops, almost.ops_delegated = 271, 270
    assert TargetResult("n", "ok", methods={"f": almost}).coverage.percent == 99


# Constructors make the whole shape ---------------------------------------------------------


def test_failed_up_to_date_and_partitioned_results_have_every_key_of_the_document() -> None:
    assert set(built().to_json()) == DOCUMENT_KEYS
    failed = TargetResult.failed("net", "worker-timeout", "too slow").to_json()
    assert set(failed) == DOCUMENT_KEYS
    assert failed["error"] == {
        "kind": "worker-timeout",
        "message": "too slow",
        "file": None,
        "line": None,
    }
    assert failed["coverage"] == {"percent": 0, "backends": []}
    assert failed["cache"] == {"hits": 0, "misses": 0, "rebased": 0}

    recorded = built().to_json()
    up_to_date = TargetResult.up_to_date("net", recorded, seconds=0.002).to_json()
    assert set(up_to_date) == DOCUMENT_KEYS
    assert up_to_date["reused"] == "up-to-date" and up_to_date["seconds"] == 0.002
    assert up_to_date["cache"] == {"hits": 0, "misses": 0, "rebased": 0}
    assert up_to_date["methods"] == recorded["methods"]

    provisional = method_report()
    provisional.final, provisional.provisional = False, True
    shown = TargetResult.partitioned("net", "encode", provisional, built()).to_json()
    assert set(shown) == DOCUMENT_KEYS
    assert set(shown["methods"]) == {"forward", "encode"}
    assert shown["entry"] == {"file": "models/net.py", "line": 20}
    assert shown["modules"]["forward"]["name"] == "Net"
    # Over a failed last result, or none, only the partitioned method shows.
    after_failure = TargetResult.partitioned(
        "net", "encode", provisional, TargetResult.failed("net", "export-error", "broke")
    )
    assert list(after_failure.methods) == ["encode"] and after_failure.status == "ok"
    assert set(TargetResult.partitioned("net", "f", provisional, None).to_json()) == DOCUMENT_KEYS


def test_an_out_of_memory_result_keeps_its_shape() -> None:
    failed = TargetResult.failed("net", "export-error", "MemoryError", "m.py", 3)
    instead = failed.with_error(ErrorInfo("worker-crash", "ran out of memory"))
    assert set(instead.to_json()) == DOCUMENT_KEYS
    assert instead.error == ErrorInfo("worker-crash", "ran out of memory")


# The daemon's requests --------------------------------------------------------------------


def test_parse_request_makes_the_typed_request_of_each_op() -> None:
    build = {"op": "build", "config": "/p/pyproject.toml", "targets": ["a"], "jobs": 2}
    assert parse_request(build) == BuildCall("/p/pyproject.toml", ("a",), True, 2)
    assert parse_request({"op": "build", "config": "/p/pyproject.toml"}) == BuildCall(
        "/p/pyproject.toml"
    )
    assert parse_request({"op": "status"}) == StatusCall()
    assert parse_request({"op": "stop"}) == StopCall()
    # What a client sends is what the daemon parses.
    call = BuildCall("/p/pyproject.toml", ("a", "b"), False, 3)
    assert parse_request(call.to_frame()) == call
    assert parse_request(StatusCall().to_frame()) == StatusCall()
    assert parse_request(StopCall().to_frame()) == StopCall()
    with pytest.raises(RequestError, match="jobs"):
        parse_request({**build, "jobs": 0})
    with pytest.raises(RequestError, match="op"):
        parse_request({"op": "rebuild"})


def test_each_reply_frame_reads_back() -> None:
    document = {"config": "/p/pyproject.toml", "targets": [built().to_json()], "warnings": []}
    replies = [
        ProgressFrame("net", "preprocess", "3/42"),
        FinalFrame(through_json(document), "target_failed"),
        FinalFrame(None, "usage", "no [tool.lowerd]"),
        StatusFrame(
            {"pid": 1},
            (RunningBuildInfo("net", "/p/pyproject.toml", 42, 1.5),),
            (PeakInfo("/p/pyproject.toml", "net", 2**30),),
        ),
        StoppingFrame(),
        ErrorFrame("uid 0 may not use this daemon"),
    ]
    for reply in replies:
        assert parse_reply(through_json(reply.to_frame())) == reply
    assert FinalFrame(None, "ok").to_frame() == {
        "type": "final",
        "document": None,
        "outcome": "ok",
        "message": None,
    }


def test_each_worker_event_reads_back() -> None:
    events = [
        ProgressEvent("export", "forward"),
        PartitionedEvent("forward", method_report()),
        LibrariesEvent(("transformers", "numpy")),
        PeakRssEvent(123456),
        ResultEvent(built()),
    ]
    for event in events:
        assert parse_event(through_json(event.to_frame())) == event
    job = WorkerJob("/p/pyproject.toml", "net", 7, 2**30, False, ("vulkan",), True)
    assert WorkerJob.from_frame(job.to_frame()) == job
