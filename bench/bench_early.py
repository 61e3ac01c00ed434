"""Early reports: how soon a one-layer edit of an L-layer Llama is shown, provisional then exact
(issue 23 §4).

bench/depth's Llama (transformers' LlamaForCausalLM from a config, hidden 512, random weights),
L layers, in one of bench_depth's flows (--flow: plain, or optimum's recipe with its KV cache,
custom SDPA, 8da4w, module and transform passes; --hidden and the other sizes as bench_depth's).
For each L of --layers, in a temp copy of the project with its own blob cache: a cold
build (a fresh process, unmeasured), then bench_depth's edit (the last layer's MLP activation
replaced by GELU) built by lowerd's build_target in a fresh process in the state a daemon's
worker is forked in (worker/forkserver.py warm_up: the engine imported, a one-op model lowered,
the heap frozen out of the garbage collector; transformers imported, as the fork server does after
a first build). From the build's start, wall and CPU seconds to:

    loaded        the provisional report of the last build's refusals outside the edited
                  modules, right after load (build.py _report_loaded)
    region        the provisional report of the edited modules lowered alone (after load)
    moved         the provisional report with the last build's lines moved (after export)
    exact         the edited program's partitioned report (before preprocess and emit)
    done          the result

and the stages (load, export, partition, ...) as lowerd's progress says them. In an editor, the
daemon adds its debounce (0.2 s) and a fork to each. A script, not a test: nothing asserts on a
timing.

    nice -n 10 .venv/bin/python -m bench.bench_early                 # L = 8, 32
    .venv/bin/python -m bench.bench_early --layers 2 --json early.json
    nice -n 10 .venv/bin/python -m bench.bench_early --flow optimum --layers 16 --hidden 256 \
        --intermediate 688
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.bench_depth import EDIT, FLOWS, PROJECT, edit_file, flow_project
from bench.harness import log
from testkit.projects import copy_project

EVENTS = ("loaded", "region", "moved", "exact", "done")
# bench_depth's sizes (its defaults), set by the options of the same names
SIZES = {"hidden": 512, "intermediate": 1376, "heads": 8, "kv_heads": 4, "vocab": 32000}


def build_in_this_process(project: Path, region: bool = True) -> dict[str, Any]:
    """The target built here once the worker's imports are done, each report and stage timed;
    without `region`, with no edited region (lowerd before it), for the exact report's cost."""
    import importlib

    from lowerd.lowering import build, edited_region
    from lowerd.lowering.edited_region import captured_calls, edited_regions
    from lowerd.project.config import load_config
    from lowerd.project.project_store import store_for
    from lowerd.project.report_model import MethodReport
    from lowerd.worker.forkserver import warm_up

    from bench.depth.models.warmup import LIBRARIES

    for library in LIBRARIES:  # what the fork server keeps warm after a first build
        importlib.import_module(library)
    warm_up(["xnnpack"])  # the fork server's one-op lowering and frozen heap, as a worker has
    os.chdir(project)
    config = load_config(project / "pyproject.toml")
    store = store_for(config)
    marks: list[tuple[str, float, float]] = []
    started, cpu = time.perf_counter(), time.process_time()

    def mark(what: str) -> None:
        marks.append((what, time.perf_counter() - started, time.process_time() - cpu))

    def progress(stage: str, target: str, detail: str | None) -> None:
        if not marks or marks[-1][0] != f"stage {stage}":
            mark(f"stage {stage}")

    def partitioned(method: str, report: MethodReport) -> None:
        if not report.provisional:
            mark("exact")
        elif any(m[0] == "stage export" for m in marks):
            mark("moved")
        else:
            mark("region" if any(m[0] == "region lowering starts" for m in marks) else "loaded")
        refused = sorted({(op.op, op.module_path or "") for op in report.not_delegated})
        marks.append((f"  {len(refused)} refused ops, e.g. {refused[-1:]}", 0.0, 0.0))

    def timed_regions(*args: Any) -> Any:  # the edited region's own cost, start to end
        mark("region lowering starts")
        try:
            return edited_regions(*args) if region else {}
        finally:
            mark("region lowering ends")

    def timed_inputs(*args: Any) -> Any:  # the region's fake forward, up to the last root
        try:
            return captured_calls(*args)
        finally:
            mark("region's inputs captured")

    build.edited_regions = timed_regions  # type: ignore[assignment,attr-defined]
    edited_region.captured_calls = timed_inputs  # type: ignore[assignment]
    target = config.targets["llama"]
    result = build.build_target(config, target, store, progress, on_partitioned=partitioned)
    mark("done")
    return {"status": result.status, "sha256": result.sha256, "marks": marks}


def measure(root: Path, flow: str, sizes: dict[str, Any], region: bool) -> dict[str, Any]:
    layers = sizes["LAYERS"]
    project = copy_project(PROJECT, root / f"L{layers}")
    flow_project(project, flow, sizes)
    env = {**os.environ, "LOWERD_CACHE_DIR": str(root / f"cache-L{layers}"), "HF_HUB_OFFLINE": "1"}
    log(f"[L={layers}] cold build (unmeasured)")
    _built(project, env)
    edit_file(project, EDIT)
    time.sleep(0.1)  # past the build record's mtime granularity, as a save before a build is
    log(f"[L={layers}] the edit")
    return _built(project, env, [] if region else ["--no-region"])


def _built(project: Path, env: dict[str, str], options: Sequence[str] = ()) -> dict[str, Any]:
    command = [sys.executable, "-m", "bench.bench_early", "--build", str(project), *options]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"bench: the build failed:\n{done.stderr[-3000:]}")
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if answer["status"] != "ok":
        raise SystemExit(f"bench: the build's result: {answer}")
    return answer


def table(results: dict[int, dict[str, Any]]) -> str:
    lines = []
    for layers, run in results.items():
        lines.append(f"L = {layers}")
        for what, wall, cpu in run["marks"]:
            lines.append(f"  {what:<36} {wall:8.2f} s wall {cpu:8.2f} s CPU" if wall else what)
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default="8,32", help="depths, comma-separated")
    parser.add_argument("--flow", choices=sorted(FLOWS), default="plain")
    for size, default in SIZES.items():
        parser.add_argument(f"--{size.replace('_', '-')}", type=int, default=default)
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument(
        "--no-region", action="store_true", help="the edit without its edited region (before)"
    )
    parser.add_argument("--build", type=Path, help=argparse.SUPPRESS)  # the measured process
    args = parser.parse_args(argv)
    if args.build:
        print(json.dumps(build_in_this_process(args.build, not args.no_region)))
        return 0
    results = {}
    with tempfile.TemporaryDirectory(prefix="lowerd-early-") as temp:
        for layers in (int(part) for part in args.layers.split(",")):
            sizes = {name.upper(): getattr(args, name) for name in SIZES}
            sizes.update(LAYERS=layers, TOKENS=64, TIED=False)
            results[layers] = measure(Path(temp), args.flow, sizes, not args.no_region)
            log(table({layers: results[layers]}))
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
