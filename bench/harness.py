"""What the bench scripts share, each piece once (what they share with the tests is in testkit/):

- the projects: copies of bench/project, bench/real or examples in a temp dir, constants
  rewritten as a user edits them, one target declared, lowerd's state saved and put back;
- the snapshot of lowerd's source the measured processes import, and the check that they did;
- the processes: an environment, a run timed from outside with its stderr in a log file, and
  the worker processes this module runs itself (`python -m bench.harness KIND SPEC`):

      stock          stock ExecuTorch on one entry (torch.export, to_edge_transform_and_lower
                     with XnnpackPartitioner, to_executorch), its imports and stages timed
      stock-targets  the same for several targets in one process: a stock lowering script
      lowerd         lowerd's build_target on one target, timed the same way

  and the numbers of a `lowerd build --json` report;
- the report: sha256 of a file, ok/!! verdict lines, tables with columns as wide as their
  cells, JSON dumps, the line naming lowerd's revision.

This module imports only the standard library and testkit's stdlib-only modules at the top: a
worker's import clock starts when it starts, so that stock's and lowerd's imports are timed alike.
"""

from __future__ import annotations

import argparse
import compileall
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
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.substages import lowerd_shortcuts, timed_substages
from testkit.stock_lowering import importable, lower_stock
from testkit.stock_recipe import (
    Recipe,
    lower_recipe,
    optimum_constant_methods,
    optimum_quantize_model,
    optimum_recipe,
)

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
PROJECT = BENCH_DIR / "project"  # the synthetic models: transformer, cnn
REAL_PROJECT = BENCH_DIR / "real"  # Hugging Face transformers models
EXAMPLES = REPO / "examples"
# out_dir in bench/project/pyproject.toml and bench/real/pyproject.toml: a copy leaves it out
# (testkit.projects.copy_project)
OUT_DIR = "build"
QUICK_SIZE = (2, 64, 16)  # --quick: transformer blocks, width, sequence length


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# Projects --------------------------------------------------------------------------------------


def set_constant(text: str, name: str, value: str, where: str) -> str:
    """`NAME = ...` rewritten as a user editing the file would; where names it in an error."""
    new, count = re.subn(rf"^{name} = .*$", f"{name} = {value}", text, flags=re.MULTILINE)
    if count != 1:
        raise SystemExit(f"bench: expected one `{name} = ...` line in {where}, found {count}")
    return new


def set_constants_in_file(path: Path, constants: dict[str, Any]) -> None:
    text = path.read_text()
    for name, value in constants.items():
        text = set_constant(text, name, str(value), str(path))
    path.write_text(text)


def declare_one_target(project: Path, target: str, entry: str) -> None:
    """The project's pyproject.toml rewritten to declare one target (a server builds them all)."""
    (project / "pyproject.toml").write_text(
        "[tool.lowerd]\n"
        'backends = ["xnnpack"]\n'
        f'out_dir = "{OUT_DIR}"\n\n'
        f"[tool.lowerd.targets.{target}]\n"
        f'entry = "{entry}"\n'
    )


def save_state(cache: Path, out_dir: Path, saved: Path) -> Path:
    """lowerd's state between builds: the blob cache and its build records (in out_dir)."""
    shutil.rmtree(saved, ignore_errors=True)
    shutil.copytree(cache, saved / "cache")
    shutil.copytree(out_dir, saved / OUT_DIR)
    return saved


def restore_state(cache: Path, out_dir: Path, saved: Path | None) -> None:
    """The state as saved; None: no cache and no build records, a cold start."""
    for folder in (cache, out_dir):
        shutil.rmtree(folder, ignore_errors=True)
    if saved is not None:
        shutil.copytree(saved / "cache", cache)
        shutil.copytree(saved / OUT_DIR, out_dir)


@contextmanager
def workdir(prefix: str, keep: bool) -> Iterator[Path]:
    """The temp dir of one bench run: removed at the end, or kept (and named) with --keep."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    log(f"bench: {root}")
    try:
        yield root
    finally:
        if keep:
            log(f"bench: kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


# The snapshot of lowerd -------------------------------------------------------------------------


def snapshot_lowerd(root: Path, package: Path | None = None) -> Path:
    """Copy lowerd's source (src/lowerd, or another checkout's package) into root.

    The workers import this copy: a run takes minutes, and lowerd edited meanwhile would
    otherwise mix two versions of it in one table.
    """
    source = root / "lowerd-src"
    ignore = shutil.ignore_patterns("__pycache__")
    package = package or REPO / "src" / "lowerd"
    shutil.copytree(package, source / "lowerd", ignore=ignore, dirs_exist_ok=True)
    # Compiled now, so that the first lowerd run's import time does not include compiling it.
    compileall.compile_dir(source, quiet=1)
    return source


def check_snapshot(imported_from: str | None, snapshot: Path) -> None:
    """A process reported where it imported lowerd from: it must be the snapshot."""
    if imported_from and not Path(imported_from).is_relative_to(snapshot):
        raise SystemExit(f"bench: lowerd was imported from {imported_from}, not the snapshot")


def check_snapshot_imported(
    env: dict[str, str], cwd: Path, snapshot: Path, module: str = "lowerd"
) -> None:
    """Before anything is measured: a process started as the bench starts them imports it."""
    done = subprocess.run(
        [sys.executable, "-c", f"import {module} as m; print(m.__file__)"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    check_snapshot(done.stdout.strip(), snapshot)


def lowerd_revision() -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown revision"
    return done.stdout.strip()


def installed_line(revision: str, what: str = "lowerd") -> str:
    """The first line of a report: which lowerd, which torch and ExecuTorch."""
    return f"\n{what} {revision}; torch and executorch as installed in {sys.prefix}"


# Processes --------------------------------------------------------------------------------------


def bench_env(
    lowerd_source: Path | None = None,
    cache: Path | None = None,
    runtime: Path | None = None,
    **extra: str,
) -> dict[str, str]:
    """The measured processes' environment: the snapshot of lowerd first on PYTHONPATH, the
    bench's blob cache and runtime folder (the daemon's socket: no daemon of the user's is
    asked), and lowerd's default log level."""
    env = {**os.environ, **extra}
    if lowerd_source is not None:
        path = [str(lowerd_source), os.environ.get("PYTHONPATH")]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, path))
    if cache is not None:
        env["LOWERD_CACHE_DIR"] = str(cache)
    if runtime is not None:
        runtime.mkdir(mode=0o700, exist_ok=True)
        env["XDG_RUNTIME_DIR"] = str(runtime)
    env.pop("LOWERD_LOG_LEVEL", None)
    return env


@dataclass(frozen=True)
class Done:
    seconds: float  # start to exit, timed from outside
    stdout: str
    log: Path  # its stderr


class Processes:
    """Runs a bench's processes, each timed from outside, each one's stderr in a numbered log
    file under root/logs, worker results under root/results."""

    def __init__(self, root: Path, cwd: Path, env: dict[str, str], snapshot: Path | None = None):
        self.root, self.cwd, self.env, self.snapshot = root, cwd, env, snapshot
        self.count = 0

    def run(
        self,
        command: list[str],
        what: str,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> Done:
        self.count += 1
        log_path = self.root / "logs" / f"{self.count:03d}-{what}.log"
        log_path.parent.mkdir(exist_ok=True)
        with log_path.open("w") as stderr:
            started = time.perf_counter()
            done = subprocess.run(
                command,
                cwd=cwd or self.cwd,
                env=env or self.env,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
            seconds = time.perf_counter() - started
        if done.returncode != 0:
            tail = "".join(log_path.read_text().splitlines(keepends=True)[-30:])
            raise SystemExit(f"bench: a {what} run failed:\n{done.stdout[-2000:]}{tail}")
        return Done(seconds, done.stdout, log_path)

    def lowerd(self, *args: str, what: str | None = None, **where: Any) -> Done:
        """`python -m lowerd ARGS`, as a user runs it."""
        command = [sys.executable, "-m", "lowerd", *args]
        return self.run(command, what or f"lowerd-{args[0]}", **where)

    def worker(self, kind: str, spec: dict[str, Any], what: str | None = None, **where: Any):
        """One of this file's workers in a fresh process: its result, and `wall_seconds`."""
        result = self.root / "results" / f"{self.count + 1:03d}-{kind}.json"
        result.parent.mkdir(exist_ok=True)
        spec = {**spec, "result": str(result)}
        command = [sys.executable, "-m", "bench.harness", kind, json.dumps(spec)]
        env = worker_env(where.pop("env", None) or self.env)
        done = self.run(command, what or kind, env=env, **where)
        run = {**json.loads(result.read_text()), "wall_seconds": done.seconds}
        if self.snapshot is not None:
            check_snapshot(run.get("lowerd_source"), self.snapshot)
        return run


def worker_env(env: dict[str, str]) -> dict[str, str]:
    """A worker's environment: the repository's root last on PYTHONPATH, so that `-m
    bench.harness` (and the testkit it imports) is found from the project's folder, after the
    snapshot of lowerd."""
    path = [env.get("PYTHONPATH"), str(REPO)]
    return {**env, "PYTHONPATH": os.pathsep.join(filter(None, path))}


def build_numbers(found: dict[str, Any], project: Path) -> dict[str, Any]:
    """The numbers of one target of a `lowerd build --json` report, and the sha256 of the file
    it left (the bytes on disk are what is compared with stock)."""
    output = found.get("output")
    return {
        "lowerd_seconds": found["seconds"],
        "sha256": file_sha256(project / output) if output else None,
        "reported_sha256": found["sha256"],
        **found["cache"],  # hits, misses, rebased
        "reused": found.get("reused"),
    }


# Workers: each run is one fresh process ---------------------------------------------------------


class StageClock:
    """Seconds per stage, from the moments stages start; lowerd's progress callback drives it.
    `seconds` are wall seconds, `cpu_seconds` this process's CPU seconds (time.process_time)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.cpu_seconds: dict[str, float] = {}
        self._current: str | None = None
        self._since = (time.perf_counter(), time.process_time())

    def mark(self, stage: str) -> None:
        if stage == self._current:  # lowerd reports every preprocess call as stage "lower"
            return
        self.stop()
        self._current, self._since = stage, (time.perf_counter(), time.process_time())

    def stop(self) -> None:
        if self._current is not None:
            wall, cpu = time.perf_counter() - self._since[0], time.process_time() - self._since[1]
            self.seconds[self._current] = self.seconds.get(self._current, 0.0) + wall
            self.cpu_seconds[self._current] = self.cpu_seconds.get(self._current, 0.0) + cpu
        self._current = None

    def progress(self, stage: str, _target: str, _detail: str | None) -> None:
        self.mark(stage)


@contextmanager
def profiled(path: str | None) -> Iterator[None]:
    """cProfile the block into path when given; the benches only profile unmeasured runs."""
    if not path:
        yield
        return
    import cProfile

    profile = cProfile.Profile()
    profile.enable()
    try:
        yield
    finally:
        profile.disable()
        profile.dump_stats(path)


def call_entry(project: Path, entry: str) -> Any:
    """Import an entry as lowerd does (`models/x.py:make` imported as models.x,
    `package.module:make` as it is), the project first on sys.path, and call it."""
    import importlib

    where, _, function = entry.rpartition(":")
    module = ".".join(Path(where).with_suffix("").parts) if where.endswith(".py") else where
    with importable(project):
        return getattr(importlib.import_module(module), function)()


def peak_rss() -> dict[str, int]:
    """This process's peak resident set (ru_maxrss, bytes: Linux counts KiB), and the largest
    of its waited-for children's (0 without any): a worker's own number, since each is a fresh
    process."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"peak_rss": own * 1024, "peak_rss_children": children * 1024}


def stock_lower(
    returned: Any,
    clock: StageClock | None = None,
    recipe: dict[str, Any] | None = None,
    project: Path | None = None,
) -> tuple[Any, bytes]:
    """testkit's stock ExecuTorch chain with XnnpackPartitioner on what an entry returned, its
    stages marked on the clock: the edge program and the .pte's bytes. With `recipe` (a
    lowerd.Method returned), the flow's stock script (flow_recipe)."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    mark = clock.mark if clock else None
    if recipe is None:
        return lower_stock(returned, [XnnpackPartitioner()], mark)
    if mark and recipe.get("quantize"):
        mark("quantize")
    flow = flow_recipe(returned, recipe, project or Path.cwd())
    return lower_recipe(returned, [XnnpackPartitioner()], flow, mark)


def flow_recipe(method: Any, recipe: dict[str, Any], project: Path) -> Recipe:
    """A bench flow's stock script (bench/bench_depth.py FLOWS), as its users write it:
    optimum-executorch's order (quantize the eager model, then export and lower with the
    recipe's passes, settings and constant methods, the passes imported from the project), or
    a strict export under no_grad as transformers' convert_and_export_with_cache does."""
    if recipe.get("quantize"):
        optimum_quantize_model(method.module, recipe["quantize"])
    optimum = recipe.get("optimum")
    if optimum is None:
        return Recipe(strict=recipe["strict"], no_grad=recipe["no_grad"])
    return optimum_recipe(
        call_entry(project, optimum["module_passes"]),
        call_entry(project, optimum["transform_passes"]),
        optimum_constant_methods(method.module.model, optimum["custom_sdpa"]),
    )


def import_stock(libraries: Iterable[str] = ()) -> None:
    """What stock imports before its work: the model's libraries, torch and ExecuTorch."""
    import importlib

    for name in [*libraries, "torch", "executorch.exir"]:
        importlib.import_module(name)
    importlib.import_module("executorch.backends.xnnpack.partition.xnnpack_partitioner")


def stock_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Stock ExecuTorch on one entry, as a user's script lowers it, after the imports it needs
    (and the model's libraries, spec["libraries"]: a warm session has them). Its work counts
    the write of the .pte when spec["time_write"]."""
    started = time.perf_counter()
    import_stock(spec.get("libraries", ()))
    imported, imported_cpu = time.perf_counter(), time.process_time()
    clock = StageClock()
    with (
        profiled(spec.get("profile")),
        timed_substages(spec.get("substages")) as substages,
        lowerd_shortcuts(spec.get("shortcuts")),
    ):
        clock.mark("load")
        project = Path(spec["project"])
        returned = call_entry(project, spec["entry"])
        with importable(project):  # dynamo's strict export imports the model's module by name
            edge, buffer = stock_lower(returned, clock, spec.get("recipe"), project)
        if spec.get("time_write"):
            clock.mark("write")
            Path(spec["output"]).write_bytes(buffer)
        clock.stop()
        finished, finished_cpu = time.perf_counter(), time.process_time()
    if not spec.get("time_write"):
        Path(spec["output"]).write_bytes(buffer)
    lowered = lowered_modules(edge.exported_program("forward").graph_module)
    result = {
        "import_seconds": imported - started,
        "seconds": finished - imported,
        "cpu_seconds": finished_cpu - imported_cpu,
        "stages": clock.seconds,
        "stage_cpu": clock.cpu_seconds,
        "substages": substages.as_json() if substages else None,
        "sha256": hashlib.sha256(buffer).hexdigest(),
        "partitions": len(lowered),
        **peak_rss(),
    }
    if spec.get("shortcuts"):
        import lowerd

        result["lowerd_source"] = str(Path(lowerd.__file__).parent)
    if "edited_block" in spec:
        prefix = f"blocks.{spec['edited_block']}."
        result["partitions_of_block"] = partitions_holding(lowered, prefix)
    return result


def stock_targets_worker(spec: dict[str, Any]) -> dict[str, str]:
    """A stock lowering script for several targets in one process: spec["entries"] maps each
    target to its entry, its .pte written to spec["out"]; the sha256 of each."""
    project, out = Path(spec["project"]), Path(spec["out"])
    out.mkdir(exist_ok=True)
    shas = {}
    for name, entry in spec["entries"].items():
        _, buffer = stock_lower(call_entry(project, entry))
        (out / f"{name}.pte").write_bytes(buffer)
        shas[name] = hashlib.sha256(buffer).hexdigest()
    return shas


def lowered_modules(graph_module: Any) -> list[Any]:
    from executorch.exir.lowered_backend_module import LoweredBackendModule

    nodes = graph_module.graph.nodes
    found = (getattr(graph_module, n.target, None) for n in nodes if n.op == "get_attr")
    return [m for m in found if isinstance(m, LoweredBackendModule)]


def partitions_holding(lowered: list[Any], prefix: str) -> int:
    """Partitions with a parameter under prefix: the ones a weight edit of that block must miss."""
    from torch.export.graph_signature import InputKind

    def holds(module: Any) -> bool:
        specs = module.original_module.graph_signature.input_specs
        return any(
            s.kind == InputKind.PARAMETER and (s.target or "").startswith(prefix) for s in specs
        )

    return sum(1 for module in lowered if holds(module))


EDGE_PATH = "edge generation"  # region_edge.py's debug lines: "regional ..." / "stock ...: why"


class EdgePaths:
    """The path lowerd's edge generation took in this process: region_edge.py's debug lines
    (`regional edge generation: R regions from T templates`, `stock edge generation: <why>`),
    recorded while the block runs. None: no such line (regional generation was not installed,
    as with transform passes, or the build did not reach edge generation)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    @contextmanager
    def recorded(self) -> Iterator[None]:
        import logging

        paths = self

        class Recorder(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                message = record.getMessage()
                if EDGE_PATH in message:
                    paths.lines.append(message)

        logger = logging.getLogger("lowerd.lowering.region_edge")
        handler, level = Recorder(logging.DEBUG), logger.level
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        try:
            yield
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)


def lowerd_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """build_target as `lowerd build` calls it, after the imports stock pays before its work.
    Its blob cache: spec["cache"], else store_for's (LOWERD_CACHE_DIR, and LOWERD_CACHE_URL's
    redis tier behind it, uploads waited for inside build_target). `seconds` is the work
    after imports, or with spec["seconds"] == "lowerd" lowerd's own TargetResult.seconds."""
    started = time.perf_counter()
    # What stock imports before its clock starts, the model's libraries included when the spec
    # names them (as stock_worker's spec does: a warm session has them)
    import_stock(spec.get("libraries", ()))
    import lowerd
    import lowerd.lowering.preprocess_cache  # noqa: F401 - build_target imports these lazily
    import lowerd.lowering.reasons  # noqa: F401
    import lowerd.lowering.report  # noqa: F401
    from lowerd.cache.store import BlobStore
    from lowerd.lowering.build import build_target
    from lowerd.project.config import load_config, select_targets
    from lowerd.project.project_store import store_for
    from lowerd.project.wire import encode

    imported, imported_cpu = time.perf_counter(), time.process_time()
    clock = StageClock()
    paths = EdgePaths()
    with (
        profiled(spec.get("profile")),
        timed_substages(spec.get("substages")) as substages,
        paths.recorded(),
    ):
        config = load_config(Path(spec["project"]) / "pyproject.toml")
        [target] = select_targets(config, [spec["target"]])
        cache = spec.get("cache")
        store = BlobStore(Path(cache), max_bytes=None) if cache else store_for(config)
        result = build_target(config, target, store, clock.progress)
        clock.stop()
        finished, finished_cpu = time.perf_counter(), time.process_time()
    report = encode(result)
    if report["status"] != "ok":
        raise SystemExit(f"lowerd build failed: {json.dumps(report['error'])}")
    forward = report["methods"]["forward"]
    work = finished - imported
    return {
        "import_seconds": imported - started,
        "seconds": result.seconds if spec.get("seconds") == "lowerd" else work,
        "work_seconds": work,  # config loading, opening the store and the build
        "lowerd_seconds": result.seconds,  # TargetResult.seconds: what lowerd reports
        "cpu_seconds": finished_cpu - imported_cpu,
        "stages": clock.seconds,
        "stage_cpu": clock.cpu_seconds,
        "substages": substages.as_json() if substages else None,
        "sha256": file_sha256(report["output"]),  # the bytes on disk are what is compared
        "reported_sha256": report["sha256"],
        "hits": report["cache"]["hits"],
        "misses": report["cache"]["misses"],
        "rebased": report["cache"]["rebased"],
        # The redis tier's part, when LOWERD_CACHE_URL names one: "ok" or why not, and its
        # {hits, misses, puts, errors}
        "remote": report["cache"].get("remote"),
        "remote_counts": report["cache"].get("remote_counts"),
        "partitions": len(forward["partitions"]),
        "ops": forward["ops"],
        "ops_delegated": forward["ops_delegated"],
        # Why lowerd skipped lowering, when it did (e.g. "same-program": the last build's .pte)
        "reused": result.reused,
        "edge_path": paths.lines,
        "lowerd_source": str(Path(lowerd.__file__).parent),
        **peak_rss(),
    }


WORKERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "stock": stock_worker,
    "stock-targets": stock_targets_worker,
    "lowerd": lowerd_worker,
}


# Report -----------------------------------------------------------------------------------------


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def median_of(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def verdicts(found: list[tuple[str, bool]]) -> list[str]:
    """Expectations with their verdicts: they inform a reader and fail nothing."""
    return [f"  [{'ok' if good else '!!'}] {text}" for text, good in found]


def render(titles: list[str], rows: list[list[str]]) -> str:
    """Columns as wide as their widest cell: the first left-aligned, the others right."""
    widths = [max(len(row[i]) for row in [titles, *rows]) for i in range(len(titles))]

    def line(row: list[str]) -> str:
        cells = [row[0].ljust(widths[0])]
        cells += [cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True)]
        return "  " + "  ".join(cells)

    return "\n".join(line(row) for row in [titles, *rows])


def reuse_cells(run: dict[str, Any]) -> tuple[str, str, str, str]:
    """preprocessed, reused, rebased, reused % (of the partitions in the .pte)."""
    if run.get("reused"):  # the .pte was kept: no partition was looked at
        return "0", "all", "-", f"{run['reused']}"
    total = run["hits"] + run["misses"]
    share = f"{100 * run['hits'] / total:.0f} %" if total else "-"
    return str(run["misses"]), str(run["hits"]), str(run["rebased"]), share


def reuse(run: dict[str, Any]) -> str:
    """preprocessed/reused/rebased partitions, or why the .pte was kept."""
    preprocessed, reused, rebased, share = reuse_cells(run)
    return share if run.get("reused") else f"{preprocessed}/{reused}/{rebased}"


def describe_run(run: dict[str, Any]) -> str:
    """One run, for the progress lines on stderr."""
    if "import_seconds" not in run:  # timed from outside as a whole
        return f"{run['wall_seconds']:.2f} s whole process (reused: {run.get('reused')})"
    text = f"{run['seconds']:.2f} s (+{run['import_seconds']:.1f} s imports"
    if "hits" in run:
        text += f", {run['misses']} preprocessed, {run['hits']} reused ({run['rebased']} rebased)"
    if run.get("reused"):
        text += f", reused: {run['reused']}"
    return text + ")"


def write_json(path: str, document: Any) -> None:
    """--json: every run's numbers to a file, or to stdout for "-"."""
    text = json.dumps(document, indent=2, default=str)
    if path == "-":
        print(text)
    else:
        Path(path).write_text(text + "\n")


# Command line -----------------------------------------------------------------------------------


def add_transformer_size(parser: argparse.ArgumentParser, quick_help: str) -> None:
    """--blocks, --dim, --seq and --quick, which sets them to QUICK_SIZE (see quick_size)."""
    parser.add_argument("--blocks", type=int, default=6, help="transformer blocks (default 6)")
    parser.add_argument("--dim", type=int, default=256, help="transformer width (default 256)")
    parser.add_argument("--seq", type=int, default=64, help="sequence length (default 64)")
    parser.add_argument("--quick", action="store_true", help=quick_help)


def quick_size(args: argparse.Namespace) -> None:
    if args.quick:
        args.blocks, args.dim, args.seq = QUICK_SIZE


def main(argv: list[str]) -> int:
    """`python -m bench.harness KIND SPEC`: one worker run, its result written to
    spec["result"]."""
    kind, spec = argv[0], json.loads(argv[1])
    Path(spec["result"]).write_text(json.dumps(WORKERS[kind](spec)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
