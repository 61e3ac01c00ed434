"""Scale-out vs stock ExecuTorch: a second machine served by redis, N targets on Ray.

A. The second machine, per model of bench/project (the ~40-partition transformer, the
   one-partition CNN), each run a fresh process, its work after imports timed as bench_build.py
   times it (load, export, lower, emit, write; lowerd's includes opening its store and waiting
   for its uploads to redis):

    stock            torch.export + to_edge_transform_and_lower([XnnpackPartitioner()])
                     + to_executorch(), written to a .pte
    cold, no redis   lowerd with an empty local cache, no build records, no remote tier
    first machine    the same with an empty redis behind it: every blob written through
    second machine   a fresh copy of the project (no build records), an empty local cache and
                     the redis the first machine filled: every partition served from redis
    local warm       for reference: the first machine's local cache, no build records, no redis

B. N targets (transformer, cnn, and a copy of each with other weights: torch.manual_seed(1)),
   cold caches, each a whole process timed from outside:

    stock script     the stock lowering of all N in one process (bench/harness.py stock-targets)
    lowerd --jobs J  `lowerd build --json --no-daemon --jobs J`: forked local workers
    lowerd on Ray    `lowerd build --json --executor ray --ray-address A --jobs J`, A a local Ray
                     cluster started by the bench (its own temp dir, 2 CPUs, killed at the end)

Every cell compares the sha256 of each .pte lowerd left with stock's. On a 2-core machine Ray's
tasks share the cores the local workers would use: its row shows its overhead (a Ray worker per
task importing torch, the project shipped as a runtime_env, outputs sent back), not a speed-up.

    .venv/bin/python -m bench.bench_scale            # full size: several minutes
    .venv/bin/python -m bench.bench_scale --quick    # small models: smoke-tests this script

This is a script, not a test: its timings assert nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.bench_build import MAX_CLAMPS, Model, models_from
from bench.harness import (
    OUT_DIR,
    PROJECT,
    Processes,
    add_transformer_size,
    bench_env,
    build_numbers,
    installed_line,
    log,
    lowerd_revision,
    quick_size,
    render,
    set_constants_in_file,
    snapshot_lowerd,
    verdicts,
    workdir,
    write_json,
)
from testkit.projects import copy_project
from testkit.ray_cluster import ray_cluster
from testkit.redis_server import redis_server

RAY_CPUS = 2
_SEED = re.compile(r"torch\.manual_seed\(0\)")
VARIANT_SEED = 1  # the N-target variants: the same model, other weights (all partitions differ)


# The project -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    name: str
    entry: str


def variant(model: Model) -> Target:
    name = f"{model.target}_b"
    return Target(name, f"models/{name}.py:make")


def prepare_project(root: Path, models: list[Model]) -> tuple[Path, list[Target]]:
    """A copy of bench/project, sized, with a second-weights variant of each model: the N
    targets of scenario B, all declared in its pyproject.toml."""
    project = copy_project(PROJECT, root / "project")
    variants = []
    for model in models:
        set_constants_in_file(project / model.entry_file, model.constants)
        source = (project / model.entry_file).read_text()
        text, count = _SEED.subn(f"torch.manual_seed({VARIANT_SEED})", source)
        if count != 1:
            raise SystemExit(f"bench: expected one torch.manual_seed(0) in {model.entry_file}")
        other = variant(model)
        (project / other.entry.partition(":")[0]).write_text(text)
        variants.append(other)
    targets = [Target(model.target, model.entry) for model in models] + variants
    lines = ["[tool.lowerd]", 'backends = ["xnnpack"]', f'out_dir = "{OUT_DIR}"', ""]
    for target in targets:
        lines += [f"[tool.lowerd.targets.{target.name}]", f'entry = "{target.entry}"', ""]
    (project / "pyproject.toml").write_text("\n".join(lines))
    return project, targets


# A. The second machine -----------------------------------------------------------------------

SECOND_MACHINE = (  # (key, name): the rows of a model's table, in the order they run
    ("stock", "stock"),
    ("cold", "cold, no redis"),
    ("first", "first machine"),
    ("second", "second machine"),
    ("local", "local warm"),
)


@dataclass
class Cell:
    name: str
    runs: list[dict[str, Any]] = field(default_factory=list)

    def median(self, key: str) -> float:
        return statistics.median(run[key] for run in self.runs)

    @property
    def last(self) -> dict[str, Any]:
        return self.runs[-1]


class Workspace:
    def __init__(self, root: Path, models: list[Model]):
        self.root = root
        self.project, self.targets = prepare_project(root, models)
        self.lowerd_source = snapshot_lowerd(root)
        self.runtime = root / "run"  # XDG_RUNTIME_DIR: no daemon of the user's is asked
        # No remote tier unless a cell names one, whatever the user's environment says.
        env = self.env(None, "")
        self.processes = Processes(root, cwd=root, env=env, snapshot=self.lowerd_source)

    def env(self, cache: Path | None, url: str) -> dict[str, str]:
        return bench_env(
            self.lowerd_source,
            cache=cache,
            runtime=self.runtime,
            LOWERD_CACHE_URL=url,
            LOWERD_CACHE_REMOTE="read-write",
        )

    def cache(self, name: str) -> Path:
        """An empty blob cache of this name."""
        path = self.root / "caches" / name
        shutil.rmtree(path, ignore_errors=True)
        return path


class SecondMachine:
    """Scenario A for one model: its cells, each a fresh process from the state it names."""

    def __init__(self, workspace: Workspace, model: Model, redis: Any):
        self.workspace, self.model, self.redis = workspace, model, redis
        self.root, self.project = workspace.root, workspace.project
        self.processes = workspace.processes
        self.second_project = self.root / "second-machine" / model.target
        self.first_cache = self.root / "caches" / f"{model.target}-first"

    def run(self, repeat: int) -> dict[str, Cell]:
        plan: dict[str, Callable[[], dict[str, Any]]] = {
            "stock": self.stock,
            "cold": self.cold,
            "first": self.first,
            "second": self.second,
            "local": self.local,
        }
        cells = {key: Cell(name) for key, name in SECOND_MACHINE}
        for _ in range(repeat):  # interleaved rounds: load drifting favours no cell
            for key, run in plan.items():
                cells[key].runs.append(run())
                log(f"[{self.model.target}] {cells[key].name}: {describe(cells[key].last)}")
        return cells

    def stock(self) -> dict[str, Any]:
        output = self.root / "stock" / f"{self.model.target}-{self.processes.count + 1}.pte"
        output.parent.mkdir(exist_ok=True)
        spec = {"project": str(self.project), "entry": self.model.entry, "output": str(output)}
        return self.processes.worker("stock", {**spec, "time_write": True})

    def lowerd(self, project: Path, cache: Path, url: str, what: str) -> dict[str, Any]:
        """build_target in a fresh process, with store_for's store: LOWERD_CACHE_DIR=cache and,
        with a url, the redis tier behind it."""
        shutil.rmtree(project / OUT_DIR, ignore_errors=True)  # no build records
        spec = {"project": str(project), "target": self.model.target}
        env = self.workspace.env(cache, url)
        return self.processes.worker("lowerd", spec, what=f"lowerd-{what}", env=env)

    def cold(self) -> dict[str, Any]:
        return self.lowerd(
            self.project, self.workspace.cache(f"{self.model.target}-cold"), "", "cold"
        )

    def first(self) -> dict[str, Any]:
        self.redis.client().flushall()
        shutil.rmtree(self.first_cache, ignore_errors=True)
        return self.lowerd(self.project, self.first_cache, self.redis.url, "first")

    def second(self) -> dict[str, Any]:
        """Another checkout of the same project: no build records, an empty local cache."""
        shutil.rmtree(self.second_project, ignore_errors=True)
        copy_project(self.project, self.second_project)
        cache = self.workspace.cache(f"{self.model.target}-second")
        return self.lowerd(self.second_project, cache, self.redis.url, "second")

    def local(self) -> dict[str, Any]:
        return self.lowerd(self.project, self.first_cache, "", "local")


def describe(run: dict[str, Any]) -> str:
    text = f"{run['seconds']:.2f} s (+{run['import_seconds']:.1f} s imports"
    if "hits" in run:
        text += f", {run['misses']} preprocessed, {run['hits']} reused"
    if run.get("remote"):
        text += f", redis {run['remote']} {run['remote_counts']}"
    return text + ")"


def second_machine_table(cells: dict[str, Cell]) -> str:
    stock = cells["stock"]
    titles = ["scenario", "work s", "x stock", "proc s", "import s", "preproc/reused"]
    titles += ["redis", "redis hits/misses/puts", "= stock"]
    rows = []
    for key, name in SECOND_MACHINE:
        cell = cells[key]
        run = cell.last
        seconds = cell.median("seconds")
        row = [name, f"{seconds:.2f}", f"{seconds / stock.median('seconds'):.2f}x"]
        row += [f"{cell.median('wall_seconds'):.2f}", f"{cell.median('import_seconds'):.2f}"]
        if key == "stock":
            rows.append([*row, "-", "-", "-", "-"])
            continue
        counts = run.get("remote_counts")
        remote = "-" if counts is None else f"{counts['hits']}/{counts['misses']}/{counts['puts']}"
        same = all(r["sha256"] == stock.last["sha256"] for r in cell.runs)
        row += [f"{run['misses']}/{run['hits']}", run.get("remote") or "off", remote]
        rows.append([*row, "yes" if same else "NO"])
    return render(titles, rows)


def second_machine_checks(cells: dict[str, Cell]) -> list[str]:
    partitions = cells["stock"].last["partitions"]
    first, second = cells["first"].last, cells["second"].last
    first_counts, counts = first["remote_counts"] or {}, second["remote_counts"] or {}
    stock_sha = cells["stock"].last["sha256"]
    runs = [run for key, cell in cells.items() if key != "stock" for run in cell.runs]
    found = [
        (
            f"first machine: redis {first['remote']}, {first_counts.get('puts')} puts for "
            f"{partitions} partitions, {first_counts.get('errors')} errors",
            first["remote"] == "ok" and first_counts.get("puts", 0) >= partitions,
        ),
        (
            f"second machine: {second['hits']} of {partitions} partitions reused, "
            f"{second['misses']} preprocessed; redis hits {counts.get('hits')}, misses "
            f"{counts.get('misses')} (expected {partitions} and 0)",
            second["hits"] == partitions
            and second["misses"] == 0
            and counts.get("hits") == partitions
            and counts.get("misses") == 0,
        ),
        ("every lowerd .pte equals stock's", all(run["sha256"] == stock_sha for run in runs)),
        (
            "lowerd's reports name the sha256 of the files it left",
            all(run["sha256"] == run["reported_sha256"] for run in runs),
        ),
    ]
    return verdicts(found)


# B. N targets --------------------------------------------------------------------------------


@dataclass
class Way:
    """One way of building the N targets: its runs (seconds, sha256 per target)."""

    name: str
    runs: list[dict[str, Any]] = field(default_factory=list)
    failed: str | None = None  # why it could not run (Ray not working, say)

    def median(self) -> float:
        return statistics.median(run["seconds"] for run in self.runs)


class Targets:
    """Scenario B: the N targets built three ways, each from cold caches and no build records."""

    def __init__(self, workspace: Workspace, jobs: int, ray_address: str | None):
        self.workspace, self.jobs, self.ray_address = workspace, jobs, ray_address
        self.project, self.processes = workspace.project, workspace.processes
        self.names = [target.name for target in workspace.targets]

    def run(self, repeat: int) -> dict[str, Way]:
        paths = {
            "stock": Way(f"stock script, {len(self.names)} targets in one process"),
            "jobs": Way(f"lowerd --jobs {self.jobs} (local workers)"),
            "ray": Way(f"lowerd on Ray ({RAY_CPUS}-CPU local cluster, --jobs {self.jobs})"),
        }
        if self.ray_address is None:
            paths["ray"].failed = "skipped (--no-ray)"
        for _ in range(repeat):
            paths["stock"].runs.append(self.stock())
            log(f"[{len(self.names)} targets] stock: {paths['stock'].runs[-1]['seconds']:.2f} s")
            paths["jobs"].runs.append(self.lowerd("jobs", "--no-daemon"))
            log(f"[{len(self.names)} targets] --jobs: {paths['jobs'].runs[-1]['seconds']:.2f} s")
            if paths["ray"].failed is None:
                assert self.ray_address is not None
                flags = ("--executor", "ray", "--ray-address", self.ray_address)
                try:
                    paths["ray"].runs.append(self.lowerd("ray", *flags))
                except SystemExit as error:  # a Ray build that fails: said, the rest goes on
                    paths["ray"].failed = f"failed: {str(error).splitlines()[0]}"
                    log(f"bench: the Ray build {error}")
                    continue
                log(f"[{len(self.names)} targets] ray: {paths['ray'].runs[-1]['seconds']:.2f} s")
        return paths

    def stock(self) -> dict[str, Any]:
        out = self.workspace.root / "stock-targets"
        shutil.rmtree(out, ignore_errors=True)
        entries = {target.name: target.entry for target in self.workspace.targets}
        spec = {"project": str(self.project), "out": str(out), "entries": entries}
        shas = self.processes.worker("stock-targets", spec)
        seconds = shas.pop("wall_seconds")
        return {"seconds": seconds, "sha256": shas}

    def lowerd(self, what: str, *flags: str) -> dict[str, Any]:
        """`lowerd build --json` of every target from nothing, timed from outside."""
        shutil.rmtree(self.project / OUT_DIR, ignore_errors=True)
        env = self.workspace.env(self.workspace.cache(f"targets-{what}"), "")
        config = str(self.project / "pyproject.toml")
        args = ["build", "--json", "--config", config, "--jobs", str(self.jobs), *flags]
        done = self.processes.lowerd(*args, *self.names, what=f"lowerd-{what}", env=env)
        document = json.loads(done.stdout)
        found = {t["name"]: build_numbers(t, self.project) for t in document["targets"]}
        return {
            "seconds": done.seconds,
            "executor": document.get("executor", "local"),
            "sha256": {name: numbers["sha256"] for name, numbers in found.items()},
            "reported_sha256": {n: numbers["reported_sha256"] for n, numbers in found.items()},
            "misses": sum(numbers["misses"] for numbers in found.values()),
            "hits": sum(numbers["hits"] for numbers in found.values()),
        }


def targets_table(paths: dict[str, Way], names: list[str]) -> str:
    stock = paths["stock"]
    titles = ["path", "proc s", "x stock", "x --jobs", "preproc/reused", "= stock, per target"]
    rows = []
    for key, path in paths.items():
        if not path.runs:
            rows.append([path.name, "-", "-", "-", "-", path.failed or "-"])
            continue
        seconds = path.median()
        row = [path.name, f"{seconds:.2f}", f"{seconds / stock.median():.2f}x"]
        row.append(f"{seconds / paths['jobs'].median():.2f}x" if paths["jobs"].runs else "-")
        if key == "stock":
            rows.append([*row, "-", "-"])
            continue
        last = path.runs[-1]
        same = [
            "yes" if all(r["sha256"][n] == stock.runs[-1]["sha256"][n] for r in path.runs) else "NO"
            for n in names
        ]
        rows.append([*row, f"{last['misses']}/{last['hits']}", " ".join(same)])
    return render(titles, rows)


def targets_checks(paths: dict[str, Way], names: list[str]) -> list[str]:
    stock = paths["stock"].runs[-1]["sha256"]
    runs = [run for key, path in paths.items() if key != "stock" for run in path.runs]
    found = [
        (
            "every target's .pte equals stock's, on every path",
            all(run["sha256"][name] == stock[name] for run in runs for name in names),
        ),
        (
            "lowerd's documents name the sha256 of the files they left",
            all(run["sha256"] == run["reported_sha256"] for run in runs),
        ),
    ]
    ray = paths["ray"]
    if ray.runs:
        said = {run["executor"] for run in ray.runs}
        found.append((f"the Ray documents say executor {sorted(said)}", said == {"ray"}))
    else:
        found.append((f"the Ray build: {ray.failed}", False))
    return verdicts(found)


# Report ------------------------------------------------------------------------------------


def print_report(
    models: list[Model],
    machines: dict[str, dict[str, Cell]],
    paths: dict[str, Way] | None,
    names: list[str],
    args: argparse.Namespace,
    revision: str,
) -> None:
    note = f"medians of {args.repeat} runs" if args.repeat > 1 else "one run each"
    print(installed_line(revision))
    print(f"machine: {os.cpu_count()} cores; {note}")
    print(
        "\nA. the second machine: work s = load + export + lower + emit + write after imports "
        "(lowerd's: opening its store and waiting for its redis uploads too); proc s = the "
        "whole process"
    )
    for model in models:
        cells = machines[model.target]
        stock = cells["stock"].last
        print(f"\n{model.target} ({model.summary}): {stock['partitions']} XNNPACK partitions")
        print(second_machine_table(cells))
        print("\n".join(second_machine_checks(cells)))
    if paths is None:
        return
    print(
        f"\nB. {len(names)} targets ({', '.join(names)}), cold caches, no build records; "
        "proc s = the whole process, timed from outside"
    )
    print(targets_table(paths, names))
    print("  = stock columns: " + " ".join(names))
    print("\n".join(targets_checks(paths, names)))
    print(
        f"  (on a {os.cpu_count()}-core machine Ray's tasks share the cores --jobs uses: its "
        "row is lowerd's Ray overhead, not a speed-up)"
    )


def dump_json(
    machines: dict[str, dict[str, Cell]], paths: dict[str, Way] | None, path: str
) -> None:
    document = {
        "second_machine": {
            target: {key: {"name": c.name, "runs": c.runs} for key, c in cells.items()}
            for target, cells in machines.items()
        },
        "targets": None
        if paths is None
        else {k: {"name": p.name, "runs": p.runs, "failed": p.failed} for k, p in paths.items()},
    }
    write_json(path, document)


# Command line ------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_transformer_size(parser, "2 blocks, d=64, seq 16, a small CNN: a few minutes")
    parser.add_argument(
        "--models",
        type=lambda text: text.split(","),
        default=["transformer", "cnn"],
        help="comma-separated: transformer,cnn (default both)",
    )
    parser.add_argument("--jobs", type=int, default=2, help="--jobs of the N-target builds (2)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per cell; medians shown")
    parser.add_argument("--no-ray", action="store_true", help="scenario B without the Ray row")
    parser.add_argument(
        "--no-targets", action="store_true", help="scenario A only (no N-target builds)"
    )
    parser.add_argument(
        "--json", nargs="?", const="-", metavar="FILE", help="also dump results (default stdout)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp dir, and say where")
    args = parser.parse_args(argv)
    quick_size(args)
    args.clamps = MAX_CLAMPS  # models_from's transformer: every clamp, ~40 partitions
    unknown = set(args.models) - {"transformer", "cnn"}
    if unknown or args.blocks < 1 or args.repeat < 1 or args.jobs < 1:
        parser.error(f"bad --models {sorted(unknown)}" if unknown else "--blocks/--repeat/--jobs")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    models = models_from(args)
    with workdir("bench-scale-", args.keep) as root:
        workspace = Workspace(root, models)
        revision = lowerd_revision()
        with redis_server(root / "redis") as redis:
            machines = {
                m.target: SecondMachine(workspace, m, redis).run(args.repeat) for m in models
            }
        paths = None
        if not args.no_targets:
            paths = run_targets(workspace, args)
        names = [target.name for target in workspace.targets]
        print_report(models, machines, paths, names, args, revision)
        if args.json:
            dump_json(machines, paths, args.json)
    return 0


def run_targets(workspace: Workspace, args: argparse.Namespace) -> dict[str, Way]:
    if args.no_ray:
        return Targets(workspace, args.jobs, None).run(args.repeat)
    # A short folder: Ray's Unix sockets live under it, and their paths are capped at 107 bytes.
    folder = Path(tempfile.mkdtemp(prefix="bench-ray-", dir="/tmp"))
    try:
        started = time.perf_counter()
        env = workspace.env(None, "")
        with ray_cluster(folder, RAY_CPUS, env) as address:
            log(f"bench: Ray cluster at {address} up in {time.perf_counter() - started:.1f} s")
            return Targets(workspace, args.jobs, address).run(args.repeat)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
