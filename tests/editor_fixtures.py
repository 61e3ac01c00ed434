"""The editors' test fixtures, written from Python: what the VS Code tests
(editors/vscode/test/fixtures) and the Neovim unit tests (editors/neovim/test/fixtures) read is
what project/wire.py writes for the server's classes. `python tests/editor_fixtures.py` writes
them (and the build record's format of a new STATE_VERSION); tests/test_wire_schema.py checks
that the checked-in ones are what it writes.

Two kinds. Documents recorded from real runs (a build of tests/projects/basic, of a Llama, a
compare; paths rewritten to /project) are their own source: read as their class, strictly, and
written again, so that a field added to a class appears in them when this is run and a field
renamed or removed fails here, not in an editor. The Neovim answers are made here from the
classes. server-report.json is not written: it is an older server's answer as recorded, which
the extension must still read.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from lowerd.cli.wire_documents import lowerd_schema
from lowerd.daemon.commands import ReportAnswer, UnbuiltTarget
from lowerd.project.batch import BuildDocument
from lowerd.project.build_state import STATE_VERSION
from lowerd.project.compare_result import BackendComparison, CompareResult, NotDelegatedGroup
from lowerd.project.report_model import MethodReport, NotDelegatedOp, PartitionSummary
from lowerd.project.result import CacheCounts, ErrorInfo, SourceSite, TargetResult
from lowerd.project.wire import decode, encode

REPO = Path(__file__).resolve().parent.parent
VSCODE = REPO / "editors/vscode/test/fixtures"
NEOVIM = REPO / "editors/neovim/test/fixtures"
# The build record's format as of this STATE_VERSION: written once, when there is none, never
# over one (tests/test_wire_schema.py holds the classes to it until the version changes).
RECORD_FORMAT = REPO / f"tests/golden/build-record-v{STATE_VERSION}.schema.json"


def indented(value: object) -> str:
    return json.dumps(encode(value), indent=2, ensure_ascii=False) + "\n"


def compact(value: object) -> str:
    return json.dumps(encode(value), separators=(",", ":"), ensure_ascii=False) + "\n"


def again(path: Path, cls: type, write: Callable[[object], str]) -> Callable[[], str]:
    """A recorded document, read as `cls` and written again."""
    return lambda: write(decode(cls, json.loads(path.read_text())))


# The Neovim unit tests' answers ------------------------------------------------------------------


def report_answer() -> ReportAnswer:
    """A lowerd.report answer: a built target with two ops left on the CPU, a failed one, and
    one not built yet."""
    forward = MethodReport(
        delegated_nodes=2,
        non_delegated_nodes=4,
        subgraphs=2,
        ops=4,
        ops_delegated=2,
        coverage=0.5,
        backends={"XNNPACK": {"ops": 2, "partitions": 2}},
        partitions=[
            PartitionSummary("XNNPACK", 1, "hit", [["models/net.py", 16, "aten.linear.default"]])
        ],
        not_delegated=[
            NotDelegatedOp(
                "aten.pow.Tensor_Scalar",
                "models/net.py",
                17,
                "only support power == 2, got 3",
                "pow",
            ),
            NotDelegatedOp("aten.cumsum.default", None, None, "no XNNPACK support", "cumsum"),
        ],
    )
    net = TargetResult(
        "net",
        "ok",
        seconds=4.9,
        output="/p/build/net.pte",
        methods={"forward": forward},
        entry=SourceSite("models/net.py", 22),
        modules={"forward": SourceSite("models/net.py", 9, "Net")},
    )
    failed = TargetResult.failed("broken", "export-error", "boom", "models/broken.py", 5)
    broken = replace(failed, seconds=1.0, entry=SourceSite("models/broken.py", 9))
    return ReportAnswer("/p/pyproject.toml", None, (net, broken, UnbuiltTarget("later")), ())


def compare_answer() -> CompareResult:
    """A lowerd.compare answer of tests/projects/basic's refused target."""
    xnnpack = BackendComparison(
        "xnnpack",
        "XNNPACK",
        "ok",
        50,
        4,
        2,
        2,
        (
            NotDelegatedGroup("aten.pow.Tensor_Scalar", 1, "power"),
            NotDelegatedGroup("aten.cumsum.default", 1, "none"),
        ),
        4256,
        1.12,
        CacheCounts(2, 0, 0),
    )
    vulkan = BackendComparison(
        "vulkan",
        "Vulkan",
        "ok",
        83,
        6,
        5,
        2,
        (NotDelegatedGroup("aten.cumsum.default", 1, "none"),),
        4256,
        0.003,
        reused="up-to-date",
    )
    unavailable = ErrorInfo("backend-unavailable", "no coremltools", "pyproject.toml", 9)
    coreml = BackendComparison.failed("coreml", unavailable)
    return CompareResult("/p/pyproject.toml", "refused", (xnnpack, vulkan, coreml))


FIXTURES: dict[Path, Callable[[], str]] = {
    VSCODE / "report.json": again(VSCODE / "report.json", BuildDocument, indented),
    VSCODE / "compare.json": again(VSCODE / "compare.json", CompareResult, indented),
    VSCODE / "llama-report.json": again(VSCODE / "llama-report.json", BuildDocument, compact),
    NEOVIM / "report.json": lambda: indented(report_answer()),
    NEOVIM / "compare.json": lambda: indented(compare_answer()),
}


def written() -> dict[Path, str]:
    return {path: make() for path, make in FIXTURES.items()}


def record_definitions(schema: dict[str, Any]) -> dict[str, Any]:
    """The definitions a build record uses, without their words."""
    definitions, found, todo = schema["$defs"], {}, ["BuildRecord"]
    while todo:
        name = todo.pop()
        if name not in found:
            found[name] = {k: v for k, v in definitions[name].items() if k != "description"}
            todo += re.findall(r'"#/\$defs/(\w+)"', json.dumps(found[name]))
    return dict(sorted(found.items()))


def main() -> int:
    texts = written()
    if not RECORD_FORMAT.exists():
        texts[RECORD_FORMAT] = json.dumps(record_definitions(lowerd_schema()), indent=1) + "\n"
    for path, text in texts.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
