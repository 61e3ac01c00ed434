"""The language server's handlers: one function per LSP request, notification or lowerd command.

Each reads its params, asks the session (daemon/session.py) or the view (daemon/editor_view.py)
and answers; none holds state. `create_server` (daemon/serve.py) registers them from the two
tables at the end, as ruff's server keeps a handler per request. pygls reads their annotations at
registration, so LowerdServer is imported for real.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.uris import from_fs_path, to_fs_path

from lowerd.daemon.commands import (
    BuildAnswer,
    PageAnswer,
    ReportAnswer,
    ScriptAnswer,
    target_names,
)
from lowerd.daemon.compare_service import COMPARE, compare_answer
from lowerd.daemon.diagnostics import SOURCE
from lowerd.daemon.editor_view import BUILD, BUILD_ALL, REPORT, REPORT_PAGE, STOCK_SCRIPT
from lowerd.daemon.server import LowerdServer
from lowerd.project.explain import EXPLAIN, explain_answer
from lowerd.project.explain_document import ExplainAnswer
from lowerd.project.result import ErrorInfo
from lowerd.project.wire import WireError, encode
from lowerd.worker.tasks import spawn


def answer(value: object) -> dict[str, Any]:
    """A command's answer as the client gets it: JSON of the answer's class."""
    document: dict[str, Any] = encode(value)
    return document


def _for_targets(
    arguments: Sequence[Any],
    answer_for: Callable[[Sequence[str]], object],
    refusal: Callable[[str], object],
) -> dict[str, Any]:
    """A command on the targets its arguments name; arguments the converter refuses are the
    command's own answer, in its words."""
    try:
        names = target_names(arguments)
    except WireError as error:
        return answer(refusal(str(error)))
    return answer(answer_for(names))


# Lifecycle, documents, settings ------------------------------------------------------------------


def initialize(ls: LowerdServer, params: types.InitializeParams) -> None:
    ls.initialize(params)


async def initialized(ls: LowerdServer, params: types.InitializedParams) -> None:
    await ls.session.start()


async def shutdown(ls: LowerdServer, params: None) -> None:
    await ls.session.stop()


def did_open(ls: LowerdServer, params: types.DidOpenTextDocumentParams) -> None:
    path = to_fs_path(params.text_document.uri)
    if ls.session.started and path:  # some editors forget diagnostics of closed files
        ls.publish(force=[from_fs_path(path)])


def did_save(ls: LowerdServer, params: types.DidSaveTextDocumentParams) -> None:
    path = to_fs_path(params.text_document.uri)
    if path:
        ls.session.file_changed(Path(path))


def did_change_configuration(ls: LowerdServer, params: types.DidChangeConfigurationParams) -> None:
    # Pushed settings apply before the next message is handled (a save right after them builds
    # with them); a client that sends none wants to be asked.
    if params.settings:
        ls.apply_settings(params.settings)
    else:
        spawn(ls.pull_settings())


# What the editor shows ---------------------------------------------------------------------------


def document_diagnostic(
    ls: LowerdServer, params: types.DocumentDiagnosticParams
) -> types.DocumentDiagnosticReport:
    return ls.view.document_diagnostics(params.text_document.uri, params.previous_result_id)


def workspace_diagnostic(
    ls: LowerdServer, params: types.WorkspaceDiagnosticParams
) -> types.WorkspaceDiagnosticReport:
    return ls.view.workspace_diagnostics(params.previous_result_ids)


def inlay_hint(ls: LowerdServer, params: types.InlayHintParams) -> list[types.InlayHint]:
    return ls.view.inlay_hints(params.text_document.uri, params.range)


def code_action(ls: LowerdServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    return ls.view.code_actions(params.text_document.uri, params.range)


def code_lens(ls: LowerdServer, params: types.CodeLensParams) -> list[types.CodeLens]:
    return ls.view.code_lenses(params.text_document.uri)


def hover(ls: LowerdServer, params: types.HoverParams) -> types.Hover | None:
    return ls.view.hover(params.text_document.uri, params.position.line)


# lowerd's commands (workspace/executeCommand) ----------------------------------------------------


async def build(ls: LowerdServer, *arguments: Any) -> dict[str, Any]:
    try:
        names = target_names(arguments)
    except WireError as error:
        return answer(BuildAnswer(error=str(error)))
    return answer(await ls.view.build_answer(names))


async def build_all(ls: LowerdServer, *arguments: Any) -> dict[str, Any]:
    config = ls.session.config
    return answer(await ls.view.build_answer(list(config.targets) if config else []))


def report_page(ls: LowerdServer, *arguments: Any) -> dict[str, Any]:
    return _for_targets(arguments, ls.view.report_page_answer, lambda e: PageAnswer(error=e))


def stock_script(ls: LowerdServer, *arguments: Any) -> dict[str, Any]:
    return _for_targets(arguments, ls.view.stock_script_answer, lambda e: ScriptAnswer(error=e))


def report(ls: LowerdServer, *arguments: Any) -> dict[str, Any]:
    def refusal(message: str) -> ReportAnswer:
        return ReportAnswer(None, ErrorInfo("invalid-arguments", message))

    return _for_targets(arguments, ls.view.report_answer, refusal)


def explain(ls: LowerdServer, *arguments: Any) -> dict[str, Any]:
    """ "Explain this rebuild": what `lowerd explain --json` prints."""
    return _for_targets(
        arguments,
        lambda names: explain_answer(ls.session.config, names),
        lambda e: ExplainAnswer(error=e),
    )


async def compare(ls: LowerdServer, *arguments: Any) -> dict[str, Any]:
    """[target, backends?]: what `lowerd compare --json` prints."""
    session = ls.session
    limit = session.settings.memory_limit
    return answer(await compare_answer(session.pool, session.config, arguments, limit))


FEATURES: list[tuple[str, object | None, Callable[..., Any]]] = [
    (types.INITIALIZE, None, initialize),
    (types.INITIALIZED, None, initialized),
    (types.SHUTDOWN, None, shutdown),
    (types.TEXT_DOCUMENT_DID_OPEN, None, did_open),
    (types.TEXT_DOCUMENT_DID_SAVE, None, did_save),
    (types.WORKSPACE_DID_CHANGE_CONFIGURATION, None, did_change_configuration),
    (
        types.TEXT_DOCUMENT_DIAGNOSTIC,
        types.DiagnosticOptions(
            identifier=SOURCE, inter_file_dependencies=True, workspace_diagnostics=True
        ),
        document_diagnostic,
    ),
    (types.WORKSPACE_DIAGNOSTIC, None, workspace_diagnostic),
    (types.TEXT_DOCUMENT_INLAY_HINT, types.InlayHintOptions(resolve_provider=False), inlay_hint),
    (
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.Empty]),
        code_action,
    ),
    (types.TEXT_DOCUMENT_CODE_LENS, None, code_lens),
    (types.TEXT_DOCUMENT_HOVER, None, hover),
]

COMMANDS: list[tuple[str, Callable[..., Any]]] = [
    (BUILD, build),
    (BUILD_ALL, build_all),
    (REPORT_PAGE, report_page),
    (STOCK_SCRIPT, stock_script),
    (REPORT, report),
    (EXPLAIN, explain),
    (COMPARE, compare),
]
