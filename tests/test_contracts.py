"""The typed contracts (project/result.py, project/report_model.py, worker/protocol.py,
daemon/rpc_messages.py): each reads back what it writes through project/wire.py, every
constructor makes the whole document shape, and the daemon's request parser makes the typed
request of each op."""

from __future__ import annotations

import json
from typing import Any

import pytest
from wire_samples import built, method_report

from lowerd.daemon.commands import (
    BuildAnswer,
    BuildFinished,
    BuildStarted,
    PageAnswer,
    ReportAnswer,
    ScriptAnswer,
    UnbuiltTarget,
    compare_arguments,
    target_names,
)
from lowerd.daemon.compare_service import compare_answer
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
from lowerd.project.report_model import (
    MethodReport,
    ModuleCoverage,
)
from lowerd.project.result import (
    CacheSummary,
    ErrorInfo,
    TargetResult,
)
from lowerd.project.wire import WireError, decode, encode
from lowerd.worker.protocol import (
    LibrariesEvent,
    PartitionedEvent,
    PeakRssEvent,
    ProgressEvent,
    ResultEvent,
    WorkerJob,
    parse_event,
    parse_fork_server_request,
)

DOCUMENT_KEYS = {
    "name",
    "status",
    "verdict",
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


def through_json(raw: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(json.dumps(raw))
    return result


# Round trips ---------------------------------------------------------------------------------


def test_each_contract_reads_back_what_it_writes() -> None:
    result = built()
    assert decode(TargetResult, through_json(encode(result))) == result
    failed = TargetResult.failed("net", "worker-crash", "killed", "models/net.py", 20)
    assert decode(TargetResult, through_json(encode(failed))) == failed
    report = method_report()
    assert decode(MethodReport, through_json(encode(report))) == report
    error = ErrorInfo("export-error", "torch.export failed", "m.py", 3)
    assert decode(ErrorInfo, encode(error)) == error
    assert decode(CacheSummary, encode(CacheSummary(3, 2, 1))) == CacheSummary(3, 2, 1)


def test_a_record_of_an_older_lowerd_reads_with_no_sizes_and_no_graph() -> None:
    raw = through_json(encode(built()))
    del raw["sizes"]
    for method in raw["methods"].values():
        for key in ("planned_memory_bytes", "constant_bytes", "graph"):
            del method[key]
        for partition in method["partitions"]:
            del partition["blob_bytes"], partition["data_bytes"]
    old = decode(TargetResult, raw)
    assert old.sizes is None
    forward = old.methods["forward"]
    assert (forward.planned_memory_bytes, forward.constant_bytes, forward.graph) == (None,) * 3
    assert forward.partitions[0].blob_bytes is None and forward.partitions[0].data_bytes is None
    assert encode(old)["sizes"] is None


def test_a_lowerd_errors_json_is_the_error_info() -> None:
    error = ExportError("torch.export of 'forward' failed", "models/net.py", 12)
    assert decode(ErrorInfo, encode(error.info())) == ErrorInfo(
        "export-error", "torch.export of 'forward' failed", "models/net.py", 12
    )


def test_a_method_reports_computed_fields() -> None:
    raw = encode(method_report())
    assert raw["coverage_percent"] == 70
    assert raw["summary"] == (
        "7 of 10 ops delegated (5 on XNNPACK in 1 partition, 2 on Vulkan in 1 partition; 70 %)"
    )
    assert raw["fixes_hint"] == "1 fix would make this 1 partition"
    # A report stored before they existed reads with them filled in.
    old = {k: v for k, v in raw.items() if k not in ("coverage_percent", "summary", "fixes_hint")}
    assert encode(decode(MethodReport, old)) == raw


def test_each_module_row_carries_its_percent() -> None:
    report = method_report()
    report.modules = [ModuleCoverage("", "Net", 271, 270), ModuleCoverage("fc", "Linear", 4, 4)]
    raw = through_json(encode(report))
    # One rounding rule (coverage_percent): 270 of 271 is 99, never 100 unless every op is.
    assert [row["percent"] for row in raw["modules"]] == [99, 100]
    assert decode(MethodReport, raw) == report
    # A row stored before it carried a percent reads with it filled in.
    for row in raw["modules"]:
        del row["percent"]
    assert encode(decode(MethodReport, raw))["modules"][0]["percent"] == 99


def test_the_target_coverage_is_over_every_method_most_ops_first() -> None:
    result = built()
    second = method_report()
    second.backends = {"Vulkan": {"ops": 9, "partitions": 1}}
    second.ops, second.ops_delegated = 10, 9
    result.methods["encode"] = second
    # 16 of 20 ops; Vulkan took 11, XNNPACK 5.
    assert encode(result)["coverage"] == {"percent": 80, "backends": ["Vulkan", "XNNPACK"]}
    almost = method_report()
    almost.ops, almost.ops_delegated = 271, 270
    assert TargetResult("n", "ok", methods={"f": almost}).coverage.percent == 99


# Constructors make the whole shape ---------------------------------------------------------


def test_failed_up_to_date_and_partitioned_results_have_every_key_of_the_document() -> None:
    assert set(encode(built())) == DOCUMENT_KEYS
    failed = encode(TargetResult.failed("net", "worker-timeout", "too slow"))
    assert set(failed) == DOCUMENT_KEYS
    assert (failed["status"], failed["verdict"]) == ("error", "error")
    assert failed["error"] == {
        "kind": "worker-timeout",
        "message": "too slow",
        "file": None,
        "line": None,
    }
    assert failed["coverage"] == {"percent": 0, "backends": []}
    assert failed["cache"] == {"hits": 0, "misses": 0, "rebased": 0}

    recorded = encode(built())
    up_to_date = encode(built().up_to_date("net", seconds=0.002))
    assert set(up_to_date) == DOCUMENT_KEYS
    assert up_to_date["reused"] == "up-to-date" and up_to_date["seconds"] == 0.002
    assert up_to_date["cache"] == {"hits": 0, "misses": 0, "rebased": 0}
    assert up_to_date["methods"] == recorded["methods"]

    provisional = method_report()
    provisional.final, provisional.provisional = False, True
    shown = encode(TargetResult.partitioned("net", "encode", provisional, built()))
    assert set(shown) == DOCUMENT_KEYS
    assert set(shown["methods"]) == {"forward", "encode"}
    assert shown["entry"] == {"file": "models/net.py", "line": 20}
    assert shown["modules"]["forward"]["name"] == "Net"
    # Over a failed last result, or none, only the partitioned method shows.
    after_failure = TargetResult.partitioned(
        "net", "encode", provisional, TargetResult.failed("net", "export-error", "broke")
    )
    assert list(after_failure.methods) == ["encode"] and after_failure.status == "ok"
    assert set(encode(TargetResult.partitioned("net", "f", provisional, None))) == DOCUMENT_KEYS


def test_an_out_of_memory_result_keeps_its_shape() -> None:
    failed = TargetResult.failed("net", "export-error", "MemoryError", "m.py", 3)
    instead = failed.with_error(ErrorInfo("worker-crash", "ran out of memory"))
    assert set(encode(instead)) == DOCUMENT_KEYS
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
    assert parse_request(encode(call)) == call
    assert parse_request(encode(StatusCall())) == StatusCall()
    assert parse_request(encode(StopCall())) == StopCall()
    with pytest.raises(RequestError, match="jobs"):
        parse_request({**build, "jobs": 0})
    with pytest.raises(RequestError, match="op"):
        parse_request({"op": "rebuild"})


def test_each_reply_frame_reads_back() -> None:
    document = {"config": "/p/pyproject.toml", "targets": [encode(built())], "warnings": []}
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
        assert parse_reply(through_json(encode(reply))) == reply
    assert encode(FinalFrame(None, "ok")) == {
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
        assert parse_event(through_json(encode(event))) == event
    job = WorkerJob(
        "/p/pyproject.toml",
        "net",
        id=7,
        timeout=30.0,
        memory_limit=2**30,
        use_cache=False,
        backends=("vulkan",),
        warm_libraries=True,
    )
    assert parse_fork_server_request(encode(job)) == job


# The language server's commands (daemon/commands.py) ---------------------------------------


def test_command_arguments_are_read_strictly() -> None:
    assert target_names(["a", ["b", "c"]]) == ("a", "b", "c") and target_names(None) == ()
    with pytest.raises(WireError, match=r"targets\[0\]: expected str, got int 5"):
        target_names([5])
    assert compare_arguments(["net", "xnnpack,vulkan"]).backends == ("xnnpack", "vulkan")
    assert compare_arguments(["net", ["coreml"]]).backends == ("coreml",)
    assert compare_arguments(["net", ""]) == compare_arguments(["net"])
    with pytest.raises(WireError, match="target: missing"):
        compare_arguments([])
    with pytest.raises(WireError, match="at most 2 arguments, got 3"):
        compare_arguments(["net", [], "more"])


@pytest.mark.asyncio
async def test_a_compare_with_wrong_arguments_is_answered_with_the_converters_error() -> None:
    refused = encode(await compare_answer(None, None, [["net"]]))
    assert refused == {
        "target": "",
        "backends": [],
        "warnings": [],
        "error": "lowerd.compare takes [target, backends?]: target: expected str, got list ['net']",
    }
    assert encode(await compare_answer(None, None, ["net"])) == {
        "target": "net",
        "backends": [],
        "warnings": [],
        "error": "no lowerd project is loaded",
    }


def test_command_answers_keep_their_shapes() -> None:
    assert encode(BuildStarted("net", 3)) == {"target": "net", "buildId": 3}
    finished = BuildFinished.of("net", 3, TargetResult.failed("net", "cancelled", "newer"), False)
    assert encode(finished) == {
        "target": "net",
        "buildId": 3,
        "status": "error",
        "errorKind": "cancelled",
        "reused": None,
        "current": False,
    }
    assert decode(BuildFinished, encode(finished)) == finished
    assert encode(BuildAnswer(error="unknown targets: x")) == {
        "error": "unknown targets: x",
        "targets": [],
    }
    assert encode(BuildAnswer("/p/pyproject.toml", targets=(None,))) == {
        "config": "/p/pyproject.toml",
        "targets": [None],
    }
    assert encode(ReportAnswer(None, None)) == {"config": None, "error": None, "targets": []}
    shown = ReportAnswer("/p/pyproject.toml", None, (built(), UnbuiltTarget("later")), ("net",))
    raw = encode(shown)
    assert list(raw) == ["config", "error", "targets", "building"]
    assert raw["targets"][1] == {"name": "later"} and raw["targets"][0] == encode(built())
    assert encode(ScriptAnswer("net", "import torch\n")) == {
        "target": "net",
        "script": "import torch\n",
    }
    assert encode(ScriptAnswer(error="no lowerd project is loaded")) == {
        "error": "no lowerd project is loaded"
    }
    assert encode(PageAnswer("<html>")) == {"html": "<html>"}
