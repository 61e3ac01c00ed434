"""Incremental rebuilds vs stock ExecuTorch, edit by edit, on the same inputs in one run.

On the bench transformer (bench/project/models/transformer.py, 6 blocks, d=256, 43 XNNPACK
partitions), starting from a cold build, each scenario is the next edit a user makes, measured
as the user meets it: a fresh process that starts from the blob cache and build records the
previous scenario left behind.

    cold          lowerd with an empty blob cache and no build records (the reference)
    no-op         `python -m lowerd build --json`, nothing changed: the whole process, timed
                  from outside, against the whole stock process (imports included)
    comment       a comment line inserted in Block.forward: every line after it moves
    weight        EDITED_BLOCK_GAIN 1.0 -> 1.25: every parameter of one block changes
    op, block 0   EXTRA_OP_BLOCKS = (0,): one torch.tanh inserted inside an XNNPACK partition
                  of the first block (every debug handle after it shifts)
    op, block N   EXTRA_OP_BLOCKS = (0, N): the same op inserted in the last block as well

Stock (torch.export + to_edge_transform_and_lower([XnnpackPartitioner()]) + to_executorch(),
fresh process) is re-measured on every state, and its .pte compared with lowerd's by sha256.
Except no-op, times are seconds of work after imports: lowerd's TargetResult.seconds against
stock's export + lower + emit. One more, unmeasured, cProfile'd rebuild of the block-0 edit says
where its time goes.

    .venv/bin/python bench/bench_incremental.py              # full size: ~6 minutes
    .venv/bin/python bench/bench_incremental.py --quick      # 2 blocks, d=64: smoke test
    .venv/bin/python bench/bench_incremental.py --repeat 3   # medians of 3 everywhere: ~15 min

Everything a run writes (project copy, caches, build records, .pte files, logs, profiles) lives
in a temp dir; the workers import a snapshot of lowerd's source taken at the start. This is a
script, not a test: nothing asserts on a timing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Helpers shared with bench_build.py (the bench folder is not a package; this file's folder
# is on sys.path when it runs, as a script or as a worker).
from bench_build import (  # noqa: E402
    file_sha256,
    load_entry,
    log,
    lowerd_revision,
    snapshot_lowerd,
)

BENCH_DIR = Path(__file__).resolve().parent
PROJECT = BENCH_DIR / "project"
REPO = BENCH_DIR.parent
TARGET = "transformer"
ENTRY = "models/transformer.py:make"
MODEL_FILE = "models/transformer.py"
OUT_DIR = "build"  # out_dir in bench/project/pyproject.toml

# Goals (from the issue); the report gives each a verdict, nothing fails on them.
NO_OP_GOAL_SECONDS = 0.5
COMMENT_GOAL_RATIO = 0.1
REUSED_GOAL = 0.9


# The project and its edits -------------------------------------------------------------------


def set_constant(text: str, name: str, value: str) -> str:
    """`NAME = ...` rewritten as a user editing the file would."""
    new, count = re.subn(rf"^{name} = .*$", f"{name} = {value}", text, flags=re.MULTILINE)
    if count != 1:
        raise SystemExit(f"bench: expected one `{name} = ...` line in {MODEL_FILE}, found {count}")
    return new


_FORWARD_FIRST_LINE = '        x = self.clamp("attn_out", x + self.attention('


def insert_comment(text: str) -> str:
    """A comment line at the top of Block.forward: the program is unchanged, but every line
    below it (the clamps lowerd reports as not delegated) moves down by one."""
    at = text.find(_FORWARD_FIRST_LINE)
    if at < 0:
        raise SystemExit(f"bench: Block.forward's first line not found in {MODEL_FILE}")
    comment = "        # Residual attention, then the MLP (a comment-only edit by the bench).\n"
    return text[:at] + comment + text[at:]


@dataclass(frozen=True)
class Edit:
    key: str
    name: str
    apply: Callable[[str], str]  # model source before -> after


def edits(blocks: int) -> list[Edit]:
    """The edits in the order a user makes them; each applies to the previous one's source."""
    last = blocks - 1
    both = f"(0, {last})" if last else "(0,)"
    return [
        Edit("comment", "comment", insert_comment),
        Edit("weight", "weight", lambda t: set_constant(t, "EDITED_BLOCK_GAIN", "1.25")),
        Edit(
            "op-first",
            "op, block 0",
            lambda t: set_constant(t, "EXTRA_OP_BLOCKS", "(0,)"),
        ),
        Edit(
            "op-last",
            f"op, block {last}",
            lambda t: set_constant(t, "EXTRA_OP_BLOCKS", both),
        ),
    ]


def model_constants(args: argparse.Namespace) -> dict[str, str]:
    return {
        "BLOCKS": str(args.blocks),
        "DIM": str(args.dim),
        "SEQ": str(args.seq),
        "EDITED_BLOCK": str(min(3, args.blocks - 1)),
    }


def prepare_project(root: Path, constants: dict[str, str]) -> Path:
    """A copy of bench/project that declares the transformer alone, sized by the constants."""
    project = root / "project"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns("__pycache__", "build"))
    (project / "pyproject.toml").write_text(
        "[tool.lowerd]\n"
        'backends = ["xnnpack"]\n'
        f'out_dir = "{OUT_DIR}"\n\n'
        f"[tool.lowerd.targets.{TARGET}]\n"
        f'entry = "{ENTRY}"\n'
    )
    model = project / MODEL_FILE
    text = model.read_text()
    for name, value in constants.items():
        text = set_constant(text, name, value)
    model.write_text(text)
    return project


# Workers: each run is one fresh process --------------------------------------------------------


class StageClock:
    """Seconds per stage, from the moments stages start (lowerd's progress callback)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._current: str | None = None
        self._since = time.perf_counter()

    def mark(self, stage: str) -> None:
        if stage == self._current:
            return
        self.stop()
        self._current, self._since = stage, time.perf_counter()

    def stop(self) -> None:
        if self._current is not None:
            elapsed = time.perf_counter() - self._since
            self.seconds[self._current] = self.seconds.get(self._current, 0.0) + elapsed
        self._current = None

    def progress(self, stage: str, _target: str, _detail: str | None) -> None:
        self.mark(stage)


def stock_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Stock ExecuTorch, as a user's script would lower the model."""
    started = time.perf_counter()
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    imported = time.perf_counter()
    clock = StageClock()
    clock.mark("load")
    model, example_args = load_entry(Path(spec["project"]), spec["entry"])()
    clock.mark("export")
    exported = {"forward": torch.export.export(model, example_args)}
    clock.mark("lower")
    edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
    clock.mark("emit")
    buffer = bytes(edge.to_executorch().buffer)
    clock.stop()
    finished = time.perf_counter()
    Path(spec["output"]).write_bytes(buffer)
    return {
        "import_seconds": imported - started,
        "seconds": finished - imported,
        "stages": clock.seconds,
        "sha256": hashlib.sha256(buffer).hexdigest(),
        "partitions": count_delegates(edge.exported_program("forward").graph_module),
    }


def count_delegates(graph_module: Any) -> int:
    from executorch.exir.lowered_backend_module import LoweredBackendModule

    nodes = graph_module.graph.nodes
    found = (getattr(graph_module, n.target, None) for n in nodes if n.op == "get_attr")
    return sum(1 for m in found if isinstance(m, LoweredBackendModule))


def lowerd_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """build_target as `lowerd build` calls it, after the imports stock pays before its work."""
    started = time.perf_counter()
    import executorch.exir  # noqa: F401 - stock imports it before its clock starts
    import torch  # noqa: F401
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import (  # noqa: F401
        XnnpackPartitioner,
    )

    import lowerd
    import lowerd.lowering.preprocess_cache  # noqa: F401 - build_target imports these lazily
    import lowerd.lowering.reasons  # noqa: F401
    import lowerd.lowering.report  # noqa: F401
    from lowerd.lowering.build import build_target
    from lowerd.lowering.config import load_config, select_targets
    from lowerd.lowering.project_store import store_for

    imported = time.perf_counter()
    clock = StageClock()
    profile = None
    if spec.get("profile"):
        import cProfile

        profile = cProfile.Profile()
        profile.enable()
    config = load_config(Path(spec["project"]) / "pyproject.toml")
    [target] = select_targets(config, [TARGET])
    result = build_target(config, target, store_for(config), clock.progress)
    clock.stop()
    finished = time.perf_counter()
    if profile is not None:
        profile.disable()
        profile.dump_stats(spec["profile"])
    report = result.to_json()
    if report["status"] != "ok":
        raise SystemExit(f"lowerd build failed: {json.dumps(report['error'])}")
    forward = report["methods"]["forward"]
    return {
        "import_seconds": imported - started,
        "seconds": result.seconds,  # TargetResult.seconds: what lowerd reports as the build
        "work_seconds": finished - imported,  # plus config loading and opening the store
        "stages": clock.seconds,
        "sha256": file_sha256(report["output"]),  # the bytes on disk are what is compared
        "reported_sha256": report["sha256"],
        "hits": result.cache_hits,
        "misses": result.cache_misses,
        "rebased": result.cache_rebased,
        "partitions": len(forward["partitions"]),
        "ops": forward["ops"],
        "ops_delegated": forward["ops_delegated"],
        "reused": result.reused,
        "lowerd_source": str(Path(lowerd.__file__).parent),
    }


def run_worker(kind: str, spec: dict[str, Any]) -> None:
    worker = stock_worker if kind == "stock" else lowerd_worker
    Path(spec["result"]).write_text(json.dumps(worker(spec)))


# The bench ---------------------------------------------------------------------------------


@dataclass
class Runs:
    """The runs of one scenario, lowerd's and stock's on the same state."""

    key: str
    name: str
    lowerd: list[dict[str, Any]] = field(default_factory=list)
    stock: list[dict[str, Any]] = field(default_factory=list)

    @staticmethod
    def median(runs: list[dict[str, Any]], key: str) -> float:
        return statistics.median(run[key] for run in runs)

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "name": self.name, "lowerd": self.lowerd, "stock": self.stock}


class Bench:
    """Runs every scenario in fresh processes under one temp dir.

    lowerd's state between builds is the blob cache and its build records (in out_dir, next to
    the .pte). Before each edit the state is saved; every repeated run of the edit starts from
    it, so that repeats see what the first run saw, and the next edit starts from what the last
    run left.
    """

    def __init__(self, root: Path, args: argparse.Namespace):
        self.root = root
        self.args = args
        self.project = prepare_project(root, model_constants(args))
        self.lowerd_source = snapshot_lowerd(root)
        self.cache = root / "cache"
        self.runtime = root / "run"  # XDG_RUNTIME_DIR: no daemon of the user's is asked
        self.runtime.mkdir(mode=0o700)
        self.model = self.project / MODEL_FILE
        self._runs = 0
        self.results: dict[str, Runs] = {}
        self.profile_path: Path | None = None

    # State

    @property
    def out_dir(self) -> Path:
        return self.project / OUT_DIR

    def save_state(self, name: str) -> Path:
        saved = self.root / "states" / name
        shutil.copytree(self.cache, saved / "cache")
        shutil.copytree(self.out_dir, saved / OUT_DIR)
        return saved

    def restore_state(self, saved: Path | None) -> None:
        shutil.rmtree(self.cache, ignore_errors=True)
        shutil.rmtree(self.out_dir, ignore_errors=True)
        if saved is not None:
            shutil.copytree(saved / "cache", self.cache)
            shutil.copytree(saved / OUT_DIR, self.out_dir)

    # Processes

    def env(self) -> dict[str, str]:
        path = os.pathsep.join(
            filter(None, [str(self.lowerd_source), os.environ.get("PYTHONPATH")])
        )
        env = {**os.environ, "PYTHONPATH": path, "LOWERD_CACHE_DIR": str(self.cache)}
        env["XDG_RUNTIME_DIR"] = str(self.runtime)
        env.pop("LOWERD_LOG_LEVEL", None)
        return env

    def run_process(self, command: list[str], kind: str, stdout: Path | None = None) -> float:
        """Seconds from start to exit; stderr (and stdout unless captured) to a log file."""
        self._runs += 1
        log_path = self.root / "logs" / f"{self._runs}-{kind}.log"
        log_path.parent.mkdir(exist_ok=True)
        with log_path.open("w") as log_file:
            out = stdout.open("w") if stdout else log_file
            try:
                started = time.perf_counter()
                # The cwd is the project copy, as for a user: nothing lands in the repo.
                done = subprocess.run(
                    command, cwd=self.project, env=self.env(), stdout=out, stderr=log_file
                )
                wall = time.perf_counter() - started
            finally:
                if stdout:
                    out.close()
        if done.returncode != 0:
            tail = "".join(log_path.read_text().splitlines(keepends=True)[-30:])
            raise SystemExit(f"bench: a {kind} run failed:\n{tail}")
        return wall

    def spawn(self, kind: str, **spec: Any) -> dict[str, Any]:
        result = self.root / "results" / f"{self._runs + 1}-{kind}.json"
        result.parent.mkdir(exist_ok=True)
        spec.update(project=str(self.project), result=str(result), entry=ENTRY)
        command = [sys.executable, str(Path(__file__).resolve()), f"--{kind}-worker"]
        wall = self.run_process([*command, json.dumps(spec)], kind)
        run = {**json.loads(result.read_text()), "wall_seconds": wall}
        source = run.get("lowerd_source")
        if source and not Path(source).is_relative_to(self.lowerd_source):
            raise SystemExit(f"bench: a worker imported lowerd from {source}, not the snapshot")
        return run

    def stock(self) -> dict[str, Any]:
        output = self.root / "stock" / f"{self._runs + 1}.pte"
        output.parent.mkdir(exist_ok=True)
        return self.spawn("stock", output=str(output))

    def lowerd(self, profile: Path | None = None) -> dict[str, Any]:
        return self.spawn("lowerd", profile=str(profile) if profile else None)

    def cli(self) -> dict[str, Any]:
        """`python -m lowerd build --json transformer`, timed from outside."""
        output = self.root / "results" / f"{self._runs + 1}-cli.json"
        output.parent.mkdir(exist_ok=True)
        command = [sys.executable, "-m", "lowerd", "build", "--json", TARGET]
        wall = self.run_process(command, "cli", stdout=output)
        [target] = json.loads(output.read_text())["targets"]
        return {
            "seconds": wall,
            "wall_seconds": wall,
            "lowerd_seconds": target["seconds"],
            "sha256": file_sha256(self.project / target["output"])
            if target.get("output")
            else None,
            "reported_sha256": target["sha256"],
            "hits": target["cache"]["hits"],
            "misses": target["cache"]["misses"],
            "rebased": target["cache"].get("rebased", 0),
            "reused": target.get("reused"),
        }

    # Scenarios

    def run(self) -> dict[str, Runs]:
        repeat, cheap = self.args.repeat, max(self.args.repeat, self.args.cheap_repeat)
        cold = self.scenario("cold", "cold", repeat, start=None, runs=self.lowerd)
        self.scenario("no-op", "no-op (CLI)", cheap, start=cold, runs=self.cli, stock=False)
        # The no-op's baseline is stock run again on the same, unedited state: the cold one.
        self.results["no-op"].stock = self.results["cold"].stock
        state = cold
        for edit in edits(self.args.blocks):
            self.model.write_text(edit.apply(self.model.read_text()))
            times = cheap if edit.key == "comment" else repeat
            profile = self.args.profile and edit.key == "op-first"
            state = self.scenario(edit.key, edit.name, times, state, self.lowerd, profile=profile)
        return self.results

    def scenario(
        self,
        key: str,
        name: str,
        times: int,
        start: Path | None,
        runs: Callable[[], dict[str, Any]],
        stock: bool = True,
        profile: bool = False,
    ) -> Path:
        """Runs lowerd `times` times from the start state (and stock as often, interleaved);
        returns the state the last lowerd run left, where the next scenario starts."""
        found = self.results[key] = Runs(key, name)
        stock_times = self.args.repeat if stock else 0
        for round_ in range(max(times, stock_times)):
            if round_ < stock_times:
                found.stock.append(self.stock())
                log(f"  {name}: stock {describe(found.stock[-1])}")
            if round_ < times:
                self.restore_state(start)
                found.lowerd.append(runs())
                log(f"  {name}: lowerd {describe(found.lowerd[-1])}")
        if profile:  # unmeasured: the same rebuild again, under cProfile
            self.profile_path = self.root / f"{key}.prof"
            self.restore_state(start)
            self.lowerd(profile=self.profile_path)
            log(f"  {name}: profiled into {self.profile_path}")
        return self.save_state(key)


def describe(run: dict[str, Any]) -> str:
    if "import_seconds" not in run:
        return f"{run['wall_seconds']:.2f} s whole process (reused: {run.get('reused')})"
    text = f"{run['seconds']:.2f} s (+{run['import_seconds']:.1f} s imports"
    if "hits" in run:
        text += f", {run['misses']} preprocessed, {run['hits']} reused ({run['rebased']} rebased)"
    if run.get("reused"):
        text += f", reused: {run['reused']}"
    return text + ")"


# Report ------------------------------------------------------------------------------------


def ratio_of(scenario: Runs) -> float:
    """lowerd over stock: whole processes for the no-op, seconds of work otherwise."""
    key = "wall_seconds" if scenario.key == "no-op" else "seconds"
    return Runs.median(scenario.lowerd, key) / Runs.median(scenario.stock, key)


def reuse_cells(run: dict[str, Any]) -> tuple[str, str, str, str]:
    """preprocessed, reused, rebased, reused % (of the partitions in the .pte)."""
    if run.get("reused"):  # the .pte was kept: no partition was looked at
        return "0", "all", "-", f"{run['reused']}"
    total = run["hits"] + run["misses"]
    share = f"{100 * run['hits'] / total:.0f} %" if total else "-"
    return str(run["misses"]), str(run["hits"]), str(run["rebased"]), share


def spread(runs: list[dict[str, Any]], key: str) -> str:
    values = [run[key] for run in runs]
    return f"{min(values):.2f}-{max(values):.2f}" if len(values) > 1 else "-"


def format_table(results: dict[str, Runs]) -> str:
    head = (
        f"  {'scenario':<13} {'lowerd s':>9} {'stock s':>8} {'x stock':>8}  "
        f"{'preproc.':>8} {'reused':>6} {'rebased':>7} {'reused %':>14}  {'= stock':>7}"
        f"  {'lowerd min-max':>14} {'stock min-max':>14}"
    )
    lines = [head]
    for scenario in results.values():
        key = "wall_seconds" if scenario.key == "no-op" else "seconds"
        lowerd = Runs.median(scenario.lowerd, key)
        stock = Runs.median(scenario.stock, key)
        last = scenario.lowerd[-1]
        same = all(run["sha256"] == scenario.stock[-1]["sha256"] for run in scenario.lowerd)
        cells = reuse_cells(last)
        lines.append(
            f"  {scenario.name:<13} {lowerd:>9.2f} {stock:>8.2f} {ratio_of(scenario):>7.3f}x  "
            f"{cells[0]:>8} {cells[1]:>6} {cells[2]:>7} {cells[3]:>14}  "
            f"{'yes' if same else 'NO':>7}  {spread(scenario.lowerd, key):>14} "
            f"{spread(scenario.stock, key):>14}"
        )
    return "\n".join(lines)


def stage_table(results: dict[str, Runs]) -> str:
    """Where each lowerd run's seconds went, by lowerd's progress stages (medians)."""
    stages = ("load", "export", "partition", "preprocess", "emit", "write")
    lines = ["  " + f"{'lowerd stages':<13} " + " ".join(f"{s:>10}" for s in stages)]
    for scenario in results.values():
        if scenario.key == "no-op":
            continue
        cells = []
        for stage in stages:
            values = [run["stages"].get(stage, 0.0) for run in scenario.lowerd]
            cells.append(f"{statistics.median(values):>10.2f}")
        lines.append(f"  {scenario.name:<13} " + " ".join(cells))
    stock = [run for scenario in results.values() for run in scenario.stock]
    cells = [f"{statistics.median(r['stages'].get(s, 0.0) for r in stock):>10.2f}" for s in stages]
    cells[stages.index("partition")] = (
        f"{statistics.median(r['stages']['lower'] for r in stock):>10.2f}"
    )
    cells[stages.index("preprocess")] = f"{'(in part.)':>10}"
    lines.append(f"  {'stock (all)':<13} " + " ".join(cells))
    return "\n".join(lines)


def checks(results: dict[str, Runs]) -> list[str]:
    no_op = Runs.median(results["no-op"].lowerd, "wall_seconds")
    comment = ratio_of(results["comment"])
    found = [
        (
            f"no-op lowerd build: {no_op:.2f} s whole process (goal <= {NO_OP_GOAL_SECONDS} s)",
            no_op <= NO_OP_GOAL_SECONDS,
        ),
        (
            f"comment-only edit: {comment:.3f}x stock lowering (goal <= {COMMENT_GOAL_RATIO}x)",
            comment <= COMMENT_GOAL_RATIO,
        ),
    ]
    for scenario in results.values():
        if not scenario.key.startswith("op-"):
            continue
        last = scenario.lowerd[-1]
        total = last["hits"] + last["misses"]
        share = last["hits"] / total if total else 0.0
        found.append(
            (
                f"{scenario.name}: {last['hits']} of {total} partitions reused "
                f"({100 * share:.0f} %, goal >= {100 * REUSED_GOAL:.0f} %)",
                share >= REUSED_GOAL,
            )
        )
    same = all(
        run["sha256"] == scenario.stock[-1]["sha256"]
        for scenario in results.values()
        for run in scenario.lowerd
    )
    found.append(("every lowerd .pte equals stock's on the same state", same))
    reported = all(
        run["sha256"] == run["reported_sha256"]
        for scenario in results.values()
        for run in scenario.lowerd
    )
    found.append(("lowerd's reports name the sha256 of the files it left", reported))
    shas = [results[key].stock[-1]["sha256"] for key in results if key != "no-op"]
    found.append(
        ("each edit but the comment changed stock's .pte", len(set(shas)) == len(shas) - 1)
    )
    return [f"  [{'ok' if good else '!!'}] {text}" for text, good in found]


# The profile of the structural edit ----------------------------------------------------------

Function = tuple[str, str]  # (a suffix of its file's path, its name)
_PROGRAM = "executorch/exir/program/_program.py"
_GEN_EDGE: Function = (_PROGRAM, "_gen_edge_manager_for_partitioners")
_CACHED: Function = ("lowerd/lowering/preprocess_cache.py", "_cached")


@dataclass(frozen=True)
class Bucket:
    """One line of the profile summary: the cumulative seconds of some functions, all their
    calls or (with `caller`) only those made directly by that function."""

    label: str
    functions: tuple[Function, ...]
    caller: Function | None = None
    depth: int = 0


PROFILE_BUCKETS = [
    Bucket("load entry (import the model, make())", (("lowering/entry.py", "load_entry"),)),
    Bucket(
        "torch.export.export of the model",
        (("torch/export/__init__.py", "export"),),
        caller=("lowerd/lowering/build.py", "_export"),
    ),
    Bucket(
        "program fingerprint (whole-graph key)",
        (("lowering/program_fingerprint.py", "fingerprint"),),
    ),
    Bucket("to_edge_transform_and_lower", ((_PROGRAM, "to_edge_transform_and_lower"),)),
    Bucket("edge generation (_gen_edge_manager_for_partitioners)", (_GEN_EDGE,), depth=1),
    Bucket(
        "run_decompositions over the whole graph",
        (("torch/export/exported_program.py", "wrapper"),),
        caller=_GEN_EDGE,
        depth=2,
    ),
    Bucket(
        "_generate_edge_program (edge dialect passes)",
        ((_PROGRAM, "_generate_edge_program"),),
        caller=_GEN_EDGE,
        depth=2,
    ),
    Bucket("to_backend (partition, preprocess, splice)", ((_PROGRAM, "to_backend"),), depth=1),
    Bucket(
        "partitioner.partition (+ lowerd's early report)",
        (("lowerd/lowering/build.py", "partition_and_report"),),
        depth=2,
    ),
    Bucket(
        "cut the partitions out (_create_partitions)",
        (("executorch/exir/backend/backend_api.py", "_create_partitions"),),
        depth=2,
    ),
    Bucket(
        "deep copies of every partition's program for preprocess",
        (("executorch/exir/backend/backend_details.py", "copy_exported_program_for_preprocess"),),
        depth=2,
    ),
    Bucket("preprocess through lowerd's cache", (_CACHED,), depth=2),
    Bucket(
        "partition keys (key_details)",
        (("lowerd/lowering/partition_key.py", "key_details"),),
        caller=_CACHED,
        depth=3,
    ),
    Bucket("blob store reads", (("lowerd/lowering/preprocess_cache.py", "_load"),), depth=3),
    Bucket("rebase", (("lowerd/lowering/rebase.py", "rebase"),), caller=_CACHED, depth=3),
    Bucket(
        "XNNPACK preprocess of the misses",
        (("executorch/backends/xnnpack/xnnpack_preprocess.py", "preprocess"),),
        depth=3,
    ),
    Bucket(
        "of which pattern graphs (sdpa, bilinear: once per process)",
        (
            ("xnnpack/partition/graphs/sdpa.py", "get_graphs"),
            ("xnnpack/partition/graphs/bilinear_2d.py", "get_graphs_dict"),
        ),
        depth=4,
    ),
    Bucket("blob store writes", (("lowerd/cache/store.py", "put"),), depth=3),
    Bucket(
        "checks after lowering (_sanity_check_graph_for_non_decomp_ops)",
        ((_PROGRAM, "_sanity_check_graph_for_non_decomp_ops"),),
        depth=1,
    ),
    Bucket("delegation report (method_report)", (("lowerd/lowering/report.py", "method_report"),)),
    Bucket("emit (to_executorch, buffer)", (("lowerd/lowering/build.py", "_emit"),)),
    Bucket("write the .pte", (("lowerd/lowering/build.py", "write_atomic"),)),
    Bucket("record the build state", (("lowerd/lowering/build.py", "_record_state"),)),
]


def _matches(key: tuple[str, int, str], function: Function) -> bool:
    return key[2] == function[1] and key[0].endswith(function[0])


def bucket_seconds(stats: dict, bucket: Bucket) -> tuple[float, int]:
    """(cumulative seconds, calls) of the bucket's functions; cProfile counts a recursion once."""
    seconds, calls = 0.0, 0
    for key, (_cc, nc, _tt, ct, callers) in stats.items():
        if not any(_matches(key, function) for function in bucket.functions):
            continue
        if bucket.caller is None:
            seconds, calls = seconds + ct, calls + nc
            continue
        for caller, (_ccc, caller_nc, _ctt, caller_ct) in callers.items():
            if _matches(caller, bucket.caller):
                seconds, calls = seconds + caller_ct, calls + caller_nc
    return seconds, calls


def profile_summary(path: Path, measured: float) -> str:
    """Where the profiled rebuild's time went; seconds also scaled to the measured run."""
    import pstats

    stats = pstats.Stats(str(path)).stats  # {(file, line, name): (cc, nc, tt, ct, callers)}
    total, _ = bucket_seconds(stats, Bucket("", (("lowering/build.py", "build_target"),)))
    lines = [
        f"  cProfile'd rebuild: build_target {total:.2f} s under the profiler, {measured:.2f} s "
        f"measured; cumulative seconds, share, and the share of the measured run",
    ]
    for bucket in PROFILE_BUCKETS:
        seconds, calls = bucket_seconds(stats, bucket)
        label = "  " * bucket.depth + bucket.label
        if not calls:
            lines.append(f"    {label:<72} {'-':>7}")
            continue
        share = seconds / total if total else 0.0
        lines.append(
            f"    {label:<72} {seconds:>6.2f} s {100 * share:>5.1f} % {share * measured:>6.2f} s"
            f"  ({calls} calls)"
        )
    return "\n".join(lines)


# Output ------------------------------------------------------------------------------------


def print_report(bench: Bench, revision: str) -> None:
    results, args = bench.results, bench.args
    cold = results["cold"]
    first = cold.lowerd[-1]
    partitions = cold.stock[-1]["partitions"]
    note = f"medians of {args.repeat} runs" if args.repeat > 1 else "one run each"
    print(f"\nlowerd {revision}; torch and executorch as installed in {sys.prefix}")
    print(
        f"transformer: {args.blocks} blocks, d={args.dim}, seq {args.seq}; {partitions} XNNPACK "
        f"partitions, {first['ops_delegated']}/{first['ops']} ops delegated"
    )
    print(
        f"seconds: no-op = whole process (python start + imports + build); the others = work "
        f"after imports, lowerd's TargetResult.seconds vs stock's export + lower + emit "
        f"({note}; no-op and comment: medians of {max(args.repeat, args.cheap_repeat)})"
    )
    print(format_table(results))
    print("\n".join(checks(results)))
    print(f"\n{stage_table(results)}")
    if bench.profile_path is not None:
        measured = Runs.median(results["op-first"].lowerd, "seconds")
        print(f"\n{profile_summary(bench.profile_path, measured)}")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=6, help="transformer blocks (default 6)")
    parser.add_argument("--dim", type=int, default=256, help="transformer width (default 256)")
    parser.add_argument("--seq", type=int, default=64, help="sequence length (default 64)")
    parser.add_argument("--quick", action="store_true", help="2 blocks, d=64, seq 16: smoke test")
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs of each scenario and of stock (default 1)"
    )
    parser.add_argument(
        "--cheap-repeat",
        type=int,
        default=5,
        help="runs of the cheap scenarios, no-op and comment (default 5)",
    )
    parser.add_argument(
        "--no-profile",
        dest="profile",
        action="store_false",
        help="skip the cProfile'd structural-edit rebuild",
    )
    parser.add_argument("--json", metavar="FILE", help="also write every run's numbers to FILE")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir, and say where")
    parser.add_argument("--stock-worker", help=argparse.SUPPRESS)
    parser.add_argument("--lowerd-worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.blocks, args.dim, args.seq, args.cheap_repeat = 2, 64, 16, min(args.cheap_repeat, 3)
    if args.blocks < 1 or args.repeat < 1 or args.cheap_repeat < 1:
        parser.error("--blocks, --repeat and --cheap-repeat must be at least 1")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.stock_worker or args.lowerd_worker:
        kind = "stock" if args.stock_worker else "lowerd"
        run_worker(kind, json.loads(args.stock_worker or args.lowerd_worker))
        return 0
    root = Path(tempfile.mkdtemp(prefix="bench-incremental-"))
    try:
        bench = Bench(root, args)
        revision = lowerd_revision()
        log(f"bench: {root}")
        bench.run()
        print_report(bench, revision)
        if args.json:
            document = {k: v.to_json() for k, v in bench.results.items()}
            Path(args.json).write_text(json.dumps(document, indent=2) + "\n")
    finally:
        if args.keep:
            log(f"bench: kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
