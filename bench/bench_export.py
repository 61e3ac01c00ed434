"""Where the export stage's time goes at depth, in optimum-executorch's recipe, by sub-stage.

lowerd's export stage (lowering/export_call.py) runs what optimum's integrations.py runs: under
no_grad, a strict torch.export, `ep.module()`, the module passes (RemoveRedundantTransposes), a
second strict export. This bench runs that stage, `export_method` itself, on a transformers Llama
in optimum's custom flow (custom SDPA, ExecuTorch's KV cache, torchao 8da4w with hqq_scale_only
and linear_divisible, dynamic sequence), at each depth given, one fresh process per depth, and
charges CPU seconds (time.process_time: the machine is shared, wall time is not comparable) to
the torch functions the stage calls, exclusively (a sub-stage inside another is its own):

    dynamo        torch.export._trace._export_to_torch_ir: TorchDynamo's trace (strict)
    aot           _export_to_aten_ir_make_fx: AOT export, functionalization, decomposition to ATen
    artifact      _produce_aten_artifact: the ExportedProgram's graph, signature, constants
    unlift        ExportedProgram.module(): the graph module the passes run on
    passes        the module passes
    export-rest   the rest of torch.export (input processing, verification, range constraints)

and, with --decompositions, the run_decompositions that edge generation starts with (ExecuTorch's
default table; edge generation's stage, not export's, timed here for scale).

With --unchanged, it also re-exports the first export's module unchanged (what the second export
gets when the passes change nothing) and lists the fields in which that program differs from the
first: why lowerd never skips the second export (docs/cache.md, "Export").

With --torch-guards, the exports write their guard functions with torch's own CSE pass instead
of lowerd's shortcut (lowering/export_speedups.py): the before of that shortcut.

    python -m bench.bench_export [--layers 4,16] [--hidden 256] [--decompositions] [--unchanged]
        [--torch-guards]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.harness import EXAMPLES, REPO, log

HOOKS = (
    ("dynamo", "torch.export._trace", None, "_export_to_torch_ir"),
    ("aot", "torch.export._trace", None, "_export_to_aten_ir_make_fx"),
    ("artifact", "torch.export._trace", None, "_produce_aten_artifact"),
    ("unlift", "torch.export.exported_program", "ExportedProgram", "module"),
    ("decompositions", "torch.export.exported_program", "ExportedProgram", "run_decompositions"),
)


class Clock:
    """Exclusive CPU seconds per sub-stage, of the functions of HOOKS and the module passes."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._inner: list[float] = []

    def install(self) -> None:
        import importlib

        for substage, module_name, owner_name, name in HOOKS:
            module = importlib.import_module(module_name)
            owner = getattr(module, owner_name) if owner_name else module
            setattr(owner, name, self.timed(substage, getattr(owner, name)))

    def timed(self, substage: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.process_time()
            self._inner.append(0.0)
            try:
                return function(*args, **kwargs)
            finally:
                inner = self._inner.pop()
                spent = time.process_time() - start
                self.seconds[substage] = self.seconds.get(substage, 0.0) + spent - inner
                if self._inner:
                    self._inner[-1] += spent

        return timed

    def take(self) -> dict[str, float]:
        taken, self.seconds = self.seconds, {}
        return taken


def model(layers: int, hidden: int) -> Any:
    """examples/models/llm.py's custom-flow method at `layers` and `hidden` (the issue's shape:
    8/4 heads, vocab 32000, max_seq_len 64), 8da4w as optimum quantizes it (testkit's)."""
    from models import llm  # type: ignore[import-not-found]
    from transformers import LlamaConfig

    from testkit.stock_recipe import optimum_quantize_model

    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=llm.MAX_SEQ_LEN,
        bos_token_id=1,
        eos_token_id=2,
    )
    method = llm.exportable(llm.causal_lm(config, "custom_sdpa"))
    optimum_quantize_model(method.module, "8da4w")
    return method


def measure(
    layers: int, hidden: int, decompositions: bool, unchanged: bool, torch_guards: bool = False
) -> dict[str, Any]:
    """One depth, in this process: lowerd's export stage, timed by sub-stage."""
    import torch

    if torch_guards:  # the shortcut's fallback: torch's own build_guard_function
        import lowerd.lowering.export_speedups as export_speedups

        export_speedups.validated_versions = lambda: False
    from executorch.extension.llm.export.export_passes import RemoveRedundantTransposes

    from lowerd.lowering.blame import Blame
    from lowerd.lowering.export_call import ModulePasses, export_method
    from lowerd.project.export_options import ExportConfig
    from lowerd.project.source_map import UserFiles

    torch.set_num_threads(1)
    sys.path.insert(0, str(EXAMPLES))
    method = model(layers, hidden)
    clock = Clock()
    clock.install()
    changed: list[bool] = []

    def transposes(graph: Any) -> Any:
        before = graph.code
        start = time.process_time()
        result = RemoveRedundantTransposes()(graph)[0]
        clock.seconds["passes"] = clock.seconds.get("passes", 0.0) + time.process_time() - start
        changed.append(result.code != before)
        return result

    passes = ModulePasses((transposes,), "bench", __file__, 0)
    settings = ExportConfig(strict=True, no_grad=True)
    blame = Blame(UserFiles(REPO))
    first_export = torch.export.export
    exports: list[float] = []
    parts: list[dict[str, float]] = []
    between: dict[str, float] = {}  # unlift and passes, between the two exports

    def export(*args: Any, **kwargs: Any) -> Any:
        for substage, seconds in clock.take().items():
            between[substage] = between.get(substage, 0.0) + seconds
        start = time.process_time()
        program = first_export(*args, **kwargs)
        exports.append(time.process_time() - start)
        parts.append(clock.take())
        return program

    torch.export.export = export
    start = time.process_time()
    program = export_method(method, settings, blame, "bench export", passes)
    stage = time.process_time() - start
    torch.export.export = first_export
    result: dict[str, Any] = {
        "layers": layers,
        "hidden": hidden,
        "stage": stage,
        "exports": [_rest(total, part) for total, part in zip(exports, parts, strict=True)],
        "between": between,
        "passes_changed": changed == [True],
    }
    if decompositions:
        from executorch.exir.tracer import _default_decomposition_table

        start = time.process_time()
        program.run_decompositions(_default_decomposition_table())
        result["decompositions"] = time.process_time() - start
    if unchanged:
        result["unchanged_differs_in"] = _unchanged_differences(method)
    return result


def _rest(total: float, part: dict[str, float]) -> dict[str, float]:
    return {**part, "export-rest": total - sum(part.values()), "total": total}


def _unchanged_differences(method: Any) -> list[str]:
    """The fields in which export(ep.module()) differs from ep: the second export of passes
    that changed nothing."""
    import torch

    def strict_export(module: Any) -> Any:
        kwargs = dict(method.kwargs)
        shapes = method.dynamic_shapes
        return torch.export.export(module, (), kwargs, dynamic_shapes=shapes, strict=True)

    with torch.no_grad():
        first = strict_export(method.module)
        again = strict_export(first.module())
    fields = {
        "graph code (node names)": lambda p: p.graph_module.code,
        "graph signature": lambda p: str(p.graph_signature),
        "state_dict order": lambda p: list(p.state_dict),
        "module_call_graph": lambda p: str(p.module_call_graph),
        "range_constraints": lambda p: str(p.range_constraints),
    }
    differs = [name for name, field in fields.items() if field(first) != field(again)]
    meta: set[str] = set()
    for a, b in zip(first.graph.nodes, again.graph.nodes, strict=False):
        for key in (set(a.meta) | set(b.meta)) - {"val", "from_node"}:
            if str(a.meta.get(key)) != str(b.meta.get(key)):
                meta.add(key)
    return differs + [f"node.meta[{key!r}]" for key in sorted(meta)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default="4,16")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--decompositions", action="store_true")
    parser.add_argument("--unchanged", action="store_true")
    parser.add_argument("--torch-guards", action="store_true")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a worker
    given = parser.parse_args()
    if given.one:
        found = measure(
            int(given.layers),
            given.hidden,
            given.decompositions,
            given.unchanged,
            given.torch_guards,
        )
        print(json.dumps(found))
        return
    flags = [f for f, on in (("--decompositions", given.decompositions),) if on]
    flags += ["--unchanged"] if given.unchanged else []
    flags += ["--torch-guards"] if given.torch_guards else []
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO / "src"))
    rows = []
    for layers in given.layers.split(","):
        log(f"bench: export at L = {layers}, hidden {given.hidden}")
        command = [sys.executable, "-m", "bench.bench_export", "--one", "--layers", layers]
        command += ["--hidden", str(given.hidden), *flags]
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, check=True)
        rows.append(json.loads(done.stdout.decode().strip().splitlines()[-1]))
    print(report(rows))


def report(rows: list[dict[str, Any]]) -> str:
    """CPU seconds by sub-stage, one line per export and depth."""
    names = ["dynamo", "aot", "artifact", "export-rest", "total"]
    lines = [f"{'L':>3} {'export':<8}" + "".join(f"{n:>12}" for n in names)]
    for row in rows:
        for index, export in enumerate(row["exports"]):
            label = ("first", "second")[index] if index < 2 else str(index)
            cells = "".join(f"{export.get(n, 0.0):>12.2f}" for n in names)
            lines.append(f"{row['layers']:>3} {label:<8}{cells}")
        between = ", ".join(f"{k} {v:.2f}" for k, v in sorted(row["between"].items()))
        extra = f"; decompositions {row['decompositions']:.2f}" if "decompositions" in row else ""
        lines.append(
            f"{row['layers']:>3} stage {row['stage']:.2f} s CPU (between the exports: {between};"
            f" passes changed the graph: {row['passes_changed']}{extra})"
        )
        if "unchanged_differs_in" in row:
            lines.append(f"    unchanged re-export differs in: {row['unchanged_differs_in']}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
