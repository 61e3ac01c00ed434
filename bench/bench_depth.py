"""Depth: a one-layer edit of an L-layer Llama, stock vs lowerd, stage by stage (issue 23).

transformers' LlamaForCausalLM from a config (random weights, seeded; nothing downloaded),
wrapped to return the logits, built at each depth L of --layers. For each L, in one run:

    stock           the stock script in a fresh process (torch.export,
                    to_edge_transform_and_lower with XnnpackPartitioner, to_executorch)
    cold            lowerd's build_target in a fresh process, an empty cache, no build records
    daemon cold     the first build of the model through a warm daemon (its own project copy and
                    cache; warmed with one unmeasured build of a one-op target)
    edit            the last layer's MLP activation replaced
                    (`model.model.layers[-1].mlp.act_fn = GELU()`), built by the warm daemon
    comment         a comment line on top of that edit, built by the warm daemon
    stock, edited   stock again on the edited model: the baseline of `edit` and `comment`
    edit, in-process
                    the same edit built by build_target in a fresh process, with the cold
                    run's cache and build records: the edit's sub-stages

Every lowerd .pte is compared by sha256 with stock's on the same model (the bench exits 1 when
any differs). Stage seconds are lowerd's progress stages (load, export, partition: edge
generation and the partitioner up to the first preprocess, preprocess: cutting the partitions out
and preprocessing them, emit, write) and stock's (load, export, lower, emit); through the daemon
they are read from the progress frames the client receives. The runs in a process of the
bench's own (stock, cold, edit in-process) also time ExecuTorch's sub-stages inside those
(bench/substages.py: decompositions, edge passes, partitioner, cutting, legalize, preprocess,
to_executorch's passes, memory planning, emission, serialization), in CPU and wall seconds.
`--chain` runs only the stock chain at each depth, as it is and with lowerd's exact shortcuts
installed around it (same sha256): where the shortcuts' time goes, by sub-stage.

    nice -n 10 .venv/bin/python -m bench.bench_depth                      # L = 4,16,32, hidden 512
    .venv/bin/python -m bench.bench_depth --layers 2,4,8 --hidden 256 --intermediate 688
    .venv/bin/python -m bench.bench_depth --chain --layers 4,8,16         # sub-stages only
    .venv/bin/python -m bench.bench_depth --json depth.json --keep

Needs the `bench` extra (transformers). A script, not a test: nothing asserts on a timing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness import (
    BENCH_DIR,
    Processes,
    StageClock,
    bench_env,
    check_snapshot_imported,
    file_sha256,
    installed_line,
    log,
    lowerd_revision,
    render,
    set_constants_in_file,
    snapshot_lowerd,
    verdicts,
    workdir,
    worker_env,
    write_json,
)
from bench.substages import SUBSTAGES
from testkit.projects import copy_project

PROJECT = BENCH_DIR / "depth"
MODEL_FILE = "models/llama.py"
ENTRY = f"{MODEL_FILE}:make"
ANCHOR = "    model = Logits(model).eval()  # ANCHOR: the edits go above this line\n"
EDIT = "    model.model.layers[-1].mlp.act_fn = torch.nn.GELU()\n"
COMMENT = "    # the last layer's activation is GELU: a comment-only edit\n"
LIBRARIES = ("transformers.models.llama.modeling_llama",)
LOWERD_STAGES = ("load", "export", "partition", "preprocess", "emit", "write")

# Goals (issue 23); each gets a verdict, none fails the run.
EDIT_GOAL = 0.2  # one-layer edit at the deepest L / stock work on the edited model
PER_LAYER_GOAL = 1.0  # seconds an edit costs per added layer
COMMENT_GOAL = 2.0  # seconds, at the deepest L
COLD_GOAL = 0.6  # cold in-process / stock work
RSS_GOAL = 1.0  # peak RSS of lowerd's cold and edit builds / stock's


def edited(text: str, line: str) -> str:
    if text.count(ANCHOR) != 1:
        raise SystemExit(f"bench: expected one line {ANCHOR.strip()!r} in {MODEL_FILE}")
    return text.replace(ANCHOR, line + ANCHOR)


def edit_file(project: Path, line: str) -> None:
    path = project / MODEL_FILE
    path.write_text(edited(path.read_text(), line))


# The daemon's client: a fresh process, the build's stages from its progress frames -----------


def client_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """`lowerd build` through the project's running daemon, as the CLI asks it, with the
    progress frames timed as stages; the target's document and the stages."""
    started = time.perf_counter()
    from lowerd.cli.daemon_client import _daemon_for, ask, load_project
    from lowerd.daemon.rpc_messages import BuildCall, FinalFrame, ProgressFrame

    config = load_project(spec["config"])
    status = _daemon_for(config, start=False)
    if status is None:
        raise SystemExit("bench: no daemon serves the project")
    clock = StageClock()

    def on_frame(frame: ProgressFrame) -> None:
        clock.mark(frame.stage)

    asked = time.perf_counter()
    final = ask(status, BuildCall(str(config.path), (spec["target"],), True, 1), on_frame)
    clock.stop()
    answered = time.perf_counter()
    if not isinstance(final, FinalFrame) or final.document is None:
        raise SystemExit(f"bench: the daemon did not build: {final}")
    [found] = final.document["targets"]
    timing = {"seconds": answered - asked, "setup": asked - started, "stages": clock.seconds}
    timing["peak_rss"] = recorded_peak_rss(config, spec["target"], found["sha256"])
    return {"client": timing, "target": found}


def recorded_peak_rss(config: Any, target: str, sha256: str) -> int | None:
    """The peak RSS the build's worker (a fork of the daemon's fork server, one per build) kept
    in the target's record: its ru_maxrss, the fork server's pages it started with included.
    The worker writes it just after the record and before its result; the daemon may answer a
    verifying target's build before the record is written, so the record of this build's .pte
    is read again until it has one (a bench, not a test)."""
    from lowerd.project.build_state import load_state

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        state = load_state(config, config.targets[target])
        if state is not None and state.output.sha256 == sha256 and state.peak_rss:
            return int(state.peak_rss)
        time.sleep(0.1)
    return None


# The bench ----------------------------------------------------------------------------------


class Depth:
    """One depth L: three copies of the project (stock, lowerd in-process, the daemon's)."""

    def __init__(self, bench: Bench, layers: int):
        self.bench, self.layers = bench, layers
        root = bench.root / f"L{layers}"
        self.projects = {p: copy_project(PROJECT, root / p) for p in ("stock", "cold", "daemon")}
        for project in self.projects.values():
            set_constants_in_file(project / MODEL_FILE, bench.sizes(layers))
        self.cache = root / "cache-cold"
        # The daemon's blob cache, this depth's alone: a shallower model's layers are not served.
        self.env = bench_env(
            bench.snapshot, root / "cache-daemon", bench.runtime, HF_HUB_OFFLINE="1"
        )
        self.runs: dict[str, dict[str, Any]] = {}

    def measure(self) -> dict[str, dict[str, Any]]:
        runs = self.runs
        if self.bench.args.chain:
            if not self.bench.args.no_stock:
                runs["stock"] = self.stock("stock")
            runs["stock, shortcuts"] = self.stock("stock-shortcuts", shortcuts=True)
            return self.compared()
        runs["stock"] = self.stock("stock")
        runs["cold"] = self.cold()
        self.bench.start_daemon(self.projects["daemon"], self.env)
        try:
            runs["daemon cold"] = self.daemon_build("daemon-cold")
            for project in (self.projects["stock"], self.projects["daemon"]):
                edit_file(project, EDIT)
            runs["stock, edited"] = self.stock("stock-edited")
            runs["edit"] = self.daemon_build("daemon-edit")
            edit_file(self.projects["daemon"], COMMENT)
            runs["comment"] = self.daemon_build("daemon-comment")
        finally:
            self.bench.stop_daemon(self.projects["daemon"], self.env)
        edit_file(self.projects["cold"], EDIT)
        runs["edit, in-process"] = self.cold("edit-in-process")
        return self.compared()

    def compared(self) -> dict[str, dict[str, Any]]:
        """Each run's sha256 compared with stock's on the same model."""
        runs = self.runs
        for name, run in runs.items():
            edited = name in ("stock, edited", "edit", "comment", "edit, in-process")
            baseline = runs.get("stock, edited" if edited else "stock")
            # None: no stock run to compare with (--chain --no-stock)
            run["same"] = run["sha256"] == baseline["sha256"] if baseline else None
            log(f"[L={self.layers}] {name}: {describe(run)}")
        return runs

    def stock(self, what: str, shortcuts: bool = False) -> dict[str, Any]:
        """The stock script in a fresh process; with lowerd's exact shortcuts installed around
        its chain when `shortcuts`."""
        output = self.bench.root / "stock-results" / f"L{self.layers}-{what}.pte"
        output.parent.mkdir(exist_ok=True)
        spec = {"project": str(self.projects["stock"]), "entry": ENTRY, "output": str(output)}
        spec.update(libraries=list(LIBRARIES), substages=True, shortcuts=shortcuts)
        return self.bench.processes.worker("stock", spec, what=f"L{self.layers}-{what}")

    def cold(self, what: str = "cold") -> dict[str, Any]:
        """build_target in a fresh process on the cold project, with the cold cache (empty on
        the first build, the records and blobs of the last after it)."""
        spec = {"project": str(self.projects["cold"]), "target": "llama", "cache": str(self.cache)}
        # transformers' Llama imported before the clock starts, as the stock runs have it
        spec.update(libraries=list(LIBRARIES), substages=True)
        return self.bench.processes.worker("lowerd", spec, what=f"L{self.layers}-{what}")

    def daemon_build(self, what: str) -> dict[str, Any]:
        project = self.projects["daemon"]
        found = self.bench.client(project, self.env, "llama", f"L{self.layers}-{what}")
        if found["status"] != "ok":
            raise SystemExit(f"bench: {what} failed: {json.dumps(found.get('error'))}")
        forward = found["methods"]["forward"]
        return {
            "seconds": found["seconds"],  # the build, as lowerd reports it
            "client_seconds": found["client"]["seconds"],  # asked to answered, at the client
            "stages": found["client"]["stages"],
            "sha256": file_sha256(project / found["output"]),
            "reported_sha256": found["sha256"],
            "hits": found["cache"]["hits"],
            "misses": found["cache"]["misses"],
            "partitions": len(forward["partitions"]),
            "reused": found.get("reused"),
            "peak_rss": found["client"]["peak_rss"],  # the daemon's worker for this build
        }


class Bench:
    def __init__(self, root: Path, args: argparse.Namespace):
        self.root, self.args = root, args
        self.snapshot = snapshot_lowerd(root, args.lowerd_src)
        self.runtime = root / "run"  # XDG_RUNTIME_DIR: the daemons' sockets, status and logs
        self.env = bench_env(self.snapshot, None, self.runtime, HF_HUB_OFFLINE="1")
        self.processes = Processes(root, root, self.env, self.snapshot)
        self.results: dict[int, dict[str, dict[str, Any]]] = {}

    def sizes(self, layers: int) -> dict[str, int]:
        args = self.args
        return {
            "LAYERS": layers,
            "HIDDEN": args.hidden,
            "INTERMEDIATE": args.intermediate,
            "HEADS": args.heads,
            "KV_HEADS": args.kv_heads,
            "VOCAB": args.vocab,
            "TOKENS": args.tokens,
        }

    def client(self, project: Path, env: dict[str, str], target: str, what: str) -> dict[str, Any]:
        """client_worker in a fresh process: the target's document, its timing under "client"."""
        result = self.root / "results" / f"{self.processes.count + 1:03d}-{what}.json"
        result.parent.mkdir(exist_ok=True)
        spec = {"config": str(project / "pyproject.toml"), "target": target}
        command = [sys.executable, "-m", "bench.bench_depth", "--client", json.dumps(spec)]
        command.append(str(result))
        done = self.processes.run(command, what, cwd=project, env=worker_env(env))
        answer = json.loads(result.read_text())
        return {**answer["target"], "client": {**answer["client"], "wall_seconds": done.seconds}}

    def start_daemon(self, project: Path, env: dict[str, str]) -> None:
        self.processes.lowerd("daemon", "start", cwd=project, env=env)
        log(f"bench: daemon started for {project}; warming it with one build")
        self.client(project, env, "warmup", "warmup")

    def stop_daemon(self, project: Path, env: dict[str, str]) -> None:
        self.processes.lowerd("daemon", "stop", cwd=project, env=env)

    def run(self) -> None:
        check_snapshot_imported(self.env, self.root, self.snapshot)
        for layers in self.args.layers:
            self.results[layers] = Depth(self, layers).measure()


def describe(run: dict[str, Any]) -> str:
    text = f"{run['seconds']:.2f} s"
    if "hits" in run:
        text += f", {run['misses']} preprocessed, {run['hits']} reused"
    if run["same"] is None:
        return text + f", sha256 {run['sha256'][:16]} (no stock run)"
    return text + (", same sha256" if run["same"] else ", DIFFERENT sha256")


# Report ---------------------------------------------------------------------------------------


def summary_table(results: dict[int, dict[str, dict[str, Any]]]) -> str:
    titles = ["L", "partitions", "stock work", "cold", "cold/stock", "daemon cold"]
    titles += ["stock, edited", "edit", "edit/stock", "cache hit/miss", "comment", "= stock"]
    rows = []
    for layers, runs in results.items():
        stock, edited = runs["stock"]["seconds"], runs["stock, edited"]["seconds"]
        edit = runs["edit"]
        rows.append(
            [
                str(layers),
                str(runs["stock"]["partitions"]),
                f"{stock:.2f}",
                f"{runs['cold']['seconds']:.2f}",
                f"{runs['cold']['seconds'] / stock:.2f}x",
                f"{runs['daemon cold']['seconds']:.2f}",
                f"{edited:.2f}",
                f"{edit['seconds']:.2f}",
                f"{edit['seconds'] / edited:.2f}x",
                f"{edit['hits']}/{edit['misses']}",
                f"{runs['comment']['seconds']:.2f}",
                "yes" if all(run["same"] for run in runs.values()) else "NO",
            ]
        )
    return render(titles, rows)


def stage_table(results: dict[int, dict[str, dict[str, Any]]]) -> str:
    """Seconds per stage: lowerd's stages; stock's `lower` sits in the partition column."""
    titles = ["L", "run", *LOWERD_STAGES, "total"]
    rows = []
    for layers, runs in results.items():
        for name, run in runs.items():
            stages = dict(run["stages"])
            if "lower" in stages:  # stock: edge generation, partitioning and preprocess
                stages["partition"] = stages.pop("lower")
            cells = [f"{stages[s]:.2f}" if s in stages else "-" for s in LOWERD_STAGES]
            rows.append([str(layers), name, *cells, f"{run['seconds']:.2f}"])
    return render(titles, rows)


def substage_table(results: dict[int, dict[str, dict[str, Any]]]) -> str:
    """CPU seconds of each of ExecuTorch's sub-stages (bench/substages.py) per depth and run,
    for the runs that timed them in their own process, and each run's growth between
    consecutive depths (2.0x from L to 2L is linear in depth)."""
    depths = sorted(results)
    names = [name for name in results[depths[0]] if results[depths[0]][name].get("substages")]
    columns = [(layers, name) for name in names for layers in depths]
    pairs = [(name, a, b) for name in names for a, b in zip(depths, depths[1:], strict=False)]
    titles = ["CPU s", *(f"L={layers} {name}" for layers, name in columns)]
    titles += [f"{name} {a}->{b}" for name, a, b in pairs]

    def cpu(layers: int, name: str, row: str) -> float | None:
        run = results[layers].get(name, {})
        spent = run.get("substages") or {}
        if row == "rest":  # the run's CPU seconds outside every sub-stage
            return run["cpu_seconds"] - sum(s["cpu"] for s in spent.values())
        if row == "total":
            return float(run["cpu_seconds"])
        return spent[row]["cpu"] if row in spent else None

    rows = []
    for row in [*SUBSTAGES, "rest", "total"]:
        cells = [cpu(layers, name, row) for layers, name in columns]
        ratios = [ratio(cpu(a, name, row), cpu(b, name, row)) for name, a, b in pairs]
        rows.append([row, *("-" if c is None else f"{c:.2f}" for c in cells), *ratios])
    return render(titles, rows)


def ratio(before: float | None, after: float | None) -> str:
    return f"{after / before:.2f}x" if before and after is not None and before > 0.05 else "-"


def growth(results: dict[int, dict[str, dict[str, Any]]], run: str) -> list[float]:
    """Seconds per added layer between consecutive depths."""
    depths = sorted(results)
    return [
        (results[b][run]["seconds"] - results[a][run]["seconds"]) / (b - a)
        for a, b in zip(depths, depths[1:], strict=False)
    ]


def summary(results: dict[int, dict[str, dict[str, Any]]]) -> dict[int, dict[str, Any]]:
    """Per depth, the numbers the issue's goals name: cold / stock work, edit / stock work (on
    the edited model), the edit's seconds per layer added since the previous depth, the
    comment-only seconds, and each run's peak RSS (bytes; each its own process) with lowerd's
    over stock's: cold over stock, the edit (in-process, a fresh process like stock's) over the
    edited stock. A ratio is None where its runs are missing (--chain)."""
    found: dict[int, dict[str, Any]] = {}
    previous: int | None = None
    for layers in sorted(results):
        runs = results[layers]
        rss = {name: run.get("peak_rss") for name, run in runs.items()}
        row: dict[str, Any] = {"peak_rss": rss}
        row["cold_per_stock"] = per(runs, "cold", "stock", "seconds")
        row["edit_per_stock"] = per(runs, "edit", "stock, edited", "seconds")
        row["comment_seconds"] = runs["comment"]["seconds"] if "comment" in runs else None
        row["edit_seconds_per_layer"] = None
        if previous is not None and "edit" in runs:
            added = runs["edit"]["seconds"] - results[previous]["edit"]["seconds"]
            row["edit_seconds_per_layer"] = added / (layers - previous)
        row["rss_cold_per_stock"] = per(runs, "cold", "stock", "peak_rss")
        row["rss_edit_per_stock"] = per(runs, "edit, in-process", "stock, edited", "peak_rss")
        row["rss_shortcuts_per_stock"] = per(runs, "stock, shortcuts", "stock", "peak_rss")
        found[layers], previous = row, layers
    return found


def per(runs: dict[str, dict[str, Any]], run: str, baseline: str, key: str) -> float | None:
    top, bottom = runs.get(run, {}).get(key), runs.get(baseline, {}).get(key)
    return top / bottom if top and bottom else None


def goal_table(results: dict[int, dict[str, dict[str, Any]]]) -> str:
    """The summary per depth: the goals' ratios and every run's peak RSS (MB)."""
    rows_of = summary(results)
    names = list(dict.fromkeys(name for runs in results.values() for name in runs))
    titles = ["L", "cold/stock", "edit/stock", "edit s/added layer", "comment s"]
    titles += [f"RSS {name} MB" for name in names]
    titles += ["RSS cold/stock", "RSS edit/stock"]
    rows = []
    for layers, row in rows_of.items():
        rss = row["peak_rss"]
        cells = [str(layers), times(row["cold_per_stock"]), times(row["edit_per_stock"])]
        cells += [number(row["edit_seconds_per_layer"]), number(row["comment_seconds"])]
        cells += [number(rss[n] / 1e6 if rss.get(n) else None, "{:.0f}") for n in names]
        cells += [times(row["rss_cold_per_stock"]), times(row["rss_edit_per_stock"])]
        rows.append(cells)
    return render(titles, rows)


def times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def number(value: float | None, form: str = "{:.2f}") -> str:
    return "-" if value is None else form.format(value)


def goals(results: dict[int, dict[str, dict[str, Any]]]) -> list[str]:
    deepest = results[max(results)]
    edit = deepest["edit"]["seconds"] / deepest["stock, edited"]["seconds"]
    cold = max(runs["cold"]["seconds"] / runs["stock"]["seconds"] for runs in results.values())
    rss = [
        ratio
        for row in summary(results).values()
        for ratio in (row["rss_cold_per_stock"], row["rss_edit_per_stock"])
        if ratio is not None
    ]
    per_layer = growth(results, "edit")
    found = [
        (
            f"edit at L={max(results)}: {edit:.2f}x stock work (goal <= {EDIT_GOAL}x)",
            edit <= EDIT_GOAL,
        ),
        (
            "edit's seconds per added layer: "
            + ", ".join(f"{s:.2f}" for s in per_layer)
            + f" (goal <= {PER_LAYER_GOAL})",
            all(s <= PER_LAYER_GOAL for s in per_layer),
        ),
        (
            f"comment-only at L={max(results)}: {deepest['comment']['seconds']:.2f} s "
            f"(goal <= {COMMENT_GOAL} s)",
            deepest["comment"]["seconds"] <= COMMENT_GOAL,
        ),
        (
            f"cold in-process: at most {cold:.2f}x stock work (goal <= {COLD_GOAL}x)",
            cold <= COLD_GOAL,
        ),
        (
            f"peak RSS, cold and edit in-process: at most {max(rss, default=0):.2f}x stock's "
            f"(goal <= {RSS_GOAL}x)",
            bool(rss) and max(rss) <= RSS_GOAL,
        ),
        ("every lowerd .pte equals stock's, in every cell", all_same(results)),
    ]
    return verdicts(found)


def json_document(results: dict[int, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Every run's numbers under its depth, and the goals' ratios under "summary"."""
    document: dict[str, Any] = {str(layers): runs for layers, runs in results.items()}
    document["summary"] = {str(layers): row for layers, row in summary(results).items()}
    return document


def all_same(results: dict[int, dict[str, dict[str, Any]]]) -> bool:
    runs = [run for runs in results.values() for run in runs.values()]
    return all(run["same"] is not False for run in runs)


def print_report(bench: Bench, revision: str) -> None:
    args = bench.args
    print(installed_line(revision))
    print(
        f"LlamaForCausalLM: hidden {args.hidden}, intermediate {args.intermediate}, "
        f"{args.heads} heads / {args.kv_heads} kv, vocab {args.vocab}, {args.tokens} tokens; "
        "seconds of work after imports (lowerd's own count through the daemon); one run each"
    )
    if not args.chain:
        print(summary_table(bench.results))
        print("\nper stage (s):")
        print(stage_table(bench.results))
        for run in ("stock", "cold", "edit"):
            per_layer = ", ".join(f"{s:.2f}" for s in growth(bench.results, run))
            print(f"  {run}: seconds per added layer between depths: {per_layer}")
    print("\ngoals' ratios per depth, peak RSS of each run's process (--json: summary):")
    print(goal_table(bench.results))
    print("\nper sub-stage of ExecuTorch's lowering, CPU seconds (wall in --json):")
    print(substage_table(bench.results))
    if not args.chain:
        print()
        print("\n".join(goals(bench.results)))
    elif not all_same(bench.results):
        print("  [!!] the chain with lowerd's shortcuts gave other bytes than stock's")


# Command line ---------------------------------------------------------------------------------


def depths(text: str) -> list[int]:
    values = [int(part) for part in text.split(",")]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("layer counts are positive integers")
    return sorted(set(values))


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=depths, default=[4, 16, 32], help="default 4,16,32")
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--intermediate", type=int, default=1376)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument(
        "--chain",
        action="store_true",
        help="only the stock chain at each depth, in one process each: as it is, and with "
        "lowerd's exact shortcuts installed around it (sha256 compared); sub-stages timed",
    )
    parser.add_argument(
        "--no-stock",
        action="store_true",
        help="with --chain: the chain with the shortcuts only (its sha256 is compared with "
        "nothing: compare it with another run's stock)",
    )
    parser.add_argument("--json", metavar="FILE", help="also write every run's numbers to FILE")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir, and say where")
    parser.add_argument(
        "--lowerd-src",
        type=Path,
        metavar="DIR",
        help="measure the lowerd package in DIR (another checkout's src/lowerd: a before/after "
        "table); default: this repository's",
    )
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--client"]:  # a client process the bench started
        Path(argv[2]).write_text(json.dumps(client_worker(json.loads(argv[1]))))
        return 0
    args = parse_args(argv)
    with workdir("bench-depth-", args.keep) as root:
        bench, revision = Bench(root, args), lowerd_revision()
        bench.run()
        print_report(bench, revision)
        if args.json:
            write_json(args.json, json_document(bench.results))
        return 0 if all_same(bench.results) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
