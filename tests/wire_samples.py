"""One value of each shape that crosses a process or language boundary, every optional part
exercised: tests/test_wire.py checks that each encodes to exactly the bytes recorded in
tests/golden/wire.json (made by the hand-written to_json/to_frame methods before the converter
replaced them) and decodes back to itself."""

from __future__ import annotations

from collections.abc import Callable

from lowerd.cache.remote import RemoteCounts, RemoteReport
from lowerd.daemon.rpc_messages import (
    BuildCall,
    CompareCall,
    ErrorFrame,
    FinalFrame,
    PeakInfo,
    ProgressFrame,
    RunningBuildInfo,
    StatusCall,
    StatusFrame,
    StopCall,
    StoppingFrame,
)
from lowerd.project.build_state import FileStamp, TargetState
from lowerd.project.compare_result import BackendComparison, CompareResult, NotDelegatedGroup
from lowerd.project.key_summary import KeySummary
from lowerd.project.method_graph import CPU, GraphNode, MethodGraph
from lowerd.project.rebuild_record import (
    InputChange,
    PartitionFacts,
    RebuildRecord,
    SourceChange,
)
from lowerd.project.report_model import (
    Frame,
    MethodReport,
    ModuleCoverage,
    NotDelegatedOp,
    PartitionSummary,
    RefusalGroup,
)
from lowerd.project.result import (
    CacheCounts,
    CacheSummary,
    DataFile,
    ErrorInfo,
    ProgramSizes,
    SourceSite,
    TargetResult,
)
from lowerd.worker.protocol import (
    BuiltEvent,
    ExitedMessage,
    LibrariesEvent,
    PartitionedEvent,
    PeakRssEvent,
    PreloadedMessage,
    PreloadRequest,
    ProgressEvent,
    ReadyMessage,
    ResultEvent,
    StartedMessage,
    WorkerJob,
)


def method_report() -> MethodReport:
    library = Frame("/venv/site-packages/lib/norm.py", 12, "forward")
    return MethodReport(
        delegated_nodes=7,
        non_delegated_nodes=3,
        subgraphs=2,
        ops=10,
        ops_delegated=7,
        coverage=0.7,
        backends={"XNNPACK": {"ops": 5, "partitions": 1}, "Vulkan": {"ops": 2, "partitions": 1}},
        partitions=[
            PartitionSummary("XNNPACK", 5, "hit", [["m.py", 3, "aten.linear.default"]], 720, 288),
            PartitionSummary("Vulkan", 2, None),
        ],
        not_delegated=[
            NotDelegatedOp("aten.mean.dim", "m.py", 4, "rank 3", "mean", library, "l.0", "Norm", 8),
            NotDelegatedOp("aten.cumsum.default", None, None, "no support", "cumsum"),
        ],
        refusals=[
            RefusalGroup(
                "aten.mean.dim",
                "rank 3",
                2,
                "m.py",
                4,
                library,
                ["mean", "mean_1"],
                ["l.0", "l.1"],
                "l.{0,1}",
                "Norm",
                1,
                16,
            ),
            RefusalGroup("aten.cumsum.default", "no support", 1, None, None, None),
        ],
        modules=[ModuleCoverage("", "Net", 271, 270), ModuleCoverage("l.*", "Norm", 4, 2, 2)],
        partitions_if_fixed=[1, 1],
        planned_memory_bytes=192,
        constant_bytes=512,
        graph=MethodGraph(
            [
                GraphNode("aten.linear.default", 0),
                GraphNode("aten.mean.dim", CPU, "mean"),
                GraphNode("aten.linear.default", 1),
            ],
            [(0, 1), (1, 2)],
            total_nodes=3,
        ),
    )


def partitioned_report() -> MethodReport:
    return MethodReport(
        delegated_nodes=0,
        non_delegated_nodes=0,
        subgraphs=0,
        ops=4,
        ops_delegated=4,
        coverage=1.0,
        backends={"XNNPACK": {"ops": 4, "partitions": 1}},
        partitions=[PartitionSummary("XNNPACK", 4, None, [])],
        final=False,
        provisional=True,
    )


def collapsed_graph() -> MethodGraph:
    nodes = [GraphNode("XNNPACK partition 0 (120 ops)", 0), GraphNode("aten.add.Tensor", CPU, "a")]
    return MethodGraph(nodes, [(0, 1)], total_nodes=121, collapsed=True, omitted=4)


def remote_report(status: str = "ok") -> RemoteReport:
    counts = RemoteCounts(hits=2, misses=1, puts=1, errors=0)
    return RemoteReport(status, counts, ("a value failed verification",), "redis://host:6379")


def built() -> TargetResult:
    return TargetResult(
        name="net",
        status="ok",
        seconds=1.235,
        output="/p/build/net.pte",
        sha256="ab" * 32,
        cache=CacheSummary(1, 2, 1).with_remote(remote_report()),
        methods={"forward": method_report(), "encode": partitioned_report()},
        entry=SourceSite("models/net.py", 20),
        modules={"forward": SourceSite("models/net.py", 5, "Net"), "encode": SourceSite("e.py")},
        reused=None,
        memo={"qparams": {"hits": 2, "misses": 0}},
        backend_options={"xnnpack": {"per_channel": True, "threads": 4}},
        data_files=[
            DataFile("/p/build/net.ptd", "cd" * 32, "ptd"),
            DataFile("/p/build/net.etrecord", "ef" * 32, "etrecord"),
        ],
        options={
            "edge_compile_config": {"_check_ir_validity": False},
            "transform_passes": "passes.py:run",
        },
        quantize="xnnpack-8da4w",
        sizes=ProgramSizes(4256, 512, 1440, 576),
    )


def failed() -> TargetResult:
    return TargetResult.failed("net", "export-error", "torch.export failed", "models/net.py", 12)


def reused() -> TargetResult:
    return TargetResult(
        "net",
        "ok",
        seconds=0.0004,
        output="/p/build/net.pte",
        sha256="ab" * 32,
        reused="up-to-date",
        cache=CacheSummary().with_remote(remote_report("unavailable: TimeoutError: timed out")),
    )


def compared() -> CompareResult:
    ok = BackendComparison.of("xnnpack", built())
    failed_column = BackendComparison.failed(
        "coreml", ErrorInfo("backend-unavailable", "no coremltools")
    )
    up_to_date = BackendComparison(
        "vulkan",
        "Vulkan",
        "ok",
        83,
        6,
        5,
        2,
        (NotDelegatedGroup("aten.cumsum.default", 1, "no operator implementation"),),
        4256,
        0.0031,
        CacheCounts(),
        "up-to-date",
        "/p/build/.lowerd/compare/vulkan/net.pte",
    )
    return CompareResult("/p/pyproject.toml", "net", (ok, up_to_date, failed_column), ("w",))


def key_summary(graph: str = "g1") -> KeySummary:
    return KeySummary(
        3,
        "XnnpackBackend",
        "v2",
        "2.13.0",
        "1.5.1",
        "cs",
        graph,
        "sm",
        "sig",
        "rc",
        {"fc.weight": "0123456789abcdef", "fc.bias": "fedcba9876543210"},
    )


def rebuild_record() -> RebuildRecord:
    lowered = PartitionFacts(
        "forward",
        1,
        "XNNPACK",
        "miss",
        ["models/net.py", 16],
        key_summary("g2"),
        "graph changed",
        previous=1,
        matched_by="site",
        earlier_key=key_summary(),
        changed=["graph"],
        changed_weights=[],
    )
    hit = PartitionFacts("forward", 2, "XNNPACK", "hit", None, None)
    return RebuildRecord(
        earlier_build=True,
        kept=False,
        why="the exported program changed (forward)",
        sources=[
            SourceChange("models/net.py", "changed", "a" * 64, "b" * 64, [[3, 4], [9, 9]]),
            SourceChange("models/new.py", "added", None, "c" * 64),
        ],
        inputs=[InputChange("backends", "xnnpack", "xnnpack,vulkan")],
        partitions=[lowered, hit],
    )


# name -> (the class it decodes as, a function making the value)
SAMPLES: dict[str, tuple[type, Callable[[], object]]] = {
    "target_result.built": (TargetResult, built),
    "target_result.failed": (TargetResult, failed),
    "target_result.reused": (TargetResult, reused),
    "target_result.partitioned": (
        TargetResult,
        lambda: TargetResult.partitioned("net", "encode", partitioned_report(), built()),
    ),
    "method_report": (MethodReport, method_report),
    "method_report.partitioned": (MethodReport, partitioned_report),
    "method_graph.collapsed": (MethodGraph, collapsed_graph),
    "error_info": (ErrorInfo, lambda: ErrorInfo("worker-crash", "killed by signal 9")),
    "compare_result": (CompareResult, compared),
    "rebuild_record": (RebuildRecord, rebuild_record),
    "rebuild_record.first": (RebuildRecord, lambda: RebuildRecord(False, True, None)),
    "key_summary": (KeySummary, key_summary),
}


# The messages between lowerd's processes (worker/protocol.py, daemon/rpc_messages.py) ----------

MESSAGES: dict[str, Callable[[], object]] = {
    "worker_job": lambda: WorkerJob(
        "/p/pyproject.toml",
        "net",
        id=7,
        timeout=30.0,
        memory_limit=2**30,
        use_cache=False,
        backends=("vulkan",),
        warm_libraries=True,
    ),
    "worker_job.ray": lambda: WorkerJob("/p/pyproject.toml", "net", out_dir="/tmp/ray/out"),
    "event.progress": lambda: ProgressEvent("preprocess", "3/42"),
    "event.progress.bare": lambda: ProgressEvent("load"),
    "event.partitioned": lambda: PartitionedEvent("forward", method_report()),
    "event.libraries": lambda: LibrariesEvent(("transformers", "numpy")),
    "event.peak_rss": lambda: PeakRssEvent(123456789),
    "event.built": lambda: BuiltEvent(built()),
    "event.result": lambda: ResultEvent(built()),
    "fork.preload": lambda: PreloadRequest(("transformers",)),
    "fork.ready": ReadyMessage,
    "fork.started": lambda: StartedMessage(7, 4242),
    "fork.exited": lambda: ExitedMessage(7, 9),
    "fork.preloaded": lambda: PreloadedMessage(3, ("ray",), True),
    "rpc.build": lambda: BuildCall("/p/pyproject.toml", ("a", "b"), False, 3),
    "rpc.build.default": lambda: BuildCall("/p/pyproject.toml"),
    "rpc.compare": lambda: CompareCall("/p/pyproject.toml", "net", ("xnnpack",), False),
    "rpc.status": StatusCall,
    "rpc.stop": StopCall,
    "reply.progress": lambda: ProgressFrame("net on xnnpack", "export", "forward"),
    "reply.final": lambda: FinalFrame({"config": "/p/pyproject.toml", "targets": []}, "ok"),
    "reply.final.usage": lambda: FinalFrame(None, "usage", "no [tool.lowerd]"),
    "reply.status": lambda: StatusFrame(
        {"pid": 1, "version": "0.1.0"},
        (RunningBuildInfo("net", "/p/pyproject.toml", 42, 1.5),),
        (PeakInfo("/p/pyproject.toml", "net", 2**30),),
    ),
    "reply.stopping": StoppingFrame,
    "reply.error": lambda: ErrorFrame("uid 0 may not use this daemon"),
}


def target_state() -> TargetState:
    """A build record as a build saves it (project/build_state.py)."""
    return TargetState(
        target="net",
        inputs_digest="d" * 64,
        sources=[FileStamp("/p/models/net.py", 812, 1_700_000_000_123_456_789, "e" * 64)],
        output=FileStamp("/p/build/net.pte", 4256, 1_700_000_001_000_000_000, "ab" * 32),
        inputs={"state_version": "1", "entry": "models/net.py:make", "backends": "xnnpack"},
        source_lines={"/p/models/net.py": [3735928559, 0, 12]},
        rebuild=rebuild_record(),
        method_digests={"forward": "f" * 64},
        method_lines={"forward": [["models/net.py", 16], None, ["models/net.py", 17]]},
        report=built(),
        data_files=[FileStamp("/p/build/net.ptd", 1024, 1_700_000_001_000_000_000, "cd" * 32)],
        peak_rss=2**31,
    )
