"""Regional edge generation (lowering/region_edge.py) across a spread of transformers
architectures (tests/architectures.py), not only Llama: each lowering gives the stock run's bytes,
and each says which path ran (regional, or the gate that sent it to stock). A gate lifted later
moves an architecture from GATED to BY_REGION here and must keep its bytes.

OPT is the fidelity break of issue 31: its mask is written in place (`copy_`) in the rest and read
by every layer through an alias, which functionalization emits again at the layer's SDPA; a layer
cut out alone emitted it at its own node, its debug handle (in XNNPACK's blob) one off stock's.
"""

from __future__ import annotations

from typing import Any

import pytest

from lowerd.lowering.region_edge import RegionalRun, program_regions

from architectures import exported
from regional import regional_against_stock, regional_and_stock, replay_metadata
from stock import sha256

# Two layers of one structure and the rest: 3 regions from 2 templates.
BY_REGION = ("gpt2", "phi", "qwen2")
WRITTEN = "model.model.decoder.layers.0 reads copy_, a tensor written in place elsewhere"
GATED = {
    "opt": WRITTEN,
    "opt-post-norm": WRITTEN,
    "gemma": "a CONSTANT_TENSOR input",
    "bert": "a CONSTANT_TENSOR input",
}


def expected(name: str) -> RegionalRun:
    if name in BY_REGION:
        return RegionalRun(regions=3, templates=2, stock_because=None)
    return RegionalRun(regions=0, templates=0, stock_because=GATED[name])


# Lowered by region each, against stock's digest (tests/known_stock.py; live on other versions):
# the break and one learned-position decoder, as the suite's time allows; phi and qwen2 (rotary,
# as Llama in test_region_layers.py) gave stock's bytes by region too when this was written, and
# below are checked to take the regional path.
LOWERED = ("opt", "gpt2")


@pytest.mark.parametrize("name", LOWERED)
def test_an_architecture_gives_stock_s_bytes_and_names_its_path(name: str) -> None:
    stock, mine, runs = regional_against_stock(f"architecture-{name}", exported(name))
    assert mine == stock
    assert runs == [expected(name)]


# Exported strict under no_grad (as transformers' convert_and_export_with_cache and
# optimum-executorch do): source_fn_stack on every node, example_value on weight placeholders.
STRICT = ("llama", "gpt2")


@pytest.mark.parametrize("name", STRICT)
def test_a_strict_export_gives_stock_s_bytes_and_metadata_by_region(name: str) -> None:
    edges: list[Any] = []
    stock, mine, runs = regional_and_stock(exported(name, strict=True), edges=edges)
    assert sha256(mine) == sha256(stock)
    assert runs == [RegionalRun(regions=3, templates=2, stock_because=None)]
    assert replay_metadata(edges[1]) == replay_metadata(edges[0])


@pytest.mark.parametrize("name", [name for name in BY_REGION if name not in LOWERED])
def test_an_architecture_the_gates_pass_has_layers_of_one_structure(name: str) -> None:
    found, why = program_regions(exported(name))
    assert why is None and found is not None and len(found) == 3


@pytest.mark.parametrize("name", [name for name in GATED if name != "opt"])
def test_an_architecture_the_gates_refuse_names_its_gate(name: str) -> None:
    """The gate alone (stock runs its own edge generation, so its bytes are stock's)."""
    assert program_regions(exported(name)) == (None, GATED[name])
