"""Regional edge generation, measured: is ExecuTorch's edge generation local per layer?

```sh
.venv/bin/python -m bench.region_locality                         # tiny Llama, L = 4, hidden 64
.venv/bin/python -m bench.region_locality --layers 8 --hidden 512 --intermediate 1376 --vocab 32000
```

ExecuTorch's `_gen_edge_manager_for_partitioners` (three `run_decompositions` replays, then
`_generate_edge_program`'s passes) runs over the whole exported program. This bench runs it once
per distinct layer structure instead and assembles the whole edge program from the results
(`regional_edge_manager`, a drop-in for the stock function), then compares, per scenario:

- per region: the template's edge nodes (op, argument structure, kwargs, value shapes) against
  the nodes the whole-program run makes for that region (`alone == in-context`);
- the assembled edge program against stock's, node by node, field by field (`edge_diff`);
- the `.pte` bytes of `to_edge_transform_and_lower(XnnpackPartitioner) -> to_executorch` with
  the stock function and with the regional one patched in;
- CPU seconds (`time.process_time`) of edge generation and of the whole chain, both ways.

A region is the run of call_function nodes whose nn_module_stack holds the same ModuleList
element (a path ending in `.<index>`, e.g. `model.model.layers.3`); the rest (embeddings, rotary
tables, final norm, head) is one more region. Regions of the same structure (same aten node
sequence, argument structure, kwargs, value metadata and kinds of external inputs) share one
template: the first of them is cut out of the lifted program (parameters stay parameters, other
inputs become user inputs), edge-generated alone, and copied for the others with their own
parameters, inputs and per-node metadata (nn_module_stack, stack_trace, torch_fn taken from the
layer's own aten node the template node descends from). It is lowerd's own regional edge
generation (src/lowerd/lowering/region_edge.py): see bench/README.md's depth section.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
import time
from typing import Any

import torch
from torch import nn

from bench import region_edge
from bench.region_edge import (
    layer_path,
    regional,
    regional_edge_manager,
    signature_of,
    stock_edge,
    value_meta,
)

# Metadata that differs between two stock runs (object ids, process-wide counters) or that no
# stage after edge generation reads.
_UNREAD = frozenset({"from_node", "eager_input_vals", "original_aten", "desc", "seq_nr"})
_GENERATED = re.compile(r"<eval_with_key>\.\d+")

# -- the model -----------------------------------------------------------------------------------


class Logits(nn.Module):
    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.model(inputs).logits


def llama(args: argparse.Namespace, edit: str) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        max_position_embeddings=max(args.tokens, 128),
        use_cache=False,
    )
    model = Logits(LlamaForCausalLM(config).eval()).eval()
    apply_edit(model, edit)
    return model, (torch.randint(0, args.vocab, (1, args.tokens)),)


def apply_edit(model: nn.Module, edit: str) -> None:
    """`none`, `gelu:I` (layer I's MLP activation), `weight:I` (layer I's down_proj scaled),
    `refused:I` (an activation with an op XNNPACK refuses: a partition boundary moves)."""
    if edit == "none":
        return
    kind, index = edit.split(":")
    layer = model.model.model.layers[int(index)]
    if kind == "gelu":
        layer.mlp.act_fn = nn.GELU()
    elif kind == "weight":
        with torch.no_grad():
            layer.mlp.down_proj.weight.mul_(1.25)
    elif kind == "refused":
        layer.mlp.act_fn = Refused()
    else:
        raise SystemExit(f"unknown edit {edit}")


class Refused(nn.Module):
    """An activation with an op XNNPACK does not delegate (aten.cumsum): the layer splits."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(torch.nn.functional.silu(x), dim=-1)


# -- comparison ----------------------------------------------------------------------------------


def names(value: Any) -> Any:
    return torch.fx.map_arg(value, lambda n: n.name)


def edge_diff(stock: Any, mine: Any, limit: int = 12) -> list[str]:
    """Where the two edge programs differ, in any field a later stage reads."""
    diffs: list[str] = []
    a, b = list(stock.graph.nodes), list(mine.graph.nodes)
    if len(a) != len(b):
        diffs.append(f"{len(a)} nodes in stock, {len(b)} assembled")
    for x, y in zip(a, b, strict=False):
        if len(diffs) >= limit:
            break
        if (x.op, x.name, str(x.target)) != (y.op, y.name, str(y.target)):
            diffs.append(f"node {x.op} {x.name} {x.target} vs {y.op} {y.name} {y.target}")
            continue
        if (names(x.args), names(x.kwargs)) != (names(y.args), names(y.kwargs)):
            diffs.append(f"{x.name}: args {names(x.args)} vs {names(y.args)}")
        for key in sorted((set(x.meta) | set(y.meta)) - _UNREAD):
            left, right = x.meta.get(key), y.meta.get(key)
            if key == "val":
                left, right = value_meta(left), value_meta(right)
            if key == "stack_trace":  # generated code is numbered per process: not reproducible
                left, right = (_GENERATED.sub("<eval_with_key>", str(v)) for v in (left, right))
            if left != right:
                diffs.append(f"{x.name}: meta {key}: {str(left)[:120]} vs {str(right)[:120]}")
    sa, sb = stock.graph_signature, mine.graph_signature
    if str(sa) != str(sb):
        diffs.append(f"signatures differ:\n{sa}\n---\n{sb}")
    if list(stock.state_dict) != list(mine.state_dict):
        diffs.append("state_dict keys differ")
    elif any(not torch.equal(stock.state_dict[k], mine.state_dict[k]) for k in stock.state_dict):
        diffs.append("state_dict values differ")
    return diffs


def per_region(stock: Any, mine: Any) -> list[tuple[str, int, bool]]:
    """Per region: its edge node count and whether the assembled nodes equal the in-context ones."""

    def grouped(program: Any) -> dict[str | None, list[Any]]:
        groups: dict[str | None, list[Any]] = {}
        for node in program.graph.nodes:
            if node.op == "call_function":
                groups.setdefault(layer_path(node), []).append(signature_of(node))
        return groups

    left, right = grouped(stock), grouped(mine)
    return [(str(k or "rest"), len(v), v == right.get(k)) for k, v in left.items()]


def lower_chain(program: Any) -> tuple[bytes, float]:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    started = time.process_time()
    manager = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
    data = manager.to_executorch().buffer
    return data, time.process_time() - started


def scenario(args: argparse.Namespace, edit: str) -> dict[str, Any]:
    model, inputs = llama(args, edit)
    program = torch.export.export(model, inputs)
    row: dict[str, Any] = {"edit": edit}
    started = time.process_time()
    stock = stock_edge(program).exported_program("forward")
    row["stock edge s"] = time.process_time() - started
    started = time.process_time()
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import EdgeCompileConfig

    mine = regional_edge_manager(
        {"forward": [XnnpackPartitioner()]}, {"forward": program}, EdgeCompileConfig(), None
    ).exported_program("forward")
    row["regional edge s"] = time.process_time() - started
    run = region_edge.LAST
    row.update(regions=run.regions, templates=run.templates, fallback=run.fallback)
    row["diff"] = edge_diff(stock, mine)
    row["per region"] = per_region(stock, mine)
    if not args.no_pte:
        stock_bytes, row["stock chain s"] = lower_chain(program)
        with regional():
            mine_bytes, row["regional chain s"] = lower_chain(program)
        row["stock sha"] = hashlib.sha256(stock_bytes).hexdigest()[:16]
        row["regional sha"] = hashlib.sha256(mine_bytes).hexdigest()[:16]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--intermediate", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--edits", default="none")
    parser.add_argument("--no-pte", action="store_true")
    args = parser.parse_args(argv)
    failed = False
    for edit in args.edits.split(","):
        row = scenario(args, edit)
        for key, value in row.items():
            if key in ("diff", "per region"):
                continue
            print(f"{key}: {value:.2f}" if isinstance(value, float) else f"{key}: {value}")
        for name, count, equal in row["per region"]:
            print(f"  {name:32s} {count:5d} edge nodes  alone == in-context: {equal}")
        for line in row["diff"]:
            print("  DIFF", line)
        same = not row["diff"] and row.get("stock sha") == row.get("regional sha")
        failed |= not same
        print(f"== {edit}: {'equal' if same else 'DIFFERENT'}\n", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
