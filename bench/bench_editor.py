"""`lowerd serve` in an editor: time from didSave to the first diagnostics, against stock.

A real LSP client (pygls's LanguageClient) starts the real `python -m lowerd serve` over stdio in
a temp copy of bench/project that declares the transformer alone (6 blocks, d=256, 43 XNNPACK
partitions by default), with its own blob cache and runtime folder. It initializes, waits for
the first build (lowerd/buildFinished), opens the model file, and then saves three edits in
turn, each on top of the last, as a user would:

    (a) comment   a comment line inserted in Block.forward (every line below it moves, so the
                  not-delegated diagnostics must move too)
    (b) weight    EDITED_BLOCK_GAIN 1.0 -> 1.25: every parameter of one block changes
    (c) op        EXTRA_OP_BLOCKS = (0,): one torch.tanh inserted in block 0, inside an XNNPACK
                  partition

For each save it times, from just before the file is written (didChange was sent before; the
write is followed at once by didSave): the first textDocument/publishDiagnostics for a file of
the project, lowerd/buildStarted and lowerd/buildFinished. The server publishes only
diagnostics that changed, so an edit that changes none gets no publishDiagnostics at all; the
table says so, and buildFinished is then when the editor's state is final.

Stock is a stock ExecuTorch script (torch.export + to_edge_transform_and_lower + to_executorch)
run as a fresh process on the same edited state, timed as a whole process (imports included):
what re-running a lowering script after a save costs. Its .pte is compared with lowerd's.

The server runs with OMP_NUM_THREADS=1 (--server-omp-threads). Without it, the first build of
this model never ends: lowerd's fork server runs a parallel torch op while it warms up, which
starts GNU OpenMP's thread team, and a worker forked from it hangs in libgomp at its first
parallel op (here `parameter.mul_` in make(): d=256 tensors are past torch's grain size; the
--quick sizes are not). Stock runs with the environment as it is. --worker-timeout (default
300 s) makes a hung build end as an error instead of after the server's 600 s.

With --repeat N, the edits are made N times: between rounds the model is saved back to its
first state (the server rebuilds it, unmeasured) and the blob cache is put back as it was after
the first build, so that every round's edits miss the cache as the first round's did.

    .venv/bin/python bench/bench_editor.py              # full size: ~4 minutes (--repeat 3: ~10)
    .venv/bin/python bench/bench_editor.py --quick      # 2 blocks, d=64: smoke test

With --real MODEL (resnet or llama, or int8), the same editor session runs on a temp copy of
bench/real that declares that model alone (bench_real.py's models, --small for their tiny configs),
and saves bench_real.py's one-line edits of make() in turn, each on top of the last: comment-only,
head op, middle op, weight-only. The client also accepts the server's $/progress, so each save gets
a timeline of the build's stages. An edit whose program changed is first shown with the last
build's report moved to the new lines, marked provisional (lowerd's PROVISIONAL_NOTE in every
diagnostic's message), until the edited program is partitioned: for each save the table gives the
seconds to the first provisional publishDiagnostics, to the moment the editor shows only
diagnostics of the edited program again (its partitioned report, not provisional), and to
lowerd/buildFinished. Stock is bench_real.py's stock process (the model's libraries imported too):
its whole process, and its work after the imports.

    .venv/bin/python bench/bench_editor.py --real resnet            # full size
    .venv/bin/python bench/bench_editor.py --real llama --small     # tiny configs: smoke test

Everything lives in a temp dir; the server imports a snapshot of lowerd's source taken at the
start. This is a script, not a test: nothing asserts on a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.lsp.client import LanguageClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_incremental import (  # noqa: E402 - the bench folder is not a package
    ENTRY,
    MODEL_FILE,
    TARGET,
    edits,
    model_constants,
    prepare_project,
)
from bench_real import COMMENT, MODELS, SCENARIOS, RealModel, copy_real_project, edited  # noqa: E402
from harness import (  # noqa: E402
    Processes,
    add_transformer_size,
    bench_env,
    check_snapshot_imported,
    declare_one_target,
    file_sha256,
    installed_line,
    log,
    lowerd_revision,
    quick_size,
    render,
    reuse,
    snapshot_lowerd,
    verdicts,
    workdir,
    write_json,
)

# How the server marks the diagnostics of a provisional report (the last build's, shown while
# the edited program lowers): every message of it carries this note.
from lowerd.daemon.diagnostics import PROVISIONAL_NOTE  # noqa: E402

BUILD_STARTED, BUILD_FINISHED = "lowerd/buildStarted", "lowerd/buildFinished"
DEADLINE_SECONDS = 1800.0  # a guard against a hung server, never a measurement
# After buildFinished, how long to wait for a publishDiagnostics the build may still cause (the
# server sends it right after buildFinished, in the same handler).
GRACE_SECONDS = 1.0
COMMENT_GOAL_SECONDS = 1.5
EDIT_GOAL_RATIO = 0.5

PROVISIONAL_GOAL_SECONDS = 1.5  # issue 10 section 6: real models' one-line edits
SETTLE_SECONDS = {"transformer": 3.0, "real": 10.0}  # --settle's default

Edit = tuple[str, str, Callable[[str], str]]  # (key, name, model source before -> after)
# bench_incremental's first three edits, each applied to the previous one's result: (a) a
# comment, (b) the weight edit, (c) an op inserted in block 0.
EDITS: list[Edit] = [
    (edit.key, f"({letter}) {edit.name}", edit.apply)
    for letter, edit in zip("abc", edits(1)[:3], strict=True)
]
# The build stages the server reports in $/progress (real models only), in order.
STAGES = ("load", "export", "partition", "preprocess", "emit", "write")


@dataclass(frozen=True)
class Workload:
    """What the editor session builds and edits: bench/project's transformer, or a real model."""

    target: str
    model_file: str  # relative to the project: the file opened and edited
    entry: str
    edits: list[Edit]
    real: RealModel | None = None  # bench_real.py's model, or None for the transformer


def transformer_workload() -> Workload:
    return Workload(TARGET, MODEL_FILE, ENTRY, EDITS)


def real_workload(model: RealModel) -> Workload:
    """bench_real.py's scenarios after cold: each a line inserted in make()."""
    edits: list[Edit] = []
    for key, name in SCENARIOS:
        if key != "cold":
            line = COMMENT if key == "comment" else model.edits[key]
            edits.append((key, name, lambda text, line=line: edited(text, line)))
    return Workload(model.target, model.file, f"{model.file}:make", edits, model)


def prepare_real_project(root: Path, model: RealModel, small: bool) -> Path:
    """A copy of bench/real that declares the one model (the server builds every target)."""
    project = copy_real_project(root / "project", small)
    declare_one_target(project, model.target, f"{model.file}:make")
    return project


def is_provisional(params: types.PublishDiagnosticsParams) -> bool:
    """The note ends a coverage message and sits in a not-delegated one's "(target...)"."""
    return any(PROVISIONAL_NOTE in d.message for d in params.diagnostics)


# The editor: a client that timestamps what the server sends ---------------------------------


@dataclass
class Event:
    at: float  # time.perf_counter() when the client handled it
    kind: str  # "diagnostics", "started", "finished", "progress"
    uri: str | None = None
    params: dict[str, Any] = field(default_factory=dict)


class Editor:
    def __init__(
        self,
        project: Path,
        workload: Workload,
        env: dict[str, str],
        logs: Path,
        settings: dict[str, Any],
        progress: bool = False,
    ):
        self.project = project
        self.workload = workload
        self.progress = progress  # accept the server's $/progress (its build stages)
        self.settings = settings
        self.env = env
        self.logs = logs
        self.events: list[Event] = []
        self.version = 0
        self.client = LanguageClient("lowerd-bench-editor", "1")
        self._stderr_task: asyncio.Task | None = None
        self._register()

    def _register(self) -> None:
        # pygls passes a client's handler the params alone (the client too only to a first
        # parameter named `ls`).
        client = self.client

        @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def diagnostics(params: types.PublishDiagnosticsParams) -> None:
            found = {"count": len(params.diagnostics), "provisional": is_provisional(params)}
            self.events.append(Event(time.perf_counter(), "diagnostics", params.uri, found))

        @client.feature(types.WINDOW_WORK_DONE_PROGRESS_CREATE)
        def create_progress(params: types.WorkDoneProgressCreateParams) -> None:
            return None

        @client.feature(types.PROGRESS)
        def progress(params: types.ProgressParams) -> None:
            value = _plain(params.value) or {}
            if value.get("kind") == "report" and value.get("message"):
                stage = value["message"].split()[0]  # "export forward", "preprocess 0/1", ...
                self.events.append(Event(time.perf_counter(), "progress", params={"stage": stage}))

        @client.feature(BUILD_STARTED)
        def started(params: Any) -> None:
            self.events.append(Event(time.perf_counter(), "started", params=_as_dict(params)))

        @client.feature(BUILD_FINISHED)
        def finished(params: Any) -> None:
            self.events.append(Event(time.perf_counter(), "finished", params=_as_dict(params)))

        @client.feature(types.WINDOW_LOG_MESSAGE)
        def log_message(params: types.LogMessageParams) -> None:
            with (self.logs / "server-log-messages.txt").open("a") as file:
                file.write(f"{params.type}: {params.message}\n")

    @property
    def model(self) -> Path:
        return self.project / self.workload.model_file

    @property
    def uri(self) -> str:
        return self.model.as_uri()

    async def start(self) -> None:
        await self.client.start_io(
            sys.executable, "-m", "lowerd", "serve", cwd=str(self.project), env=self.env
        )
        server = self.client._server
        assert server is not None and server.stderr is not None
        self._stderr_task = asyncio.create_task(_drain(server.stderr, self.logs / "server.err"))
        root = self.project.as_uri()
        capabilities = types.ClientCapabilities(
            text_document=types.TextDocumentClientCapabilities(
                synchronization=types.TextDocumentSyncClientCapabilities(did_save=True),
                publish_diagnostics=types.PublishDiagnosticsClientCapabilities(),
            ),
            window=types.WindowClientCapabilities(work_done_progress=True)
            if self.progress
            else None,
        )
        await self.client.initialize_async(
            types.InitializeParams(
                capabilities=capabilities,
                root_uri=root,
                workspace_folders=[types.WorkspaceFolder(uri=root, name="project")],
                initialization_options={"lowerd": self.settings},
            )
        )
        self.client.initialized(types.InitializedParams())

    def open_model(self) -> None:
        self.version = 1
        text = self.model.read_text()
        item = types.TextDocumentItem(uri=self.uri, language_id="python", version=1, text=text)
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(item))

    async def save(self, text: str) -> tuple[float, int]:
        """What an editor does: the buffer changes (didChange, while typing), then on save the
        file is written and didSave sent. Returns the moment of the save and the event mark."""
        self.version += 1
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(
                    uri=self.uri, version=self.version
                ),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
            )
        )
        await asyncio.sleep(0.05)  # typing happened before the save
        mark = len(self.events)
        saved = time.perf_counter()
        self.model.write_text(text)
        self.client.text_document_did_save(
            types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(uri=self.uri))
        )
        return saved, mark

    def finished_since(self, mark: int) -> Event | None:
        return next(
            (
                e
                for e in self.events[mark:]
                if e.kind == "finished"
                and e.params.get("target") == self.workload.target
                and e.params.get("current")
            ),
            None,
        )

    def first_since(self, mark: int, kind: str) -> Event | None:
        project = self.project.as_uri()
        return next(
            (
                e
                for e in self.events[mark:]
                if e.kind == kind and (kind != "diagnostics" or (e.uri or "").startswith(project))
            ),
            None,
        )

    def stage_since(self, mark: int, stage: str) -> Event | None:
        return next(
            (e for e in self.events[mark:] if e.kind == "progress" and e.params["stage"] == stage),
            None,
        )

    def provisional_since(self, mark: int) -> tuple[Event | None, Event | None, bool]:
        """For the save at `mark`: the first publishDiagnostics of a provisional report; the
        first one after the last provisional one (or after the save, if none came) from which
        no file of the project shows provisional diagnostics; and whether some file still shows
        them at the end (called after buildFinished and its grace period)."""
        project = self.project.as_uri()
        showing: set[str] = set()  # the files whose last diagnostics are provisional
        first_provisional = replaced = None
        for event in self.events[mark:]:
            if event.kind != "diagnostics" or not (event.uri or "").startswith(project):
                continue
            if event.params["provisional"]:
                showing.add(event.uri or "")
                first_provisional = first_provisional or event
                replaced = None
            else:
                showing.discard(event.uri or "")
                if not showing and replaced is None:
                    replaced = event
        return first_provisional, replaced, bool(showing)

    async def until_finished(self, mark: int) -> Event:
        deadline = time.perf_counter() + DEADLINE_SECONDS
        while (found := self.finished_since(mark)) is None:
            server = self.client._server
            if server is not None and server.returncode is not None:
                raise SystemExit(f"bench: the server exited ({server.returncode}); see its log")
            if time.perf_counter() > deadline:
                raise SystemExit("bench: no lowerd/buildFinished before the deadline")
            await asyncio.sleep(0.01)
        await asyncio.sleep(GRACE_SECONDS)
        return found

    async def report(self) -> dict[str, Any]:
        """The server's last result of the target (lowerd.report): cache counts, sha256, ..."""
        document = await self.client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="lowerd.report", arguments=[self.workload.target])
        )
        return _plain(document)["targets"][0]

    async def stop(self) -> None:
        server = self.client._server
        try:
            await asyncio.wait_for(self.client.shutdown_async(None), 60)
            self.client.exit(None)
            if server is not None:
                await asyncio.wait_for(server.wait(), 60)
        except (TimeoutError, RuntimeError):
            if server is not None and server.returncode is None:
                server.terminate()  # the server this bench started, by its own handle
                await server.wait()
        await self.client.stop()
        if self._stderr_task:
            await self._stderr_task


async def _drain(stream: asyncio.StreamReader, path: Path) -> None:
    """The server's stderr to a file: an unread pipe would stall it once full."""
    with path.open("wb") as file:
        while chunk := await stream.read(65536):
            file.write(chunk)
            file.flush()


def _as_dict(params: Any) -> dict[str, Any]:
    if isinstance(params, dict):
        return params
    return dict(params._asdict()) if hasattr(params, "_asdict") else dict(vars(params))


def _plain(value: Any) -> Any:
    """pygls hands untyped JSON over as namedtuple-like objects: back to dicts and lists."""
    if hasattr(value, "_asdict"):
        return {k: _plain(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


# The bench ---------------------------------------------------------------------------------


class Bench:
    def __init__(self, root: Path, args: argparse.Namespace):
        self.root = root
        self.args = args
        if args.real:
            self.workload = real_workload(MODELS[args.real])
            self.project = prepare_real_project(root, MODELS[args.real], args.small)
        else:
            self.workload = transformer_workload()
            self.project = prepare_project(root, model_constants(args))
        self.lowerd_source = snapshot_lowerd(root)
        self.cache = root / "cache"
        self.runtime = root / "run"  # XDG_RUNTIME_DIR: the server's socket and status file
        self.logs = root / "logs"
        self.logs.mkdir()
        # The stock runs, each a fresh process on the model as it is now, timed from outside
        self.processes = Processes(root, cwd=self.project, env=self.env())
        self.model = self.project / self.workload.model_file
        self.base_text = self.model.read_text()
        self.rows: dict[str, list[dict[str, Any]]] = {key: [] for key, _, _ in self.workload.edits}
        self.initial: dict[str, Any] = {}

    def env(self) -> dict[str, str]:
        # nothing is downloaded anyway (as bench_real.py)
        offline = {"HF_HUB_OFFLINE": "1"} if self.workload.real else {}
        return bench_env(self.lowerd_source, self.cache, self.runtime, **offline)

    def server_env(self) -> dict[str, str]:
        """The server's environment: OMP_NUM_THREADS=N (default 1) works around the fork server's
        libgomp deadlock (see the module docstring); --server-omp-threads 0 leaves it as is."""
        env = self.env()
        if self.args.server_omp_threads:
            env["OMP_NUM_THREADS"] = str(self.args.server_omp_threads)
        return env

    def check_snapshot_is_imported(self) -> None:
        snapshot, server = self.lowerd_source, "lowerd.daemon.server"
        check_snapshot_imported(self.env(), self.project, snapshot, module=server)

    def stock(self) -> dict[str, Any]:
        """The stock worker as a fresh process on the model as it is now, timed from outside;
        for a real model, after its libraries are imported (bench_real.py's stock), so that its
        result splits imports from work."""
        output = self.root / "stock" / f"{self.processes.count + 1}.pte"
        output.parent.mkdir(exist_ok=True)
        spec: dict[str, Any] = {"project": str(self.project), "entry": self.workload.entry}
        spec["output"] = str(output)
        if self.workload.real:
            spec["libraries"] = list(self.workload.real.libraries)
        return self.processes.worker("stock", spec)

    async def run(self) -> None:
        self.check_snapshot_is_imported()
        settings = {"workerTimeout": self.args.worker_timeout}
        progress = self.workload.real is not None  # the transformer's session is as it was
        editor = Editor(
            self.project, self.workload, self.server_env(), self.logs, settings, progress
        )
        started = time.perf_counter()
        await editor.start()
        try:
            first = await editor.until_finished(0)
            if first.params.get("status") != "ok":
                raise SystemExit(f"bench: the first build failed: {first.params}; see {self.logs}")
            self.initial = {**await editor.report(), "first_build_seconds": first.at - started}
            log(f"  initial build: {first.at - started:.1f} s after the server started")
            editor.open_model()
            await asyncio.sleep(self.args.settle)
            first_cache = self.root / "cache-after-first-build"
            shutil.copytree(self.cache, first_cache)
            for round_ in range(self.args.repeat):
                if round_:
                    await self.back_to_start(editor, first_cache)
                for key, name, apply in self.workload.edits:
                    row = await self.measure(editor, apply(self.model.read_text()))
                    if row["status"] != "ok":
                        raise SystemExit(f"bench: the {name} build failed: {row}")
                    row["stock"] = self.stock()
                    self.rows[key].append(row)
                    text = describe_real(row) if self.workload.real else describe(row)
                    log(f"  {name}: {text}")
                    await asyncio.sleep(self.args.settle)
        finally:
            await editor.stop()

    async def measure(self, editor: Editor, text: str) -> dict[str, Any]:
        saved, mark = await editor.save(text)
        finished = await editor.until_finished(mark)
        published = editor.first_since(mark, "diagnostics")
        build_started = editor.first_since(mark, "started")
        provisional, replaced, left = editor.provisional_since(mark)
        stages = {}
        for stage in STAGES:
            if (event := editor.stage_since(mark, stage)) is not None:
                stages[stage] = event.at - saved
        report = await editor.report()
        output = report.get("output")
        return {
            "publish_seconds": published.at - saved if published else None,
            "provisional_seconds": provisional.at - saved if provisional else None,
            # The first publishDiagnostics after the provisional ones (or after the save) from
            # which the editor shows none: the partitioned report, or the build's result.
            "final_seconds": replaced.at - saved if replaced else None,
            "provisional_left": left,
            "stages": stages,
            "published_before_finished": bool(published and published.at <= finished.at),
            "started_seconds": build_started.at - saved if build_started else None,
            "finished_seconds": finished.at - saved,
            "status": finished.params.get("status"),
            "reused": finished.params.get("reused"),
            "build_seconds": report.get("seconds"),
            "cache": report.get("cache") or {},
            "sha256": file_sha256(self.project / output) if output else None,
            "reported_sha256": report.get("sha256"),
        }

    async def back_to_start(self, editor: Editor, first_cache: Path) -> None:
        """The model saved back as it was (the server rebuilds it: unmeasured), then the blob
        cache put back as after the first build, while the server is idle."""
        _, mark = await editor.save(self.base_text)
        await editor.until_finished(mark)
        shutil.rmtree(self.cache)
        shutil.copytree(first_cache, self.cache)
        await asyncio.sleep(self.args.settle)


def describe(row: dict[str, Any]) -> str:
    publish = row["publish_seconds"]
    first = f"{publish:.2f} s" if publish is not None else "none"
    cache = row["cache"]
    return (
        f"first publishDiagnostics {first}, buildFinished {row['finished_seconds']:.2f} s "
        f"(reused: {row['reused']}, {cache.get('misses', 0)} preprocessed, "
        f"{cache.get('hits', 0)} reused, {cache.get('rebased', 0)} rebased); "
        f"stock {row['stock']['wall_seconds']:.1f} s whole process"
    )


def describe_real(row: dict[str, Any]) -> str:
    def at(key: str) -> str:
        return f"{row[key]:.2f} s" if row[key] is not None else "none"

    stock = row["stock"]
    return (
        f"provisional {at('provisional_seconds')}, final {at('final_seconds')}, buildFinished "
        f"{row['finished_seconds']:.2f} s ({reuse(reuse_run(row))}); stock "
        f"{stock['wall_seconds']:.1f} s ({stock['seconds']:.1f} s work)"
    )


def reuse_run(row: dict[str, Any]) -> dict[str, Any]:
    """A row as bench_real.reuse() reads a build: cache counts and `reused`."""
    cache = row["cache"]
    return {
        "hits": cache.get("hits", 0),
        "misses": cache.get("misses", 0),
        "rebased": cache.get("rebased", 0),
        "reused": row["reused"],
    }


# Report ------------------------------------------------------------------------------------


def median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def seconds_cell(value: float | None, width: int) -> str:
    return f"{value:>{width}.2f}" if value is not None else f"{'none':>{width}}"


def save_medians(rows: list[dict[str, Any]]) -> tuple[float | None, float, float]:
    """Seconds from the save to the first publishDiagnostics (None: none came) and to
    buildFinished, and stock's whole process: medians over the rounds."""
    publish = median([r["publish_seconds"] for r in rows])
    finished = median([r["finished_seconds"] for r in rows])
    stock = median([r["stock"]["wall_seconds"] for r in rows])
    assert finished is not None and stock is not None
    return publish, finished, stock


def format_table(bench: Bench) -> str:
    head = (
        f"  {'edit':<16} {'publish s':>9} {'finished s':>10} {'stock s':>8} "
        f"{'publish/stk':>11} {'finished/stk':>12}  {'preproc.':>8} {'reused':>6} "
        f"{'rebased':>7}  {'kept .pte':>12}  {'= stock':>7}"
    )
    lines = [head]
    for key, name, _ in EDITS:
        rows = bench.rows[key]
        publish, finished, stock = save_medians(rows)
        ratio_publish = f"{publish / stock:>10.2f}x" if publish is not None else f"{'-':>11}"
        last = rows[-1]
        cache = last["cache"]
        same = all(r["sha256"] == r["stock"]["sha256"] for r in rows)
        lines.append(
            f"  {name:<16} {seconds_cell(publish, 9)} {finished:>10.2f} {stock:>8.2f} "
            f"{ratio_publish} {finished / stock:>11.2f}x  {cache.get('misses', 0):>8} "
            f"{cache.get('hits', 0):>6} {cache.get('rebased', 0):>7}  "
            f"{last['reused'] or '-':>12}  {'yes' if same else 'NO':>7}"
        )
    return "\n".join(lines)


def checks(bench: Bench) -> list[str]:
    found = []
    for key, name, _ in EDITS:
        rows = bench.rows[key]
        publish, finished, stock = save_medians(rows)
        shown, label = (publish, "first publishDiagnostics")
        if publish is None:
            shown, label = (finished, "no publishDiagnostics (none changed); buildFinished")
        if key == "comment":
            text = f"{name}: {label} {shown:.2f} s (goal <= {COMMENT_GOAL_SECONDS} s)"
            found.append((text, shown <= COMMENT_GOAL_SECONDS))
        else:
            text = (
                f"{name}: {label} {shown:.2f} s = {shown / stock:.2f}x stock's "
                f"{stock:.1f} s (goal <= {EDIT_GOAL_RATIO}x)"
            )
            found.append((text, shown / stock <= EDIT_GOAL_RATIO))
    rows = [r for key, _, _ in EDITS for r in bench.rows[key]]
    found.append(
        ("every build ended ok", all(r["status"] == "ok" for r in rows)),
    )
    found.append(
        (
            "lowerd's .pte equals stock's on every edited state",
            all(r["sha256"] == r["stock"]["sha256"] for r in rows),
        )
    )
    return verdicts(found)


def print_report(bench: Bench, revision: str) -> None:
    args = bench.args
    forward = (bench.initial.get("methods") or {}).get("forward") or {}
    note = f"medians of {args.repeat} rounds" if args.repeat > 1 else "one round"
    print(installed_line(revision, "lowerd serve"))
    print(
        f"transformer: {args.blocks} blocks, d={args.dim}, seq {args.seq}; "
        f"{len(forward.get('partitions') or [])} XNNPACK partitions, "
        f"{forward.get('ops_delegated')}/{forward.get('ops')} ops delegated; first build "
        f"{bench.initial.get('first_build_seconds', 0):.1f} s after the server started"
    )
    print(
        f"seconds from the save (file written, didSave sent) to the first publishDiagnostics "
        f"and to lowerd/buildFinished; stock = a fresh stock process, imports included ({note})"
    )
    print(format_table(bench))
    started = [r["started_seconds"] for key, _, _ in EDITS for r in bench.rows[key]]
    present = [s for s in started if s is not None]
    if present:
        print(
            f"  (didSave to lowerd/buildStarted: {min(present):.2f}-{max(present):.2f} s, the "
            f"scheduler's debounce included)"
        )
    print("\n".join(checks(bench)))


def real_table(bench: Bench) -> str:
    """Seconds from the save; ratios to stock's work after its imports (a warm session's)."""
    titles = [
        "scenario",
        "provisional s",
        "final s",
        "finished s",
        "stock proc s",
        "stock work s",
        "final/work",
        "finished/work",
        "preproc/reused/rebased",
        "= stock",
    ]
    rows = []
    for key, name, _ in bench.workload.edits:
        runs = bench.rows[key]
        provisional = median([r["provisional_seconds"] for r in runs])
        final = median([r["final_seconds"] for r in runs])
        finished = median([r["finished_seconds"] for r in runs])
        proc = median([r["stock"]["wall_seconds"] for r in runs])
        work = median([r["stock"]["seconds"] for r in runs])
        assert finished is not None and proc is not None and work is not None
        rows.append(
            [
                name,
                *(cell(value) for value in (provisional, final, finished, proc, work)),
                f"{final / work:.2f}x" if final is not None else "-",
                f"{finished / work:.2f}x",
                reuse(reuse_run(runs[-1])),
                "yes" if all(r["sha256"] == r["stock"]["sha256"] for r in runs) else "NO",
            ]
        )
    return render(titles, rows)


def timeline_table(bench: Bench) -> str:
    """When each thing happened after the save: the server's notifications, the build's stages
    ($/progress; a stage reported before the progress bar began is not seen: '-') and the
    diagnostics. `lower` is the stage lowerd calls "partition": edge generation, then the
    partitioner, whose report is `final`."""
    moments = [
        ("buildStarted", "started_seconds"),
        ("load", "load"),
        ("export", "export"),
        ("provisional", "provisional_seconds"),
        ("lower", "partition"),
        ("final", "final_seconds"),
        ("preprocess", "preprocess"),
        ("emit", "emit"),
        ("finished", "finished_seconds"),
    ]
    titles = ["scenario", *(title for title, _ in moments)]
    rows = []
    for key, name, _ in bench.workload.edits:
        runs = bench.rows[key]
        row = [name]
        for _, field_ in moments:
            if field_ in STAGES:
                values = [r["stages"].get(field_) for r in runs]
            else:
                values = [r[field_] for r in runs]
            row.append(cell(median(values), none="-"))
        rows.append(row)
    return render(titles, rows)


def cell(value: float | None, none: str = "none") -> str:
    return f"{value:.2f}" if value is not None else none


def real_checks(bench: Bench) -> list[str]:
    found = []
    for key, name, _ in bench.workload.edits:
        runs = bench.rows[key]
        firsts = [
            min(
                (s for s in (r["provisional_seconds"], r["final_seconds"]) if s is not None),
                default=None,
            )
            for r in runs
        ]
        first = median(firsts)
        label = "first diagnostics (provisional or final)"
        if first is None:
            first = median([r["finished_seconds"] for r in runs])
            label = "no publishDiagnostics (none changed); buildFinished"
        assert first is not None
        text = f"{name}: {label} {first:.2f} s (goal <= {PROVISIONAL_GOAL_SECONDS} s)"
        found.append((text, first <= PROVISIONAL_GOAL_SECONDS))
    rows = [r for key, _, _ in bench.workload.edits for r in bench.rows[key]]
    found.append(("every build ended ok", all(r["status"] == "ok" for r in rows)))
    found.append(
        (
            "every provisional report was replaced (none shown after buildFinished)",
            not any(r["provisional_left"] for r in rows),
        )
    )
    found.append(
        (
            "lowerd's .pte equals stock's on every edited state",
            all(r["sha256"] == r["stock"]["sha256"] for r in rows),
        )
    )
    found.append(
        (
            "lowerd's report names the sha256 of the file it left",
            all(r["sha256"] == r["reported_sha256"] for r in rows),
        )
    )
    return verdicts(found)


def print_real_report(bench: Bench, revision: str) -> None:
    args = bench.args
    model = bench.workload.real
    assert model is not None
    forward = (bench.initial.get("methods") or {}).get("forward") or {}
    note = f"medians of {args.repeat} rounds" if args.repeat > 1 else "one round"
    print(installed_line(revision, "lowerd serve"))
    if args.small:
        print("SMALL CONFIGS (--small): a smoke run of the script, not the benchmark's numbers")
    print(
        f"{model.target}: {model.small_title if args.small else model.title}\n"
        f"  {len(forward.get('partitions') or [])} XNNPACK partitions, "
        f"{forward.get('ops_delegated')}/{forward.get('ops')} ops delegated; first build "
        f"{bench.initial.get('first_build_seconds', 0):.1f} s after the server started"
    )
    print(
        "seconds from the save (file written, didSave sent) to the first provisional "
        "publishDiagnostics (the last build's report, marked), to the first after which the "
        "editor shows none provisional (final: the edited program's partitioned report or "
        "result; none = no diagnostic changed) and to lowerd/buildFinished; stock = a fresh "
        f"stock process: whole (proc) and after its imports (work) ({note})"
    )
    print(real_table(bench))
    print(f"  timeline, s after the save:\n{timeline_table(bench)}")
    print("\n".join(real_checks(bench)))


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_transformer_size(parser, "2 blocks, d=64, seq 16: smoke test")
    parser.add_argument(
        "--real",
        choices=list(MODELS),
        help="a real model of bench/real instead of the transformer (bench_real.py's edits)",
    )
    parser.add_argument(
        "--small", action="store_true", help="with --real: tiny configs, a smoke run"
    )
    parser.add_argument("--repeat", type=int, default=1, help="rounds of the edits")
    parser.add_argument(
        "--settle",
        type=float,
        help="seconds of quiet after each build before the next save (default 3; with --real "
        "10, so that the fork server has imported the model's libraries before the first edit)",
    )
    parser.add_argument(
        "--server-omp-threads",
        type=int,
        default=1,
        help="OMP_NUM_THREADS for the server and its workers (default 1; 0: unset, which "
        "deadlocks the workers, see above)",
    )
    parser.add_argument(
        "--worker-timeout",
        type=float,
        default=300,
        help="the server's workerTimeout setting, s (default 300): a hung build ends as an error",
    )
    parser.add_argument("--json", metavar="FILE", help="also write every measurement to FILE")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir, and say where")
    args = parser.parse_args(argv)
    quick_size(args)
    if args.blocks < 1 or args.repeat < 1:
        parser.error("--blocks and --repeat must be at least 1")
    if args.small and not args.real:
        parser.error("--small sizes the real models: use it with --real")
    if args.settle is None:
        args.settle = SETTLE_SECONDS["real" if args.real else "transformer"]
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    with workdir("bench-editor-", args.keep) as root:
        bench = Bench(root, args)
        revision = lowerd_revision()
        asyncio.run(bench.run())
        (print_real_report if args.real else print_report)(bench, revision)
        if args.json:
            write_json(args.json, {"initial": bench.initial, "edits": bench.rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
