"""Real models (Hugging Face transformers), stock ExecuTorch vs lowerd, edit by edit, in one run.

The models of bench/real, each built from a config with random weights (nothing is downloaded):

    resnet   transformers' ResNet-18 (basic blocks [2, 2, 2, 2]): one XNNPACK partition
    llama    a Llama-style causal LM from LlamaConfig (4 layers, hidden size 128): logits
    int8     transformers' MobileNetV2, quantized by its entry with the documented PT2E flow
             (XNNPACKQuantizer + get_symmetric_quantization_config, prepare_pt2e, two
             calibration inputs, convert_pt2e)

For each model, the scenarios a user meets one after the other, each edit a line inserted in the
model's make() (on top of the previous ones), the model file rewritten atomically:

    cold       an empty cache, no build records
    comment    a comment line
    head       an op after the classifier (a forward hook: relu, or for the LM logits / 0.7)
    middle     the same kind of op after a block in the middle of the backbone
    weight     one layer's weights in that block scaled by 1.25

Each cell runs three ways, each a fresh process timed from outside, on its own copy of the
project (so one path's build records never serve another's):

    stock       the stock script (import; torch.export; to_edge_transform_and_lower with
                XnnpackPartitioner; to_executorch; write): its whole process, and its work after
                the imports (torch, ExecuTorch and the model's libraries, transformers included)
    in-process  `lowerd build --no-daemon --json TARGET`: the whole process
    daemon      `lowerd build --json TARGET` with the project's daemon running: started once, warmed
                with one unmeasured build of a one-op target, and kept across every scenario and
                model, as an editor session keeps it (the client's whole process)

The .pte file each lowerd path leaves is compared with stock's by sha256: the bench exits 1 when
any differs. Caches, runtime folder (the daemon's socket) and logs live in a temp dir; the lowerd
processes import a snapshot of lowerd's source taken at the start.

    nice -n 10 .venv/bin/python -m bench.bench_real             # full size: ~35 minutes
    nice -n 10 .venv/bin/python -m bench.bench_real --small     # tiny configs: a smoke run
    .venv/bin/python -m bench.bench_real --models resnet,llama --repeat 3

Needs the `bench` extra (`pip install -e '.[bench]'`: transformers). This is a script, not a
test: nothing asserts on a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import (
    OUT_DIR,
    REAL_PROJECT,
    Processes,
    bench_env,
    build_numbers,
    check_snapshot_imported,
    installed_line,
    log,
    lowerd_revision,
    median_of,
    render,
    restore_state,
    reuse,
    save_state,
    set_constants_in_file,
    snapshot_lowerd,
    verdicts,
    workdir,
    write_json,
)
from testkit.projects import copy_project

# Every edit is a line inserted just above this line of the model's make().
ANCHOR = "    model = Logits(model).eval()\n"
COMMENT = "    # Built from its config with random weights: nothing is downloaded.\n"
PATHS = ("stock", "in-process", "daemon")

# Goals (issue 10); each gets a verdict in the report, none fails the run.
HEAD_GOAL = 0.2  # resnet head op through the daemon / stock work
INT8_GOAL = 0.2  # int8 one-line edit / a stock process
WEIGHT_GOAL = 0.3  # resnet weight-only edit through the daemon / stock work
COLD_GOAL = 1.05  # cold / stock, like for like


@dataclass(frozen=True)
class RealModel:
    target: str  # in bench/real/pyproject.toml
    file: str  # the entry's file, where the edits go
    title: str
    small_title: str
    # Imported by the stock process before its clock starts: a warm session has them.
    libraries: tuple[str, ...]
    edits: dict[str, str]  # scenario -> the line inserted (comment: COMMENT)


_RELU = "register_forward_hook(lambda _m, _i, out: torch.relu(out))"
MODELS = {
    "resnet": RealModel(
        "resnet",
        "models/resnet.py",
        "transformers ResNet-18 (basic blocks [2, 2, 2, 2], 1000 classes), 1x3x224x224",
        "transformers ResNet, depths [1, 1], widths [16, 32], 1000 classes, 1x3x32x32",
        ("transformers.models.resnet.modeling_resnet",),
        {
            "head": f"    model.classifier.{_RELU}\n",
            "middle": f"    model.resnet.encoder.stages[1].{_RELU}\n",
            "weight": "    model.resnet.encoder.stages[1].layers[0].layer[0]"
            ".convolution.weight.data.mul_(1.25)\n",
        },
    ),
    "llama": RealModel(
        "llama",
        "models/llama.py",
        "LlamaForCausalLM from LlamaConfig: 4 layers, hidden 128, 4 heads (2 kv), vocab 32000, "
        "64 tokens, no KV cache",
        "LlamaForCausalLM: 2 layers, hidden 32, vocab 256, 8 tokens",
        ("transformers.models.llama.modeling_llama",),
        {
            "head": "    model.lm_head.register_forward_hook(lambda _m, _i, out: out / 0.7)\n",
            "middle": f"    model.model.layers[1].mlp.{_RELU}\n",
            "weight": "    model.model.layers[1].mlp.down_proj.weight.data.mul_(1.25)\n",
        },
    ),
    "int8": RealModel(
        "int8",
        "models/mobilenet_int8.py",
        "transformers MobileNetV2 (width 1.0, 1000 classes), 1x3x224x224, PT2E int8 "
        "(XNNPACKQuantizer, symmetric config, 2 calibration inputs)",
        "transformers MobileNetV2, width 0.35, 1x3x64x64, PT2E int8",
        (
            "transformers.models.mobilenet_v2.modeling_mobilenet_v2",
            "executorch.backends.xnnpack.quantizer.xnnpack_quantizer",
            "torchao.quantization.pt2e.quantize_pt2e",
        ),
        {
            "head": f"    model.classifier.{_RELU}\n",
            "middle": f"    model.mobilenet_v2.layer[8].{_RELU}\n",
            "weight": "    model.mobilenet_v2.layer[8].reduce_1x1"
            ".convolution.weight.data.mul_(1.25)\n",
        },
    ),
}
SCENARIOS = (  # (key, name); each edit applies on top of the previous one
    ("cold", "cold"),
    ("comment", "comment-only"),
    ("head", "head op"),
    ("middle", "middle op"),
    ("weight", "weight-only"),
)


def edited(text: str, line: str) -> str:
    if text.count(ANCHOR) != 1:
        raise SystemExit(f"bench: expected one line {ANCHOR.strip()!r} in the model file")
    return text.replace(ANCHOR, line + ANCHOR)


def write_atomically(path: Path, text: str) -> None:
    """As an editor saves: a temp file next to it, renamed over it."""
    temp = path.with_name(f".{path.name}.bench-tmp")
    temp.write_text(text)
    os.replace(temp, path)


# The bench ---------------------------------------------------------------------------------


@dataclass
class Cell:
    """One scenario of one model: the runs of each path (several with --repeat)."""

    runs: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {p: [] for p in PATHS})

    def median(self, path: str, key: str) -> float:
        return median_of(self.runs[path], key)

    def last(self, path: str) -> dict[str, Any]:
        return self.runs[path][-1]

    def same(self, path: str) -> bool:
        stock = self.last("stock")["sha256"]
        return all(run["sha256"] == stock for run in self.runs[path])


def copy_real_project(where: Path, small: bool) -> Path:
    """A copy of bench/real, its models sized by --small."""
    project = copy_project(REAL_PROJECT, where)
    set_constants_in_file(project / "models" / "common.py", {"SMALL": small})
    return project


class Bench:
    def __init__(self, root: Path, args: argparse.Namespace):
        self.root, self.args = root, args
        self.lowerd_source = snapshot_lowerd(root)
        self.runtime = root / "run"  # XDG_RUNTIME_DIR: the daemon's socket, status and log
        # One copy of the project per path, each with its own cache: the same edits on each.
        self.projects = {path: copy_real_project(root / path, args.small) for path in PATHS}
        self.caches = {path: root / f"cache-{path}" for path in PATHS}
        self.envs = {
            path: bench_env(self.lowerd_source, self.caches[path], self.runtime, HF_HUB_OFFLINE="1")
            for path in PATHS
        }
        self.processes = Processes(
            root, self.projects["stock"], self.envs["stock"], self.lowerd_source
        )
        self.results: dict[str, dict[str, Cell]] = {}
        self.daemon_pid: str | None = None

    def lowerd(self, command: str, *args: str) -> str:
        """`python -m lowerd COMMAND ARGS` on the path's project; its stdout."""
        path = "in-process" if "--no-daemon" in args else "daemon"
        return self.lowerd_timed(path, command, *args)[1]

    def lowerd_timed(self, path: str, command: str, *args: str) -> tuple[float, str]:
        where = {"cwd": self.projects[path], "env": self.envs[path]}
        done = self.processes.lowerd(command, *args, what=f"{path}-{command}", **where)
        errors = done.log.read_text()
        if "building in this process" in errors or "not using a daemon" in errors:
            raise SystemExit(f"bench: {command} did not go through the daemon; see {done.log}")
        return done.seconds, done.stdout

    # The daemon

    def start_daemon(self) -> None:
        said = self.lowerd("daemon", "start")
        self.daemon_pid = said.split()[1]
        log(f"bench: daemon {self.daemon_pid} started; warming it with one build")
        self.build("daemon", "warmup")

    def stop_daemon(self) -> None:
        if self.daemon_pid is None:
            return
        said = self.lowerd("daemon", "status")
        if self.daemon_pid not in said.split():
            log(f"bench: the daemon was replaced during the run:\n{said}")
        self.lowerd("daemon", "stop")

    def check_snapshot(self) -> None:
        check_snapshot_imported(self.envs["stock"], self.projects["stock"], self.lowerd_source)

    # One run of each kind

    def stock(self, model: RealModel) -> dict[str, Any]:
        """The stock worker, after the model's own libraries are imported too."""
        output = self.root / "stock-results" / f"{self.processes.count + 1}.pte"
        output.parent.mkdir(exist_ok=True)
        spec = {"project": str(self.projects["stock"]), "entry": f"{model.file}:make"}
        spec.update(output=str(output), libraries=list(model.libraries))
        return self.processes.worker("stock", spec, what=f"stock-{model.target}")

    def build(self, path: str, target: str) -> dict[str, Any]:
        flags = ["--no-daemon"] if path == "in-process" else []
        seconds, stdout = self.lowerd_timed(path, "build", "--json", *flags, target)
        [found] = json.loads(stdout)["targets"]
        if found["status"] != "ok":
            raise SystemExit(f"bench: lowerd build {target} ({path}) failed: {found['error']}")
        qparams = found.get("memo", {}).get("qparams", {})
        forward = found["methods"].get("forward", {})
        return {
            "wall_seconds": seconds,
            "seconds": found["seconds"],  # the build itself, as lowerd reports it
            **build_numbers(found, self.projects[path]),
            "qparams": f"{qparams['hits']}/{qparams['misses']}" if qparams else "-",
            "partitions": len(forward.get("partitions", [])),
            "ops": f"{forward.get('ops_delegated')}/{forward.get('ops')}" if forward else None,
        }

    # State: lowerd's blob cache and build records (in out_dir), saved and put back for --repeat

    def save_state(self, path: str) -> Path:
        saved = self.root / "states" / path
        return save_state(self.caches[path], self.projects[path] / OUT_DIR, saved)

    def restore_state(self, path: str, saved: Path | None) -> None:
        restore_state(self.caches[path], self.projects[path] / OUT_DIR, saved)

    # The scenarios

    def measure(self, model: RealModel) -> dict[str, Cell]:
        cells = self.results[model.target] = {}
        for key, name in SCENARIOS:
            if key != "cold":
                line = COMMENT if key == "comment" else model.edits[key]
                for project in self.projects.values():
                    file = project / model.file
                    write_atomically(file, edited(file.read_text(), line))
            cell = cells[key] = Cell()
            # With --repeat, every run of the scenario starts where the last scenario ended.
            starts: dict[str, Path | None] = {}
            if self.args.repeat > 1:
                starts = {p: None if key == "cold" else self.save_state(p) for p in PATHS[1:]}
            for round_ in range(self.args.repeat):
                cell.runs["stock"].append(self.stock(model))
                for path in PATHS[1:]:
                    if round_:
                        self.restore_state(path, starts[path])
                    cell.runs[path].append(self.build(path, model.target))
                log(f"[{model.target}] {name}: {describe(cell, round_)}")
        return cells


def describe(cell: Cell, round_: int) -> str:
    stock = cell.runs["stock"][round_]
    text = f"stock {stock['wall_seconds']:.1f} s ({stock['seconds']:.1f} s work)"
    for path in PATHS[1:]:
        run = cell.runs[path][round_]
        same = "same" if run["sha256"] == stock["sha256"] else "DIFFERENT"
        text += f"; {path} {run['wall_seconds']:.1f} s ({reuse(run)}, qparams {run['qparams']}, "
        text += f"{same} sha256)"
    return text


# Report ------------------------------------------------------------------------------------


def model_header(model: RealModel, cells: dict[str, Cell], small: bool) -> str:
    cold = cells["cold"].last("daemon")
    title = model.small_title if small else model.title
    return (
        f"{model.target}: {title}\n  {cold['partitions']} XNNPACK partitions, "
        f"{cold['ops']} ops delegated"
    )


def one_or_each(values: list[str]) -> str:
    """The in-process and daemon paths' value once when they agree, else both."""
    return values[0] if len(set(values)) == 1 else " | ".join(values)


def format_table(cells: dict[str, Cell]) -> str:
    titles = [
        "scenario",
        "stock proc s",
        "stock work s",
        "in-proc s",
        "daemon s",
        "dmn/work",
        "in-proc/proc",
        "dmn/proc",
        "preproc/reused/rebased",
        "qparams hit/miss",
        "= stock (in-proc, daemon)",
    ]
    rows = []
    for key, name in SCENARIOS:
        cell = cells[key]
        proc, work = cell.median("stock", "wall_seconds"), cell.median("stock", "seconds")
        local, daemon = (cell.median(p, "wall_seconds") for p in PATHS[1:])
        rows.append(
            [
                name,
                *(f"{seconds:.2f}" for seconds in (proc, work, local, daemon)),
                *(f"{value:.2f}x" for value in (daemon / work, local / proc, daemon / proc)),
                one_or_each([reuse(cell.last(p)) for p in PATHS[1:]]),
                one_or_each([cell.last(p)["qparams"] for p in PATHS[1:]]),
                ", ".join("yes" if cell.same(p) else "NO" for p in PATHS[1:]),
            ]
        )
    return render(titles, rows)


def time_table(cells: dict[str, Cell]) -> str:
    """Where the time goes: stock's stages (load = import the model file and call make(), the
    quantization included) and each lowerd path's build (its own count) against its process."""
    stages = ("load", "export", "lower", "emit")
    titles = ["scenario", "stock import", *stages, "in-proc build/proc", "daemon build/proc"]
    rows = []
    for key, name in SCENARIOS:
        stock = cells[key].runs["stock"]
        row = [name, f"{statistics.median(run['import_seconds'] for run in stock):.2f}"]
        row += [
            f"{statistics.median(run['stages'].get(s, 0.0) for run in stock):.2f}" for s in stages
        ]
        for path in PATHS[1:]:
            build = cells[key].median(path, "seconds")
            row.append(f"{build:.2f}/{cells[key].median(path, 'wall_seconds'):.2f}")
        rows.append(row)
    return render(titles, rows)


def goals(results: dict[str, dict[str, Cell]]) -> list[str]:
    found: list[tuple[str, bool]] = []

    def ratio(model: str, key: str, path: str, baseline: str) -> float:
        cell = results[model][key]
        return cell.median(path, "wall_seconds") / cell.median("stock", baseline)

    if "resnet" in results:
        for key, goal in (("head", HEAD_GOAL), ("weight", WEIGHT_GOAL)):
            value = ratio("resnet", key, "daemon", "seconds")
            text = (
                f"resnet {key} edit through the daemon: {value:.2f}x stock work (goal <= {goal}x)"
            )
            found.append((text, round(value, 2) <= goal))
    if "int8" in results:
        for path in PATHS[1:]:
            value = ratio("int8", "head", path, "wall_seconds")
            text = f"int8 head edit, {path}: {value:.2f}x a stock process (goal <= {INT8_GOAL}x)"
            found.append((text, round(value, 2) <= INT8_GOAL))
    for model in results:
        value = ratio(model, "cold", "in-process", "wall_seconds")
        text = f"{model} cold, in-process: {value:.2f}x a stock process (goal <= {COLD_GOAL}x)"
        found.append((text, round(value, 2) <= COLD_GOAL))
        value = ratio(model, "cold", "daemon", "seconds")
        text = f"{model} cold, daemon: {value:.2f}x stock work (goal <= {COLD_GOAL}x)"
        found.append((text, round(value, 2) <= COLD_GOAL))
    found.append(("every lowerd .pte equals stock's, in every cell", all_same(results)))
    reported = all(
        run["sha256"] == run["reported_sha256"]
        for cells in results.values()
        for cell in cells.values()
        for path in PATHS[1:]
        for run in cell.runs[path]
    )
    found.append(("lowerd's reports name the sha256 of the files it left", reported))
    return verdicts(found)


def all_same(results: dict[str, dict[str, Cell]]) -> bool:
    return all(
        cell.same(path)
        for cells in results.values()
        for cell in cells.values()
        for path in PATHS[1:]
    )


def print_report(bench: Bench, revision: str) -> None:
    args = bench.args
    note = f"medians of {args.repeat} runs" if args.repeat > 1 else "one run each"
    print(installed_line(revision))
    if args.small:
        print("SMALL CONFIGS (--small): a smoke run of the script, not the benchmark's numbers")
    print(
        "seconds of whole processes timed from outside, but 'stock work s': the stock process's "
        "work after its imports (torch, ExecuTorch, the model's libraries); dmn = through the "
        f"daemon; preproc/reused/rebased = partitions; qparams = histogram searches ({note})"
    )
    for target, cells in bench.results.items():
        print(f"\n{model_header(MODELS[target], cells, args.small)}")
        print(format_table(cells))
        print(f"  where the time goes (s):\n{time_table(cells)}")
    print()
    print("\n".join(goals(bench.results)))


# Command line ------------------------------------------------------------------------------


def model_names(text: str) -> list[str]:
    names = text.split(",")
    if unknown := sorted(set(names) - set(MODELS)):
        raise argparse.ArgumentTypeError(f"unknown models {unknown}; known: {', '.join(MODELS)}")
    return names


def positive(text: str) -> int:
    if (number := int(text)) < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--models",
        type=model_names,
        default=list(MODELS),
        help=f"comma-separated, of {','.join(MODELS)} (default all)",
    )
    parser.add_argument("--small", action="store_true", help="tiny configs: a smoke run")
    parser.add_argument("--repeat", type=positive, default=1, help="runs per cell; medians shown")
    parser.add_argument("--json", metavar="FILE", help="also write every run's numbers to FILE")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir, and say where")
    return parser.parse_args(argv)


def run_bench(args: argparse.Namespace) -> bool:
    """The whole run, in a temp dir; True when every lowerd .pte equals stock's."""
    with workdir("bench-real-", args.keep) as root:
        bench, revision = Bench(root, args), lowerd_revision()
        bench.check_snapshot()
        bench.start_daemon()
        try:
            for target in args.models:
                bench.measure(MODELS[target])
        finally:
            bench.stop_daemon()
        print_report(bench, revision)
        if args.json:
            runs = {t: {k: c.runs for k, c in cells.items()} for t, cells in bench.results.items()}
            write_json(args.json, runs)
        return all_same(bench.results)


def main(argv: list[str]) -> int:
    return 0 if run_bench(parse_args(argv)) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
