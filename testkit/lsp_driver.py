"""A typed LSP driver for `lowerd serve`: what an editor does, for the tests and the benches.

It starts the server (`python -m lowerd serve` in the project's folder, over stdio) or connects
to one over TCP, speaks LSP through pygls' LanguageClient, and records what the server sends as
typed events (lsp_events.py), in the order received. Every wait is event-driven: its condition
is checked again each time the server sends something, and the wait fails at the deadline (a
guard against a hang, never a measure) or as soon as the server has ended. Requests are raced
against the same two ends, so a dead server fails a request instead of hanging it.

The driver starts the server itself (asyncio's subprocess, pygls' reader loop on its pipes)
rather than through LanguageClient.start_io: so it holds the process by a public handle (its
pid, its exit) and never reaches into pygls' private attributes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import IO, Any, TypeVar

import cattrs
from lsprotocol import types
from pygls.io_ import run_async
from pygls.lsp.client import LanguageClient
from pygls.protocol import default_converter

from testkit.lsp_events import (
    BUILD_FINISHED,
    BUILD_STARTED,
    BUILD_WRITTEN,
    PROGRESS_KINDS,
    BuildFinished,
    BuildStarted,
    BuildWritten,
    Progress,
    ProgressValue,
    Published,
    Refresh,
    ServerEvent,
)
from testkit.ports import open_when_listening
from testkit.projects import write_text_atomic

T = TypeVar("T")

SECTION = "lowerd"  # the settings' section: initializationOptions and didChangeConfiguration
REFRESHES = (
    types.WORKSPACE_CODE_LENS_REFRESH,
    types.WORKSPACE_DIAGNOSTIC_REFRESH,
    types.WORKSPACE_INLAY_HINT_REFRESH,
)
logger = logging.getLogger(__name__)


class NeverHappened(AssertionError):
    """What a driver waited for did not come: the deadline passed, or the server ended first."""


def lsp_converter() -> cattrs.Converter:
    """pygls' converter, but reading a code action that carries a command as a CodeAction:
    lsprotocol takes any object with a `command` key for a Command, where the spec (and VS
    Code) look at whether `command` is a string."""
    # pygls leaves default_converter unannotated; it returns a cattrs Converter.
    converter: cattrs.Converter = default_converter()  # type: ignore[no-untyped-call]

    def command_or_action(value: Any, _: type) -> types.Command | types.CodeAction:
        if isinstance(value.get("command"), str):
            return converter.structure(value, types.Command)
        return converter.structure(value, types.CodeAction)

    converter.register_structure_hook(types.Command | types.CodeAction, command_or_action)
    return converter


class LspDriver:
    """An editor on the project in `root`, driving a `lowerd serve`. `client` is pygls'
    LanguageClient, for the requests the driver has no method for (send them through
    `answer`); `events` is what the server sent; `published` the diagnostics it shows now."""

    def __init__(self, root: Path, deadline: float, name: str = "lowerd-lsp-driver") -> None:
        self.root = root
        self.deadline = deadline
        self.converter = lsp_converter()
        self.client = LanguageClient(name, "1", converter_factory=lambda: self.converter)
        self.events: list[ServerEvent] = []
        self.published: dict[str, list[types.Diagnostic]] = {}  # uri -> its last diagnostics
        self.progress: dict[types.ProgressToken, list[ProgressValue]] = {}
        self.log_messages: list[types.LogMessageParams] = []
        self.configuration: dict[str, Any] = {}  # what workspace/configuration answers, by section
        self.versions: dict[str, int] = {}  # the open documents' versions
        self.process: asyncio.subprocess.Process | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reading: asyncio.Task[None] | None = None
        self._watching: asyncio.Task[None] | None = None  # waits for the process' exit
        self._stop_reading = threading.Event()
        self._news = asyncio.Event()  # set on every event, and when the server ends
        # The reader is done: every message the server sent is handled, no more will come
        self._closed = asyncio.Event()
        self._register()

    # The connection ----------------------------------------------------------------------------

    async def start(self, env: Mapping[str, str] | None = None, stderr: Path | None = None) -> None:
        """`python -m lowerd serve` in the project's folder, over stdio; its stderr to the file
        `stderr`, or to this process' (a test's captured output)."""
        log: IO[bytes] | None
        with open(stderr, "wb") if stderr else nullcontext() as log:
            self.process = await asyncio.create_subprocess_exec(
                *(sys.executable, "-m", "lowerd", "serve"),
                cwd=self.root,
                env=env,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
            )
        assert self.process.stdout is not None and self.process.stdin is not None
        self._attach(self.process.stdout, self.process.stdin)
        self._watching = asyncio.get_running_loop().create_task(self._note_exit(self.process))

    async def connect_tcp(self, host: str, port: int) -> None:
        """To a `lowerd serve --tcp` started elsewhere, once it listens (within the deadline)."""
        reader, writer = await open_when_listening(host, port, self.deadline)
        self._attach(reader, writer)

    def _attach(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self.client.protocol.set_writer(writer)
        self._reading = asyncio.get_running_loop().create_task(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            await run_async(
                stop_event=self._stop_reading,
                reader=reader,
                protocol=self.client.protocol,
                logger=logger,
                error_handler=self.client.report_server_error,
            )
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the server ended in the middle of a message
        finally:
            self._closed.set()
            self._news.set()

    async def _note_exit(self, process: asyncio.subprocess.Process) -> None:
        await process.wait()
        self._news.set()

    def ended(self) -> str | None:
        """Why the server can send nothing more, or None while it can."""
        if self.process is not None and self.process.returncode is not None:
            return f"the server exited with {self.process.returncode}"
        return "the connection closed" if self._closed.is_set() else None

    async def initialize(
        self, capabilities: types.ClientCapabilities, settings: dict[str, Any] | None = None
    ) -> types.InitializeResult:
        """initialize (the project's folder as the workspace, lowerd's settings as its
        initializationOptions), then initialized."""
        root = self.root.as_uri()
        result = await self.answer(
            self.client.initialize_async(
                types.InitializeParams(
                    capabilities=capabilities,
                    process_id=os.getpid(),
                    root_uri=root,
                    workspace_folders=[types.WorkspaceFolder(uri=root, name=self.root.name)],
                    initialization_options={SECTION: settings} if settings is not None else None,
                )
            ),
            "initialize",
        )
        self.client.initialized(types.InitializedParams())
        return result

    async def shutdown(self, deadline: float | None = None) -> int | None:
        """shutdown, then exit; the server's exit status when the driver started it. Each
        waits until `deadline` seconds, the driver's own by default."""
        await self.answer(self.client.shutdown_async(None), "shutdown", deadline)
        self.client.exit(None)
        if self.process is None:
            return None
        try:
            return await asyncio.wait_for(self.process.wait(), self._seconds(deadline))
        except TimeoutError:
            raise NeverHappened("the server did not exit after shutdown and exit") from None

    async def close(self) -> None:
        """The connection closed; a server the driver started and that still runs is
        terminated (by its own handle), killed if it does not end by the deadline."""
        self._stop_reading.set()
        if self._writer is not None and self.process is None:
            self._writer.close()  # TCP: the reader sees the end of the stream
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), self.deadline)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        if self._reading is not None:
            # The end of the stream ends it; a process that kept the pipe open does not
            await asyncio.wait({self._reading}, timeout=self.deadline)
            self._reading.cancel()

    async def stop(self, deadline: float | None = None) -> None:
        """What an editor does when it quits: shutdown and exit (each waited for until
        `deadline`), then the connection closed, even if the server does not answer."""
        try:
            if self._writer is not None and self.ended() is None:
                await self.shutdown(deadline)
        except (NeverHappened, RuntimeError) as error:
            logger.warning("the server did not shut down: %s", error)
        finally:
            await self.close()

    # What the editor does ----------------------------------------------------------------------

    def path(self, relative: str) -> Path:
        return self.root / relative

    def uri(self, relative: str) -> str:
        return self.path(relative).as_uri()

    def open(self, relative: str, language_id: str = "python") -> None:
        """didOpen, with the file's text as it is on disk."""
        self.versions[relative] = 1
        item = types.TextDocumentItem(
            uri=self.uri(relative),
            language_id=language_id,
            version=1,
            text=self.path(relative).read_text(),
        )
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(item))

    def change(self, relative: str, text: str) -> None:
        """The buffer of an open document changes (didChange, as while typing)."""
        if relative not in self.versions:
            return
        self.versions[relative] += 1
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(
                    uri=self.uri(relative), version=self.versions[relative]
                ),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
            )
        )

    def write(self, relative: str, text: str) -> None:
        """The save itself: the file written in one step (as editors do; a build never reads a
        half-written file), then didSave."""
        write_text_atomic(self.path(relative), text)
        self.client.text_document_did_save(
            types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(uri=self.uri(relative)))
        )

    def save(self, relative: str, text: str) -> None:
        """What an editor does on save: the buffer changes (if open), the file is written,
        didSave."""
        self.change(relative, text)
        self.write(relative, text)

    def configure(self, settings: dict[str, Any]) -> None:
        """didChangeConfiguration with lowerd's settings (those given; the others unchanged)."""
        self.client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={SECTION: settings})
        )

    # Requests ----------------------------------------------------------------------------------

    async def answer(
        self, request: Awaitable[T], what: str = "an answer", deadline: float | None = None
    ) -> T:
        """The answer to a request; fails after `deadline` seconds (the driver's by default), or
        once every message the server sent is handled and none answered it (the answer's own
        completion was scheduled before the end of the reader's, so a late answer still wins)."""
        seconds = self._seconds(deadline)
        pending = asyncio.ensure_future(request)
        closed = asyncio.ensure_future(self._closed.wait())
        try:
            await asyncio.wait(
                {pending, closed}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            closed.cancel()
        if pending.done():
            return pending.result()
        pending.cancel()
        why = self.ended() or f"waited {seconds:.0f} s"
        raise NeverHappened(f"no answer: {what}: {why}")

    def _seconds(self, deadline: float | None) -> float:
        return self.deadline if deadline is None else deadline

    async def execute_command(self, command: str, *arguments: Any) -> Any:
        """workspace/executeCommand: a lowerd command's answer (JSON: dicts and lists)."""
        params = types.ExecuteCommandParams(command=command, arguments=list(arguments) or None)
        return await self.answer(self.client.workspace_execute_command_async(params), command)

    async def report(self, target: str) -> dict[str, Any]:
        """lowerd.report: the server's last result of the target (cache counts, sha256, ...)."""
        document = await self.execute_command("lowerd.report", target)
        [found] = document["targets"]
        return dict(found)

    # What the server sent ----------------------------------------------------------------------

    def diagnostics(self, relative: str) -> list[types.Diagnostic]:
        """What the editor shows for the file now."""
        return list(self.published.get(self.uri(relative), []))

    def started(self, target: str, since: int = 0) -> list[dict[str, Any]]:
        """lowerd/buildStarted's params for the target, from event `since` on."""
        return [
            e.params
            for e in self.events[since:]
            if isinstance(e, BuildStarted) and e.target == target
        ]

    def finished(self, target: str, since: int = 0) -> list[dict[str, Any]]:
        """lowerd/buildFinished's params of the target's current builds, from event `since`."""
        return [
            e.params
            for e in self.events[since:]
            if isinstance(e, BuildFinished) and e.target == target and e.current
        ]

    def refreshed(self, method: str, since: int = 0) -> bool:
        """Whether the server asked for that refresh (REFRESHES) from event `since` on."""
        return any(isinstance(e, Refresh) and e.method == method for e in self.events[since:])

    async def until(self, what: str, condition: Callable[[], T]) -> T:
        """Waits until the condition (on what the server sent) holds, and returns its value:
        checked now and again on each event; fails at the deadline or once the server ended."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.deadline
        while not (value := condition()):
            if (why := self.ended()) is not None:
                raise NeverHappened(f"never: {what}: {why}\nevents: {self.events[-20:]}")
            self._news.clear()
            try:
                await asyncio.wait_for(self._news.wait(), max(give_up - loop.time(), 0))
            except TimeoutError:
                waited = f"waited {self.deadline:.0f} s"
                events = self.events[-20:]
                raise NeverHappened(f"never: {what} ({waited})\nevents: {events}") from None
        return value

    async def built(self, target: str, since: int) -> dict[str, Any]:
        """The first current build result of the target from event `since` on."""
        found = await self.until(f"{target} built", lambda: self.finished(target, since))
        return found[0]

    # The client's handlers ---------------------------------------------------------------------

    def _register(self) -> None:
        # pygls passes a client's handler the params alone (the client too only to a first
        # parameter named `ls`).
        handlers: dict[str, Callable[[Any], Any]] = {
            types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS: self._on_publish,
            types.WINDOW_WORK_DONE_PROGRESS_CREATE: self._on_progress_create,
            types.PROGRESS: self._on_progress,
            types.WINDOW_LOG_MESSAGE: self._on_log,
            types.WORKSPACE_CONFIGURATION: self._on_configuration,
            BUILD_STARTED: lambda params: self._record(BuildStarted(_now(), _json(params))),
            BUILD_WRITTEN: lambda params: self._record(BuildWritten(_now(), _json(params))),
            BUILD_FINISHED: lambda params: self._record(BuildFinished(_now(), _json(params))),
        }
        handlers.update({method: self._on_refresh(method) for method in REFRESHES})
        for method, handler in handlers.items():
            self.client.feature(method)(_function(handler))

    def _record(self, event: ServerEvent) -> None:
        self.events.append(event)
        self._news.set()

    def _on_publish(self, params: types.PublishDiagnosticsParams) -> None:
        self.published[params.uri] = list(params.diagnostics)
        self._record(Published(_now(), params.uri, list(params.diagnostics)))

    def _on_progress_create(self, params: types.WorkDoneProgressCreateParams) -> None:
        self.progress.setdefault(params.token, [])

    def _on_progress(self, params: types.ProgressParams) -> None:
        raw = _json(params.value)
        kind = PROGRESS_KINDS.get(str(raw.get("kind")))
        if kind is None:
            return  # not a work-done progress: lowerd sends none other
        value = self.converter.structure(raw, kind)
        self.progress.setdefault(params.token, []).append(value)
        self._record(Progress(_now(), params.token, value))

    def _on_log(self, params: types.LogMessageParams) -> None:
        self.log_messages.append(params)

    def _on_configuration(self, params: types.ConfigurationParams) -> list[Any]:
        return [self.configuration.get(item.section or "") for item in params.items]

    def _on_refresh(self, method: str) -> Callable[[None], None]:
        def refreshed(params: None) -> None:
            self._record(Refresh(_now(), method))

        return refreshed


def _function(handle: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A handler as pygls registers it: a function (pygls marks it with attributes, which a
    bound method cannot carry)."""

    def handler(params: Any) -> Any:
        return handle(params)

    return handler


def _now() -> float:
    return time.perf_counter()


def _json(value: Any) -> dict[str, Any]:
    """A notification's params as JSON objects are: pygls hands over the params of a method it
    has no type for (lowerd's own) as namedtuples, nested."""
    plain = _plain(value)
    if not isinstance(plain, dict):
        raise TypeError(f"expected a JSON object, got {value!r}")
    return plain


def _plain(value: Any) -> Any:
    if hasattr(value, "_asdict"):
        return {key: _plain(item) for key, item in value._asdict().items()}
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value
