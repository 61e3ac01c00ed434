"""Every document lowerd sends to another process or language, by where it goes: the roots of
docs/schema/lowerd.schema.json, which `python -m lowerd.cli.wire_documents` writes from the classes
(project/wire_schema.py) and tests/test_wire_schema.py keeps equal to them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from lowerd.daemon.commands import (
    BuildAnswer,
    BuildFinished,
    BuildStarted,
    BuildWritten,
    CompareArguments,
    CompareRefusal,
    PageAnswer,
    ReportAnswer,
    ScriptAnswer,
    TargetNames,
)
from lowerd.daemon.rpc_messages import REPLIES, REQUESTS
from lowerd.daemon.runtime import DaemonStatus
from lowerd.project.baseline import CheckDocument
from lowerd.project.batch import BuildDocument
from lowerd.project.build_state import BuildRecord
from lowerd.project.compare_result import CompareResult
from lowerd.project.explain_document import ExplainAnswer
from lowerd.project.wire_schema import schema_of
from lowerd.worker.protocol import EVENTS, FORK_SERVER_MESSAGES, PreloadRequest, WorkerJob

SCHEMA_PATH = Path("docs/schema/lowerd.schema.json")

ROOTS: dict[str, type | tuple[type, ...]] = {
    "`lowerd build --json`, and the document of the daemon's answer to a build": BuildDocument,
    "`lowerd compare --json`, and the language server's lowerd.compare answer": CompareResult,
    "`lowerd check --json`": CheckDocument,
    "`lowerd explain --json`, and the language server's lowerd.explain answer": ExplainAnswer,
    "a build record, out_dir/.lowerd/TARGET.msgpack (msgpack)": BuildRecord,
    "a running daemon's status file ($XDG_RUNTIME_DIR/lowerd/SCOPE.json)": DaemonStatus,
    "the arguments of lowerd.build, lowerd.report, lowerd.reportPage, lowerd.stockScript and"
    " lowerd.explain, in order ([NAME, ...] or [[NAME, ...]])": TargetNames,
    "the arguments of lowerd.compare, in order ([TARGET, BACKENDS?])": CompareArguments,
    "the language server's lowerd.build and lowerd.buildAll answer": BuildAnswer,
    "the language server's lowerd.report answer": ReportAnswer,
    "the language server's lowerd.stockScript answer": ScriptAnswer,
    "the language server's lowerd.reportPage answer": PageAnswer,
    "the language server's lowerd.compare answer when it compared nothing": CompareRefusal,
    "the language server's lowerd/buildStarted notification": BuildStarted,
    "the language server's lowerd/buildWritten notification": BuildWritten,
    "the language server's lowerd/buildFinished notification": BuildFinished,
    "a request on the daemon's private socket (a msgpack frame)": REQUESTS,
    "an answer on the daemon's private socket (a msgpack frame)": REPLIES,
    "an event on a build worker's pipe (a msgpack frame)": EVENTS,
    "a message from the fork server to the daemon (msgpack)": FORK_SERVER_MESSAGES,
    "a message to the fork server: a build worker's job, or a preload (msgpack)": (
        WorkerJob,
        PreloadRequest,
    ),
}


def lowerd_schema() -> dict[str, Any]:
    return schema_of(
        ROOTS,
        "lowerd's wire shapes",
        "Every document lowerd writes for another process or language, derived from the classes"
        " that project/wire.py encodes (python -m lowerd.cli.wire_documents writes this file).",
    )


def schema_text() -> str:
    return json.dumps(lowerd_schema(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    """Write the schema to the given path (docs/schema/lowerd.schema.json by default)."""
    path = Path(argv[0]) if argv else SCHEMA_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(schema_text())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
