"""Depth: a one-layer edit of an L-layer Llama, stock vs lowerd, stage by stage (issues 23, 31).

transformers' LlamaForCausalLM from a config (random weights, seeded; nothing downloaded), in
one of the flows users ship (--flow, bench/depth/models/llama.py), built at each depth L of
--layers:

    plain         no KV cache, logits out; lowerd's and stock's defaults
    static-cache  transformers' static-cache export wrapper, default SDPA, a dynamic sequence,
                  strict export under no_grad (transformers' convert_and_export_with_cache)
    custom-sdpa   the same, float, with ExecuTorch's custom SDPA and KV cache swapped in
    optimum       custom-sdpa in optimum-executorch 1.1.0's xnnpack recipe: torchao 8da4w (hqq,
                  linear_divisible), RemoveRedundantTransposes and a second export,
                  RemovePaddingIdxEmbeddingPass, its EdgeCompileConfig and ExecutorchBackendConfig,
                  the runner's 12 constant methods (testkit/stock_recipe.py writes it out)

For each flow and L, in one run:

    stock           the flow's stock script in a fresh process (testkit's stock chain)
    cold            lowerd's build_target in a fresh process, an empty cache, no build records
    stock, edited   stock again on the edited model: the baseline of `edit`
    edit            the last layer's MLP activation replaced
                    (`model.model.layers[-1].mlp.act_fn = GELU()`), built by a warm daemon
                    started on the cold run's project, cache and build records (warmed with one
                    unmeasured build of a one-op target that imports the flows' libraries)

and with --full, as before issue 31: `daemon cold` (the first build of the model through a warm
daemon on its own copy and cache, which then builds the edit), `comment` (a comment line on top
of that edit, built by the warm daemon) and `edit, in-process` (the edit built by build_target
in a fresh process with the cold run's cache and build records: the edit's sub-stages).

Every lowerd .pte is compared by sha256 with stock's on the same model (the bench exits 1 when
any differs). Each lowerd run records the path edge generation took: region_edge.py's debug
lines (`regional edge generation: R regions from T templates` or `stock edge generation: why`),
from its process or the daemon's log; `-` when there is none (regional generation not installed:
transform passes). Stage seconds are lowerd's progress stages (load, export, partition: edge
generation and the partitioner up to the first preprocess, preprocess: cutting the partitions
out and preprocessing them, emit, write) and stock's (load, quantize, export, lower, emit);
through the daemon they are read from the progress frames the client receives. The runs in a
process of the bench's own (stock, cold, edit in-process) also time ExecuTorch's sub-stages
inside those (bench/substages.py), in CPU and wall seconds. `--chain` runs only the stock chain
at each depth (plain flow), as it is and with lowerd's exact shortcuts installed around it (same
sha256): where the shortcuts' time goes, by sub-stage. `--llama-1b` is one run at
Llama-3.2-1B's shape (hidden 2048, 16 layers, 32/8 heads, intermediate 8192, vocab 128256, tied
embeddings; random weights from the config) in the optimum flow.

    nice -n 10 .venv/bin/python -m bench.bench_depth                      # L = 4,16,32, hidden 512
    .venv/bin/python -m bench.bench_depth --flow optimum,static-cache,custom-sdpa,plain \
        --layers 4,16 --hidden 256 --intermediate 688 --heads 8 --kv-heads 4
    .venv/bin/python -m bench.bench_depth --llama-1b
    .venv/bin/python -m bench.bench_depth --chain --layers 4,8,16         # sub-stages only
    .venv/bin/python -m bench.bench_depth --json depth.json --keep

Needs the `bench` extra (transformers). A script, not a test: nothing asserts on a timing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import (
    BENCH_DIR,
    EDGE_PATH,
    EXAMPLES,
    REPO,
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
ANCHOR = "    model = model.eval()  # ANCHOR: the edits go above this line\n"
EDIT = "    model.model.layers[-1].mlp.act_fn = torch.nn.GELU()\n"
COMMENT = "    # the last layer's activation is GELU: a comment-only edit\n"
LIBRARIES = ("transformers.models.llama.modeling_llama",)
LOWERD_STAGES = ("load", "export", "partition", "preprocess", "emit", "write")
STOCK_STAGES = ("load", "quantize", "export", "lower", "emit")
# What the cache flows' models import beside llama.py: the custom SDPA, the cache and the
# wrapper (examples/models/llm.py), optimum's passes (tests/projects/optimum/passes.py).
BESIDE = {
    "models/llm.py": EXAMPLES / "models" / "llm.py",
    "passes.py": REPO / "tests" / "projects" / "optimum" / "passes.py",
}
MAX_SEQ_LEN = 64  # examples/models/llm.py's: the cache flows' constant methods say it


@dataclass(frozen=True)
class Flow:
    """A flow: the target's settings in lowerd's config, and the stock script's (harness
    flow_recipe); None: the plain chain (testkit.stock_lowering.lower_stock)."""

    settings: str
    recipe: dict[str, Any] | None


STRICT = "export = { strict = true, no_grad = true }\n"
OPTIMUM = """quantize = { scheme = "8da4w", qparams_algorithm = "hqq_scale_only", \
filter = "linear_divisible" }
export = { strict = true, no_grad = true, module_passes = "models/llm.py:module_passes" }
transform_passes = "passes.py:transform_passes"
edge_compile_config = { _check_ir_validity = false, _skip_dim_order = true }
executorch_backend_config = { extract_delegate_segments = true, \
do_quant_fusion_and_const_prop = true }
memory_planning = { alloc_graph_input = false }
constant_methods = { get_dtype = 6, get_bos_id = 1, get_eos_id = 2, get_head_dim = {head_dim}, \
get_n_kv_heads = {kv_heads}, get_n_layers = {layers}, get_vocab_size = {vocab}, \
get_max_batch_size = 1, get_max_seq_len = {max_seq_len}, use_kv_cache = true, \
use_sdpa_with_kv_cache = true, enable_dynamic_shape = true }
"""
FLOWS = {
    "optimum": Flow(
        OPTIMUM,
        {
            "quantize": "8da4w",
            "optimum": {
                "module_passes": "models/llm.py:module_passes",
                "transform_passes": "passes.py:transform_passes",
                "custom_sdpa": True,
            },
        },
    ),
    "static-cache": Flow(STRICT, {"strict": True, "no_grad": True}),
    "custom-sdpa": Flow(STRICT, {"strict": True, "no_grad": True}),
    "plain": Flow("", None),
}
PYPROJECT = """# bench/bench_depth.py's copy of bench/depth, in flow {flow}.
[tool.lowerd]
backends = ["xnnpack"]
out_dir = "build"

[tool.lowerd.targets.llama]
entry = "{entry}"
{settings}
[tool.lowerd.targets.warmup]
entry = "models/warmup.py:make"
"""
# Llama-3.2-1B's config (--llama-1b), its weights random
LLAMA_1B = {"hidden": 2048, "intermediate": 8192, "heads": 32, "kv_heads": 8, "vocab": 128256}

# Goals (issues 23, 31); each gets a verdict, none fails the run.
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


def flow_project(project: Path, flow: str, sizes: dict[str, Any]) -> None:
    """The copy of bench/depth set to the flow and sizes: the model's constants, the target's
    settings, the files the cache flows' models import."""
    for name, source in BESIDE.items():
        shutil.copy(source, project / name)
    set_constants_in_file(project / MODEL_FILE, {**sizes, "FLOW": json.dumps(flow)})
    settings = FLOWS[flow].settings
    if flow == "optimum":
        values = {
            "head_dim": float(sizes["HIDDEN"] / sizes["HEADS"]),
            "kv_heads": sizes["KV_HEADS"],
            "layers": sizes["LAYERS"],
            "vocab": sizes["VOCAB"],
            "max_seq_len": MAX_SEQ_LEN,
        }
        for name, value in values.items():  # TOML's braces: no str.format
            settings = settings.replace(f"{{{name}}}", str(value))
    text = PYPROJECT.format(flow=flow, entry=ENTRY, settings=settings)
    (project / "pyproject.toml").write_text(text)


# The daemon's workers' edge-generation lines: the daemon's log at DEBUG would have them, with
# every library's debug records besides (executorch's print whole graph modules), which the
# measured edit would pay to write. So the measured processes import this as sitecustomize
# (the snapshot's folder is first on their PYTHONPATH): region_edge.py's logger alone at DEBUG,
# to the file $LOWERD_BENCH_EDGE_LOG, which the daemon's forked workers inherit.
EDGE_LOG = "LOWERD_BENCH_EDGE_LOG"
SITECUSTOMIZE = f"""import logging, os

if os.environ.get({EDGE_LOG!r}):
    _handler = logging.FileHandler(os.environ[{EDGE_LOG!r}])
    _handler.setLevel(logging.DEBUG)
    _logger = logging.getLogger("lowerd.lowering.region_edge")
    _logger.addHandler(_handler)
    _logger.setLevel(logging.DEBUG)
"""


def edge_log_size(path: Path) -> int:
    """Where the next build's lines start in the edge log."""
    return path.stat().st_size if path.exists() else 0


def edge_paths_since(path: Path, start: int) -> list[str]:
    """The edge-generation lines written to the edge log since `start`."""
    if not path.exists():
        return []
    with path.open("rb") as log_file:
        log_file.seek(start)
        text = log_file.read().decode(errors="replace")
    return [line for line in text.splitlines() if EDGE_PATH in line]


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
    """One flow at one depth L: copies of the project (stock, lowerd's; with --full the
    daemon's own)."""

    def __init__(self, bench: Bench, flow: str, layers: int):
        self.bench, self.flow, self.layers = bench, flow, layers
        self.name = f"{flow} L={layers}"
        root = bench.root / f"{flow}-L{layers}"
        names = ("stock", "cold", "daemon") if bench.args.full else ("stock", "cold")
        self.projects = {p: copy_project(PROJECT, root / p) for p in names}
        for project in self.projects.values():
            flow_project(project, flow, bench.sizes(layers))
        self.cache = root / "cache-cold"
        # --full: the daemon's blob cache, this cell's alone; else the cold run's, whose
        # project, records and cache the daemon builds the edit on.
        daemon_cache = root / "cache-daemon" if bench.args.full else self.cache
        self.daemon_project = self.projects["daemon" if bench.args.full else "cold"]
        self.env = bench_env(
            bench.snapshot,
            daemon_cache,
            bench.runtime,
            HF_HUB_OFFLINE="1",
            **{EDGE_LOG: str(root / "edge-daemon.log")},
        )
        self.edge_log = root / "edge-daemon.log"
        self.runs: dict[str, dict[str, Any]] = {}

    def measure(self) -> dict[str, dict[str, Any]]:
        full = self.bench.args.full
        if self.bench.args.chain:
            if not self.bench.args.no_stock:
                self.record("stock", self.stock("stock"))
            self.record("stock, shortcuts", self.stock("stock-shortcuts", shortcuts=True))
            return self.compared()
        self.record("stock", self.stock("stock"))
        self.record("cold", self.cold())
        self.bench.start_daemon(self.daemon_project, self.env)
        try:
            if full:
                self.record("daemon cold", self.daemon_build("daemon-cold"))
            for project in (self.projects["stock"], self.daemon_project):
                edit_file(project, EDIT)
            self.record("stock, edited", self.stock("stock-edited"))
            self.record("edit", self.daemon_build("daemon-edit"))
            if full:
                edit_file(self.daemon_project, COMMENT)
                self.record("comment", self.daemon_build("daemon-comment"))
        finally:
            self.bench.stop_daemon(self.daemon_project, self.env)
        if full:
            edit_file(self.projects["cold"], EDIT)
            self.record("edit, in-process", self.cold("edit-in-process"))
        return self.compared()

    def record(self, name: str, run: dict[str, Any]) -> None:
        """A run measured: said at once (a long cell, cut short, still tells how far it got)."""
        self.runs[name] = run
        rss = f", peak RSS {run['peak_rss'] / 1e6:.0f} MB" if run.get("peak_rss") else ""
        log(f"[{self.name}] measured {name}: {run['seconds']:.2f} s{rss}, sha256 {run['sha256']}")

    def compared(self) -> dict[str, dict[str, Any]]:
        """Each run's sha256 compared with stock's on the same model."""
        runs = self.runs
        for name, run in runs.items():
            edited = name in ("stock, edited", "edit", "comment", "edit, in-process")
            baseline = runs.get("stock, edited" if edited else "stock")
            # None: no stock run to compare with (--chain --no-stock)
            run["same"] = run["sha256"] == baseline["sha256"] if baseline else None
            log(f"[{self.name}] {name}: {describe(run)}")
        return runs

    def stock(self, what: str, shortcuts: bool = False) -> dict[str, Any]:
        """The flow's stock script in a fresh process; with lowerd's exact shortcuts installed
        around its chain when `shortcuts`."""
        output = self.bench.root / "stock-results" / f"{self.flow}-L{self.layers}-{what}.pte"
        output.parent.mkdir(exist_ok=True)
        spec = {"project": str(self.projects["stock"]), "entry": ENTRY, "output": str(output)}
        spec.update(libraries=list(LIBRARIES), substages=True, shortcuts=shortcuts)
        spec.update(recipe=FLOWS[self.flow].recipe)
        return self.bench.processes.worker("stock", spec, what=self.what(what))

    def cold(self, what: str = "cold") -> dict[str, Any]:
        """build_target in a fresh process on the cold project, with the cold cache (empty on
        the first build, the records and blobs of the last after it)."""
        spec = {"project": str(self.projects["cold"]), "target": "llama", "cache": str(self.cache)}
        # transformers' Llama imported before the clock starts, as the stock runs have it
        spec.update(libraries=list(LIBRARIES), substages=True)
        return self.bench.processes.worker("lowerd", spec, what=self.what(what))

    def what(self, run: str) -> str:
        return f"{self.flow}-L{self.layers}-{run}"

    def daemon_build(self, what: str) -> dict[str, Any]:
        project = self.daemon_project
        before = edge_log_size(self.edge_log)
        found = self.bench.client(project, self.env, "llama", self.what(what))
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
            "edge_path": edge_paths_since(self.edge_log, before),
        }


class Bench:
    def __init__(self, root: Path, args: argparse.Namespace):
        self.root, self.args = root, args
        self.snapshot = snapshot_lowerd(root, args.lowerd_src)
        (self.snapshot / "sitecustomize.py").write_text(SITECUSTOMIZE)
        self.runtime = root / "run"  # XDG_RUNTIME_DIR: the daemons' sockets, status and logs
        self.env = bench_env(self.snapshot, None, self.runtime, HF_HUB_OFFLINE="1")
        self.processes = Processes(root, root, self.env, self.snapshot)
        # flow -> L -> run -> numbers
        self.results: dict[str, Results] = {}

    def sizes(self, layers: int) -> dict[str, Any]:
        args = self.args
        return {
            "LAYERS": layers,
            "HIDDEN": args.hidden,
            "INTERMEDIATE": args.intermediate,
            "HEADS": args.heads,
            "KV_HEADS": args.kv_heads,
            "VOCAB": args.vocab,
            "TOKENS": args.tokens,
            "TIED": args.tied,
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
        for flow in self.args.flow:  # the tables' order
            self.results[flow] = {}
        for layers in self.args.layers:  # every flow at a depth before the next depth
            for flow in self.args.flow:
                self.results[flow][layers] = Depth(self, flow, layers).measure()
                if self.args.json:  # what is measured so far, should a later cell not end
                    write_json(self.args.json, json_document(self.results))


def describe(run: dict[str, Any]) -> str:
    text = f"{run['seconds']:.2f} s"
    if "hits" in run:
        text += f", {run['misses']} preprocessed, {run['hits']} reused"
    if run["same"] is None:
        return text + f", sha256 {run['sha256'][:16]} (no stock run)"
    return text + (", same sha256" if run["same"] else ", DIFFERENT sha256")


# Report ---------------------------------------------------------------------------------------


Results = dict[int, dict[str, dict[str, Any]]]  # one flow's: L -> run -> numbers


def seconds(run: dict[str, Any] | None) -> str:
    return "-" if run is None else f"{run['seconds']:.2f}"


def megabytes(run: dict[str, Any] | None) -> str:
    rss = run.get("peak_rss") if run else None
    return f"{rss / 1e6:.0f}" if rss else "-"


def edge_path(run: dict[str, Any] | None) -> str:
    """The edge-generation lines of a lowerd run, each once in order with its count; `-` for
    none."""
    if run is None or "edge_path" not in run:
        return ""
    counts: dict[str, int] = {}
    for line in run["edge_path"]:
        counts[line] = counts.get(line, 0) + 1
    lines = [line if n == 1 else f"{line} (x{n})" for line, n in counts.items()]
    return "; ".join(lines) if lines else "- (regional generation not installed)"


def cells_table(flows: dict[str, Results]) -> str:
    """One row per flow and L: stock, cold, the daemon's edit against stock on the edited
    model, the edit's cache hits and misses, peak RSS (MB: stock, cold, stock edited, edit),
    sha256 equality of every run of the cell."""
    titles = ["flow", "L", "partitions", "stock", "cold", "cold/stock", "stock, edited"]
    titles += ["edit", "edit/stock", "hit/miss", "RSS stock", "RSS cold", "RSS stock ed."]
    titles += ["RSS edit", "= stock"]
    rows = []
    for flow, results in flows.items():
        for layers, runs in results.items():
            stock, edited, edit = runs["stock"], runs["stock, edited"], runs["edit"]
            rows.append(
                [
                    flow,
                    str(layers),
                    str(stock["partitions"]),
                    seconds(stock),
                    seconds(runs["cold"]),
                    times(per(runs, "cold", "stock", "seconds")),
                    seconds(edited),
                    seconds(edit),
                    times(per(runs, "edit", "stock, edited", "seconds")),
                    f"{edit['hits']}/{edit['misses']}",
                    megabytes(stock),
                    megabytes(runs["cold"]),
                    megabytes(edited),
                    megabytes(edit),
                    "yes" if all(run["same"] for run in runs.values()) else "NO",
                ]
            )
    return render(titles, rows)


def path_table(flows: dict[str, Results]) -> str:
    """The path edge generation took in each lowerd run."""
    rows = [
        [flow, str(layers), name, edge_path(run)]
        for flow, results in flows.items()
        for layers, runs in results.items()
        for name, run in runs.items()
        if "edge_path" in run
    ]
    return render(["flow", "L", "run", "edge generation"], rows)


def stage_table(results: Results) -> str:
    """Seconds per stage: lowerd's stages; stock's `lower` sits in the partition column."""
    columns = ("load", "quantize", "export", "partition", "preprocess", "emit", "write")
    titles = ["L", "run", *columns, "total"]
    rows = []
    for layers, runs in results.items():
        for name, run in runs.items():
            stages = dict(run["stages"])
            if "lower" in stages:  # stock: edge generation, partitioning and preprocess
                stages["partition"] = stages.pop("lower")
            cells = [f"{stages[s]:.2f}" if s in stages else "-" for s in columns]
            rows.append([str(layers), name, *cells, f"{run['seconds']:.2f}"])
    return render(titles, rows)


def substage_table(results: Results) -> str:
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


def growth(results: Results, run: str) -> list[float]:
    """Seconds per added layer between consecutive depths."""
    depths = sorted(results)
    return [
        (results[b][run]["seconds"] - results[a][run]["seconds"]) / (b - a)
        for a, b in zip(depths, depths[1:], strict=False)
    ]


def summary(results: Results) -> dict[int, dict[str, Any]]:
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
        # the edit in a fresh process as stock's (--full), else the daemon's worker's
        edit = "edit, in-process" if "edit, in-process" in runs else "edit"
        row["rss_edit_per_stock"] = per(runs, edit, "stock, edited", "peak_rss")
        row["rss_shortcuts_per_stock"] = per(runs, "stock, shortcuts", "stock", "peak_rss")
        found[layers], previous = row, layers
    return found


def per(runs: dict[str, dict[str, Any]], run: str, baseline: str, key: str) -> float | None:
    top, bottom = runs.get(run, {}).get(key), runs.get(baseline, {}).get(key)
    return top / bottom if top and bottom else None


def goal_table(results: Results) -> str:
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


def goals(results: Results) -> list[str]:
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
        )
    ]
    if per_layer:
        found.append(
            (
                "edit's seconds per added layer: "
                + ", ".join(f"{s:.2f}" for s in per_layer)
                + f" (goal <= {PER_LAYER_GOAL})",
                all(s <= PER_LAYER_GOAL for s in per_layer),
            )
        )
    if "comment" in deepest:
        found.append(
            (
                f"comment-only at L={max(results)}: {deepest['comment']['seconds']:.2f} s "
                f"(goal <= {COMMENT_GOAL} s)",
                deepest["comment"]["seconds"] <= COMMENT_GOAL,
            )
        )
    found += [
        (
            f"cold in-process: at most {cold:.2f}x stock work (goal <= {COLD_GOAL}x)",
            cold <= COLD_GOAL,
        ),
        (
            f"peak RSS, cold and edit: at most {max(rss, default=0):.2f}x stock's "
            f"(goal <= {RSS_GOAL}x)",
            bool(rss) and max(rss) <= RSS_GOAL,
        ),
        ("every lowerd .pte equals stock's, in every cell", all_same(results)),
    ]
    return verdicts(found)


def json_document(flows: dict[str, Results]) -> dict[str, Any]:
    """Per flow, every run's numbers under its depth, and the goals' ratios under "summary"."""
    document: dict[str, Any] = {}
    for flow, results in flows.items():
        found: dict[str, Any] = {str(layers): runs for layers, runs in results.items()}
        found["summary"] = {str(layers): row for layers, row in summary(results).items()}
        document[flow] = found
    return document


def all_same(results: Results) -> bool:
    runs = [run for runs in results.values() for run in runs.values()]
    return all(run["same"] is not False for run in runs)


def print_report(bench: Bench, revision: str) -> None:
    args = bench.args
    print(installed_line(revision))
    print(
        f"LlamaForCausalLM: hidden {args.hidden}, intermediate {args.intermediate}, "
        f"{args.heads} heads / {args.kv_heads} kv, vocab {args.vocab}"
        + (", tied embeddings" if args.tied else "")
        + f", {args.tokens} tokens (plain; the cache flows: a dynamic sequence, cache of "
        f"{MAX_SEQ_LEN}); seconds of work after imports (lowerd's own count through the "
        "daemon), peak RSS in MB; one run each"
    )
    if not args.chain:
        print(cells_table(bench.results))
        print("\nedge generation's path (region_edge.py's debug lines):")
        print(path_table(bench.results))
    for flow, results in bench.results.items():
        print(f"\n== flow {flow}")
        if not args.chain:
            print("per stage (s):")
            print(stage_table(results))
            for run in ("stock", "cold", "edit") if len(results) > 1 else ():
                per_layer = ", ".join(f"{s:.2f}" for s in growth(results, run))
                print(f"  {run}: seconds per added layer between depths: {per_layer}")
        print("\ngoals' ratios per depth, peak RSS of each run's process (--json: summary):")
        print(goal_table(results))
        print("\nper sub-stage of ExecuTorch's lowering, CPU seconds (wall in --json):")
        print(substage_table(results))
        if not args.chain:
            print()
            print("\n".join(goals(results)))
        elif not all_same(results):
            print("  [!!] the chain with lowerd's shortcuts gave other bytes than stock's")
    if not all(all_same(results) for results in bench.results.values()):
        print("\n  [!!] SHA256 DIFFERS: a lowerd .pte is not stock's (the runs marked NO above)")


# Command line ---------------------------------------------------------------------------------


def depths(text: str) -> list[int]:
    values = [int(part) for part in text.split(",")]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("layer counts are positive integers")
    return sorted(set(values))


def flows(text: str) -> list[str]:
    names = text.split(",")
    unknown = [name for name in names if name not in FLOWS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown flows {unknown}; known: {list(FLOWS)}")
    return list(dict.fromkeys(names))


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=depths, default=[4, 16, 32], help="default 4,16,32")
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--intermediate", type=int, default=1376)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--tokens", type=int, default=64, help="plain: the input's length")
    parser.add_argument("--tied", action="store_true", help="the head shares the embedding")
    parser.add_argument(
        "--flow",
        type=flows,
        default=["plain"],
        help=f"comma-separated, of {', '.join(FLOWS)} (default plain)",
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help="also daemon cold (on its own copy), comment and edit, in-process (see above)",
    )
    parser.add_argument(
        "--llama-1b",
        action="store_true",
        help="Llama-3.2-1B's shape in the optimum flow at 16 layers (sizes and --flow ignored)",
    )
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
    args = parser.parse_args(argv)
    if args.chain and args.flow != ["plain"]:
        parser.error("--chain measures the plain flow's chain")
    if args.llama_1b:
        for name, value in LLAMA_1B.items():
            setattr(args, name, value)
        args.layers, args.flow, args.tied = [16], ["optimum"], True
    return args


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
        same = all(all_same(results) for results in bench.results.values())
        return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
