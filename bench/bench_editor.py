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

    .venv/bin/python -m bench.bench_editor              # full size: ~4 minutes (--repeat 3: ~10)
    .venv/bin/python -m bench.bench_editor --quick      # 2 blocks, d=64: smoke test

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

    .venv/bin/python -m bench.bench_editor --real resnet            # full size
    .venv/bin/python -m bench.bench_editor --real llama --small     # tiny configs: smoke test
    .venv/bin/python -m bench.bench_editor --real resnet --verify   # verify = true (issue 24)

With --verify the target declares `verify = true`: each build runs its .pte on the host runtime
after its result went out, and each save also gets `verified s`, the seconds from the build's
final diagnostics (lowerd/buildWritten, sent once they are published) to the verified numbers
(lowerd/buildFinished, whose result carries the verification).

Everything lives in a temp dir; the server imports a snapshot of lowerd's source taken at the
start. This is a script, not a test: nothing asserts on a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lsprotocol import types

# How the server marks the diagnostics of a provisional report (the last build's, shown while
# the edited program lowers): every message of it carries this note.
from lowerd.daemon.diagnostics import PROVISIONAL_NOTE

from bench.bench_incremental import (
    ENTRY,
    MODEL_FILE,
    TARGET,
    edits,
    model_constants,
    prepare_project,
)
from bench.bench_real import COMMENT, MODELS, SCENARIOS, RealModel, copy_real_project, edited
from bench.editor_report import STAGES, describe, describe_real, print_real_report, print_report
from bench.harness import (
    Processes,
    add_transformer_size,
    bench_env,
    check_snapshot_imported,
    declare_one_target,
    file_sha256,
    log,
    lowerd_revision,
    quick_size,
    snapshot_lowerd,
    workdir,
    write_json,
)
from testkit.lsp_driver import LspDriver, NeverHappened
from testkit.lsp_events import BuildFinished, BuildStarted, BuildWritten, Progress, Published

DEADLINE_SECONDS = 1800.0  # a guard against a hung server, never a measurement
SHUTDOWN_SECONDS = 60.0  # the same, for the server's shutdown and exit at the end
# After buildFinished, how long to wait for a publishDiagnostics the build may still cause (the
# server sends it right after buildFinished, in the same handler).
GRACE_SECONDS = 1.0
SETTLE_SECONDS = {"transformer": 3.0, "real": 10.0}  # --settle's default

Edit = tuple[str, str, Callable[[str], str]]  # (key, name, model source before -> after)
# bench_incremental's first three edits, each applied to the previous one's result: (a) a
# comment, (b) the weight edit, (c) an op inserted in block 0.
EDITS: list[Edit] = [
    (edit.key, f"({letter}) {edit.name}", edit.apply)
    for letter, edit in zip("abc", edits(1)[:3], strict=True)
]


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


def is_provisional(event: Published) -> bool:
    """The note ends a coverage message and sits in a not-delegated one's "(target...)"."""
    return any(PROVISIONAL_NOTE in d.message for d in event.diagnostics)


def stage_of(event: Progress) -> str | None:
    """The build stage a $/progress report names: "export forward", "preprocess 0/1", ..."""
    value = event.value
    if isinstance(value, types.WorkDoneProgressReport) and value.message:
        return value.message.split()[0]
    return None


# The editor: testkit's LSP driver on the workload's model, timestamps read after a save --------


class Editor(LspDriver):
    def __init__(self, project: Path, workload: Workload, logs: Path) -> None:
        super().__init__(project, DEADLINE_SECONDS, name="lowerd-bench-editor")
        self.workload = workload
        self.logs = logs

    async def start_server(
        self, env: dict[str, str], settings: dict[str, Any], progress: bool
    ) -> None:
        """`lowerd serve` started and initialized; with `progress`, the client accepts the
        server's $/progress (its build stages)."""
        await self.start(env=env, stderr=self.logs / "server.err")
        capabilities = types.ClientCapabilities(
            text_document=types.TextDocumentClientCapabilities(
                synchronization=types.TextDocumentSyncClientCapabilities(did_save=True),
                publish_diagnostics=types.PublishDiagnosticsClientCapabilities(),
            ),
            window=types.WindowClientCapabilities(work_done_progress=True) if progress else None,
        )
        await self.initialize(capabilities, settings)

    async def close(self) -> None:
        await super().close()
        with (self.logs / "server-log-messages.txt").open("w") as file:
            file.writelines(f"{m.type}: {m.message}\n" for m in self.log_messages)

    def open_model(self) -> None:
        self.open(self.workload.model_file)

    async def save_model(self, text: str) -> tuple[float, int]:
        """What an editor does: the buffer changes (didChange, while typing), then on save the
        file is written and didSave sent. Returns the moment of the save and the event mark."""
        self.change(self.workload.model_file, text)
        await asyncio.sleep(0.05)  # typing happened before the save
        mark = len(self.events)
        saved = time.perf_counter()
        self.write(self.workload.model_file, text)
        return saved, mark

    def finished_since(self, mark: int) -> BuildFinished | None:
        return next(
            (
                e
                for e in self.events[mark:]
                if isinstance(e, BuildFinished) and e.target == self.workload.target and e.current
            ),
            None,
        )

    def published_since(self, mark: int) -> list[Published]:
        """The publishDiagnostics for files of the project from event `mark` on."""
        project = self.root.as_uri()
        return [
            e for e in self.events[mark:] if isinstance(e, Published) and e.uri.startswith(project)
        ]

    def written_since(self, mark: int) -> BuildWritten | None:
        """lowerd/buildWritten: a verifying build's diagnostics are published, its program runs."""
        return next(
            (
                e
                for e in self.events[mark:]
                if isinstance(e, BuildWritten) and e.target == self.workload.target
            ),
            None,
        )

    def started_since(self, mark: int) -> BuildStarted | None:
        return next((e for e in self.events[mark:] if isinstance(e, BuildStarted)), None)

    def stage_since(self, mark: int, stage: str) -> Progress | None:
        return next(
            (e for e in self.events[mark:] if isinstance(e, Progress) and stage_of(e) == stage),
            None,
        )

    def provisional_since(self, mark: int) -> tuple[Published | None, Published | None, bool]:
        """For the save at `mark`: the first publishDiagnostics of a provisional report; the
        first one after the last provisional one (or after the save, if none came) from which
        no file of the project shows provisional diagnostics; and whether some file still shows
        them at the end (called after buildFinished and its grace period)."""
        showing: set[str] = set()  # the files whose last diagnostics are provisional
        first_provisional = replaced = None
        for event in self.published_since(mark):
            if is_provisional(event):
                showing.add(event.uri)
                first_provisional = first_provisional or event
                replaced = None
            else:
                showing.discard(event.uri)
                if not showing and replaced is None:
                    replaced = event
        return first_provisional, replaced, bool(showing)

    async def until_finished(self, mark: int) -> BuildFinished:
        """The target's first current lowerd/buildFinished from event `mark` on, awaited as it
        comes; then the grace period for a publishDiagnostics the build may still cause."""
        finished = await self.until("lowerd/buildFinished", lambda: self.finished_since(mark))
        await asyncio.sleep(GRACE_SECONDS)
        return finished


# The bench ---------------------------------------------------------------------------------


class Bench:
    def __init__(self, root: Path, args: argparse.Namespace):
        self.root = root
        self.args = args
        if args.real:
            self.workload = real_workload(MODELS[args.real])
            self.project = prepare_real_project(root, MODELS[args.real], args.small)
            if args.verify:  # the last table of the file is the target's
                with (self.project / "pyproject.toml").open("a") as config:
                    config.write("verify = true\n")
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
        editor = Editor(self.project, self.workload, self.logs)
        started = time.perf_counter()
        try:
            await editor.start_server(self.server_env(), settings, progress)
            first = await editor.until_finished(0)
            if first.params.get("status") != "ok":
                raise SystemExit(f"bench: the first build failed: {first.params}; see {self.logs}")
            report = await editor.report(self.workload.target)
            self.initial = {**report, "first_build_seconds": first.at - started}
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
            await editor.stop(SHUTDOWN_SECONDS)

    async def measure(self, editor: Editor, text: str) -> dict[str, Any]:
        saved, mark = await editor.save_model(text)
        finished = await editor.until_finished(mark)
        published = next(iter(editor.published_since(mark)), None)
        build_started = editor.started_since(mark)
        provisional, replaced, left = editor.provisional_since(mark)
        stages = {}
        for stage in STAGES:
            if (event := editor.stage_since(mark, stage)) is not None:
                stages[stage] = event.at - saved
        report = await editor.report(self.workload.target)
        output = report.get("output")
        written = editor.written_since(mark)
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
            # --verify: from the build's final diagnostics to its verification in the editor
            "verified_seconds": finished.at - written.at if written else None,
            "verdict": (report.get("verification") or {}).get("verdict"),
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
        _, mark = await editor.save_model(self.base_text)
        await editor.until_finished(mark)
        shutil.rmtree(self.cache)
        shutil.copytree(first_cache, self.cache)
        await asyncio.sleep(self.args.settle)


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
    parser.add_argument(
        "--verify",
        action="store_true",
        help="with --real: the target declares verify = true; each save also gets the seconds "
        "from the build's final diagnostics to the verified numbers",
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
    if args.verify and not args.real:
        parser.error("--verify declares verify = true on a real model: use it with --real")
    if args.settle is None:
        args.settle = SETTLE_SECONDS["real" if args.real else "transformer"]
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    with workdir("bench-editor-", args.keep) as root:
        bench = Bench(root, args)
        revision = lowerd_revision()
        try:
            asyncio.run(bench.run())
        except NeverHappened as error:
            raise SystemExit(f"bench: {error}; see {bench.logs}") from None
        (print_real_report if args.real else print_report)(bench, revision)
        if args.json:
            write_json(args.json, {"initial": bench.initial, "edits": bench.rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
