"""Regional edge generation (lowering/region_edge.py) in a lowerd build of tests/projects/layers (a
small transformers Llama whose layers are edited at the first, a middle and the last layer): the
.pte is the stock script's, an edit misses only its partition, and what ran is in the result, in
`lowerd explain` and at the entry in the editor.

Stock here is tests/stock.py: a plain ExecuTorch run with nothing of lowerd's installed.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from lowerd.cache.store import BlobStore
from lowerd.daemon.diagnostics import result_diagnostics, site_of
from lowerd.lowering.build import build_target
from lowerd.lowering.region_edge import RegionalEdge, RegionalRun
from lowerd.project.config import load_config
from lowerd.project.edge_generation import EdgeGeneration
from lowerd.project.explain import explain_targets
from lowerd.project.result import TargetResult
from lowerd.project.wire import decode, encode

from helpers import PROJECTS
from regional import spying
from stock import forget_project_modules, importable_copy, known_stock_digest

ENTRY = "models/llama.py:make"


@pytest.fixture(scope="module")
def layers_built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """tests/projects/layers built by lowerd: the .pte's digest, the stock script's, and what
    regional edge generation did."""
    folder = tmp_path_factory.mktemp("region-edge")
    with importable_copy(PROJECTS / "layers", folder / "layers") as root:
        seen: list[RegionalEdge] = []
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(RegionalEdge, "installed", spying(seen, RegionalEdge.installed))
            config = load_config(root / "pyproject.toml")
            forget_project_modules(root)
            result = build_target(config, config.targets["llama"], BlobStore(folder / "cache"))
            assert result.status == "ok", result.error
            stock = known_stock_digest("layers", root, ENTRY, ["xnnpack"])
            edited = rebuilt_with_layer_0_plain(root, config, BlobStore(folder / "cache"))
        [regional, again] = seen
        edited["runs"] = again.runs
        return {
            **{"sha256": result.sha256, "stock": stock, "runs": regional.runs, "edited": edited},
            **{"result": result, "config": config},
        }


def rebuilt_with_layer_0_plain(root: Any, config: Any, store: BlobStore) -> dict[str, Any]:
    """Layer 0's activation back to SiLU, rebuilt with the first build's cache: layer 0 becomes
    the plain layers' template (layer 1 its copy) and layer 3 its own GELU template, so every
    unedited layer is made from another template than before."""
    model = root / "models" / "llama.py"
    source = model.read_text()
    gelu = "    layers[0].mlp.act_fn = nn.GELU()\n"
    assert gelu in source
    model.write_text(source.replace(gelu, ""))
    forget_project_modules(root)
    result = build_target(config, config.targets["llama"], store)
    assert result.status == "ok", result.error
    stock = known_stock_digest("layers-layer-0-plain", root, ENTRY, ["xnnpack"])
    generation = result.methods["forward"].edge_generation
    return {"sha256": result.sha256, "stock": stock, "cache": result.cache, "says": generation}


def test_edits_at_first_middle_last_layer_weights_and_a_refused_op_give_stock_s_bytes(
    layers_built: dict[str, Any],
) -> None:
    """Layers 0 and 3 (GELU; 3's weights scaled) share one template, layer 1 (the plain
    structure) and layer 2 (cumsum: XNNPACK refuses it, its partitions split) each their own, and
    the rest its own: the .pte is the stock script's."""
    assert layers_built["sha256"] == layers_built["stock"]
    assert layers_built["runs"] == [RegionalRun(regions=5, templates=4, stock_because=None)]


def test_a_one_layer_edit_misses_only_the_edited_partition(layers_built: dict[str, Any]) -> None:
    """Each copied layer's weight placeholders describe its own weights (their `desc`, in the
    partition key), not its template's: after an edit that changes every layer's template, only
    the partition holding layer 0's activation is preprocessed again. The three layer templates
    are read back from the first build's store (template_store.py), each for another layer than
    it was made of (the plain one made of layer 1 serves layer 0, the GELU one made of layer 0
    serves layer 3); the rest's, whose edge nodes take values its inputs carry, is read back
    for the rest alone (its nodes' names and source locations as when it was made)."""
    edited = layers_built["edited"]
    assert edited["sha256"] == edited["stock"]
    assert edited["runs"] == [RegionalRun(regions=5, templates=4, stock_because=None, reused=4)]
    assert edited["says"] == EdgeGeneration.regional(regions=5, templates=4, reused=4)
    assert edited["cache"].misses == 1 and edited["cache"].hits > 1


def test_the_result_explain_and_the_editor_name_the_regional_path(
    layers_built: dict[str, Any],
) -> None:
    """What ran is in the build's result (`--json`, the build record), `lowerd explain`'s lines
    and the coverage diagnostic at the entry, not only in the daemon's debug log."""
    result, config = layers_built["result"], layers_built["config"]
    regional = EdgeGeneration.regional(regions=5, templates=4)
    [(method, report)] = result.methods.items()
    assert report.edge_generation == regional
    document = json.loads(json.dumps(encode(result)))  # as `--json` prints it
    written = document["methods"][method]["edge_generation"]
    assert written == {"path": "regional", "regions": 5, "templates": 4, "words": regional.words}
    assert decode(TargetResult, document).methods[method].edge_generation == regional
    # The record is the edited build's (regional too, its layer templates and the rest's read
    # from the cache), read back through the record's checks.
    [explained] = explain_targets(config, ["llama"]).targets
    edited = EdgeGeneration.regional(regions=5, templates=4, reused=4)
    assert explained.edge_generation == {method: edited}
    assert f"  edge generation of {method}: {edited.words}" in explained.lines
    entry = site_of(result.entry, config.root)
    assert entry is not None
    at_entry = result_diagnostics(result, config.root, None, "warning")[entry.path]
    [coverage] = [
        d for d in at_entry if d.code == "coverage" and d.range.start.line + 1 == entry.line
    ]
    assert f"edge generation: {regional.words}" in coverage.message
