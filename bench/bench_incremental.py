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

    .venv/bin/python -m bench.bench_incremental              # full size: ~6 minutes
    .venv/bin/python -m bench.bench_incremental --quick      # 2 blocks, d=64: smoke test
    .venv/bin/python -m bench.bench_incremental --repeat 3   # medians of 3 everywhere: ~15 min

Everything a run writes (project copy, caches, build records, .pte files, logs, profiles) lives
in a temp dir; the workers import a snapshot of lowerd's source taken at the start. This is a
script, not a test: nothing asserts on a timing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import (
    OUT_DIR,
    PROJECT,
    Processes,
    add_transformer_size,
    bench_env,
    build_numbers,
    declare_one_target,
    describe_run,
    installed_line,
    log,
    lowerd_revision,
    median_of,
    quick_size,
    restore_state,
    reuse_cells,
    save_state,
    set_constant,
    set_constants_in_file,
    snapshot_lowerd,
    verdicts,
    workdir,
    write_json,
)
from testkit.projects import copy_project

TARGET = "transformer"
ENTRY = "models/transformer.py:make"
MODEL_FILE = "models/transformer.py"


# Goals (from the issue); the report gives each a verdict, nothing fails on them.
NO_OP_GOAL_SECONDS = 0.5
COMMENT_GOAL_RATIO = 0.1
REUSED_GOAL = 0.9


# The project and its edits -------------------------------------------------------------------


def set_model_constant(text: str, name: str, value: str) -> str:
    return set_constant(text, name, value, MODEL_FILE)


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
        Edit("weight", "weight", lambda t: set_model_constant(t, "EDITED_BLOCK_GAIN", "1.25")),
        Edit(
            "op-first",
            "op, block 0",
            lambda t: set_model_constant(t, "EXTRA_OP_BLOCKS", "(0,)"),
        ),
        Edit(
            "op-last",
            f"op, block {last}",
            lambda t: set_model_constant(t, "EXTRA_OP_BLOCKS", both),
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
    project = copy_project(PROJECT, root / "project")
    declare_one_target(project, TARGET, ENTRY)
    set_constants_in_file(project / MODEL_FILE, constants)
    return project


# The bench ---------------------------------------------------------------------------------


@dataclass
class Runs:
    """The runs of one scenario, lowerd's and stock's on the same state."""

    key: str
    name: str
    lowerd: list[dict[str, Any]] = field(default_factory=list)
    stock: list[dict[str, Any]] = field(default_factory=list)

    median = staticmethod(median_of)

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
        # XDG_RUNTIME_DIR: no daemon of the user's is asked. The cwd is the project copy, as
        # for a user: nothing lands in the repo.
        env = bench_env(self.lowerd_source, cache=self.cache, runtime=root / "run")
        self.processes = Processes(root, cwd=self.project, env=env, snapshot=self.lowerd_source)
        self.model = self.project / MODEL_FILE
        self.results: dict[str, Runs] = {}
        self.profile_path: Path | None = None

    # State

    @property
    def out_dir(self) -> Path:
        return self.project / OUT_DIR

    def save_state(self, name: str) -> Path:
        return save_state(self.cache, self.out_dir, self.root / "states" / name)

    def restore_state(self, saved: Path | None) -> None:
        restore_state(self.cache, self.out_dir, saved)

    # Processes

    def stock(self) -> dict[str, Any]:
        output = self.root / "stock" / f"{self.processes.count + 1}.pte"
        output.parent.mkdir(exist_ok=True)
        spec = {"project": str(self.project), "entry": ENTRY, "output": str(output)}
        return self.processes.worker("stock", spec)

    def lowerd(self, profile: Path | None = None) -> dict[str, Any]:
        spec = {"project": str(self.project), "target": TARGET, "seconds": "lowerd"}
        return self.processes.worker("lowerd", {**spec, "profile": profile and str(profile)})

    def cli(self) -> dict[str, Any]:
        """`python -m lowerd build --json transformer`, timed from outside."""
        done = self.processes.lowerd("build", "--json", TARGET, what="cli")
        [target] = json.loads(done.stdout)["targets"]
        return {
            "seconds": done.seconds,
            "wall_seconds": done.seconds,
            **build_numbers(target, self.project),
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
                log(f"  {name}: stock {describe_run(found.stock[-1])}")
            if round_ < times:
                self.restore_state(start)
                found.lowerd.append(runs())
                log(f"  {name}: lowerd {describe_run(found.lowerd[-1])}")
        if profile:  # unmeasured: the same rebuild again, under cProfile
            self.profile_path = self.root / f"{key}.prof"
            self.restore_state(start)
            self.lowerd(profile=self.profile_path)
            log(f"  {name}: profiled into {self.profile_path}")
        return self.save_state(key)


# Report ------------------------------------------------------------------------------------


def ratio_of(scenario: Runs) -> float:
    """lowerd over stock: whole processes for the no-op, seconds of work otherwise."""
    key = "wall_seconds" if scenario.key == "no-op" else "seconds"
    return Runs.median(scenario.lowerd, key) / Runs.median(scenario.stock, key)


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
    return verdicts(found)


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
        caller=("lowerd/lowering/loading.py", "export"),
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
        (("lowerd/lowering/observed_partitioner.py", "_observed"),),
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
    Bucket("emit (to_executorch, buffer)", (("lowerd/lowering/emission.py", "emit"),)),
    Bucket("write the .pte", (("lowerd/cache/atomic.py", "write_atomic"),)),
    Bucket("record the build state", (("lowerd/lowering/build.py", "_record"),)),
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
    print(installed_line(revision))
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
    add_transformer_size(parser, "2 blocks, d=64, seq 16: smoke test")
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
    args = parser.parse_args(argv)
    quick_size(args)
    if args.quick:
        args.cheap_repeat = min(args.cheap_repeat, 3)
    if args.blocks < 1 or args.repeat < 1 or args.cheap_repeat < 1:
        parser.error("--blocks, --repeat and --cheap-repeat must be at least 1")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    with workdir("bench-incremental-", args.keep) as root:
        bench = Bench(root, args)
        revision = lowerd_revision()
        bench.run()
        print_report(bench, revision)
        if args.json:
            write_json(args.json, {k: v.to_json() for k, v in bench.results.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
