"""`lowerd explain`: what a user reads about why the last build did what it did.

Real builds of tests/projects/basic's tiny targets (about a second each), then the words.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import msgpack

from lowerd.cache.store import BlobStore
from lowerd.lowering.build import build_target
from lowerd.lowering.partition_key import PartitionKeyDetails
from lowerd.project.build_state import load_state, state_path
from lowerd.project.config import ProjectConfig, load_config
from lowerd.project.explain import KEY_WORDS, explain_targets
from lowerd.project.key_summary import KeySummary
from lowerd.project.partition_match import PartitionIdentity, match_partitions
from lowerd.project.rebuild_record import changed_lines
from lowerd.project.result import TargetResult
from lowerd.project.wire import encode

from helpers import edit_refused_weights, line_marks, lowerd_without_torch
from stock import forget_project_modules

UP_TO_DATE = "  up to date: nothing it read or wrote has changed since"


def build(config: ProjectConfig, name: str, store: BlobStore, reuse: bool = True) -> TargetResult:
    forget_project_modules(config.root)
    result = build_target(config, config.targets[name], store, reuse=reuse)
    assert result.status == "ok", result.error
    return result


def explain(config: ProjectConfig, name: str) -> list[str]:
    [target] = encode(explain_targets(config, [name]))["targets"]
    lines: list[str] = target["lines"]
    return lines


def edge_line(config: ProjectConfig, name: str) -> str:
    """The line naming the path the last build's edge generation took: for basic's models, which
    have no layers to go by region, stock's, with the gate's words (region_edge.py's to word)."""
    [target] = encode(explain_targets(config, [name]))["targets"]
    generation = target["edge_generation"]["forward"]
    assert generation["path"] == "stock" and generation["reason"], generation
    return f"  edge generation of forward: stock ({generation['reason']})"


def test_a_first_build_then_an_unchanged_one(project: Path, tmp_path: Path) -> None:
    config = load_config(project / "pyproject.toml")
    assert explain(config, "tiny_linear") == [
        "tiny_linear: no build record (never built, or its last build failed)"
    ]
    store = BlobStore(tmp_path / "cache")
    build(config, "tiny_linear", store)
    assert explain(config, "tiny_linear") == [
        "tiny_linear: no earlier build: lowered 1 partition (0 from the cache)",
        edge_line(config, "tiny_linear"),
        UP_TO_DATE,
    ]
    model = project / "models" / "tiny_linear.py"
    model.write_text(model.read_text() + "# a comment\n")
    assert explain(config, "tiny_linear")[-1] == "  now out of date: models/tiny_linear.py changed"

    build(config, "tiny_linear", store)
    lines = len(model.read_text().splitlines())
    assert explain(config, "tiny_linear") == [
        "tiny_linear: program unchanged: kept build/tiny_linear.pte (1 partition, none lowered)",
        f"  models/tiny_linear.py changed (line {lines})",
        UP_TO_DATE,
    ]


def test_a_weight_edit_names_the_file_the_partition_and_the_weights(
    project: Path, tmp_path: Path
) -> None:
    config = load_config(project / "pyproject.toml")
    store = BlobStore(tmp_path / "cache")
    build(config, "refused", store)
    edit_refused_weights(project)
    build(config, "refused", store)

    text = (project / "models" / "refused.py").read_text().splitlines()
    first = text.index("    model = Refused().eval()") + 1
    fc1 = text.index("        x = self.fc1(x)") + 1
    fc2 = line_marks(project)["refused.cumsum"][1] + 1  # return self.fc2(x)
    assert explain(config, "refused") == [
        "refused: rebuilt 1 of 2 partitions (1 from the cache)",
        "  lowered because the exported program changed (forward)",
        f"  models/refused.py changed (lines {first}-{first + 3})",
        f"  XNNPACK #2 (forward, models/refused.py:{fc2}): the weights changed (fc2.bias)",
        edge_line(config, "refused"),
        UP_TO_DATE,
    ]
    [document] = encode(explain_targets(config, ["refused"]))["targets"]
    hit, miss = document["partitions"]
    assert (hit["cache"], hit["label"]) == ("hit", f"XNNPACK #1 (forward, models/refused.py:{fc1})")
    assert miss["changed"] == ["tensors"] and miss["changed_weights"] == ["fc2.bias"]
    assert (miss["previous"], miss["matched_by"]) == (2, "weights")
    [source] = document["sources"]
    assert source["change"] == "changed" and source["old_sha256"] != source["new_sha256"]


def test_a_backend_option_is_a_changed_input(project: Path, tmp_path: Path) -> None:
    pyproject = project / "pyproject.toml"
    store = BlobStore(tmp_path / "cache")
    build(load_config(pyproject), "tiny_linear", store)
    pyproject.write_text(
        pyproject.read_text() + "\n[tool.lowerd.backend_options.xnnpack]\nper_op_mode = true\n"
    )
    config = load_config(pyproject)
    assert explain(config, "tiny_linear")[-1] == (
        "  now out of date: configuration or tool versions changed"
    )
    build(config, "tiny_linear", store)
    assert explain(config, "tiny_linear") == [
        "tiny_linear: rebuilt 0 of 1 partition (1 from the cache)",
        '  the target\'s inputs changed: backend options {} → {"xnnpack": {"per_op_mode": true}}',
        edge_line(config, "tiny_linear"),
        UP_TO_DATE,
    ]


def test_a_miss_with_an_unchanged_key_blames_the_cache(project: Path, tmp_path: Path) -> None:
    config = load_config(project / "pyproject.toml")
    store = BlobStore(tmp_path / "cache")
    build(config, "tiny_linear", store)
    store.clear()
    build(config, "tiny_linear", store, reuse=False)
    assert explain(config, "tiny_linear") == [
        "tiny_linear: rebuilt 1 of 1 partition (0 from the cache)",
        "  lowered because asked to lower afresh (reuse off)",
        "  XNNPACK #1 (forward): its key is unchanged: the cache no longer held the blob "
        "(cleared, evicted, or another cache directory)",
        edge_line(config, "tiny_linear"),
        UP_TO_DATE,
    ]

    # `lowerd explain --json` says the same, without importing torch (exit 99 if it did).
    run = lowerd_without_torch(project, tmp_path / "cache", "explain", "--json")
    assert run.returncode == 0, run.log
    documents = {target["name"]: target for target in run.json()["targets"]}
    assert documents["tiny_linear"]["lines"] == explain(config, "tiny_linear")
    assert documents["refused"]["lines"] == [
        "refused: no build record (never built, or its last build failed)"
    ]


def test_a_record_of_an_older_lowerd_still_loads(project: Path, tmp_path: Path) -> None:
    config = load_config(project / "pyproject.toml")
    target = config.targets["tiny_linear"]
    build(config, "tiny_linear", BlobStore(tmp_path / "cache"))
    path = state_path(config, target)
    raw = msgpack.unpackb(path.read_bytes(), raw=False)
    for added in ("inputs", "source_lines", "rebuild"):
        del raw["state"][added]
    path.write_bytes(msgpack.packb(raw, use_bin_type=True))

    assert load_state(config, target) is not None  # still up to date: no rebuild needed
    assert explain(config, "tiny_linear") == [
        "tiny_linear: built by a lowerd that did not record why; its next build will",
        UP_TO_DATE,
    ]

    model = project / "models" / "tiny_linear.py"
    model.write_text(model.read_text().replace("nn.ReLU()", "nn.Hardtanh()"))
    build(config, "tiny_linear", BlobStore(tmp_path / "cache"))
    assert explain(config, "tiny_linear") == [
        "tiny_linear: rebuilt 1 of 1 partition (0 from the cache)",
        "  lowered because the exported program changed (forward)",
        "  models/tiny_linear.py changed",  # the old record has no line checksums
        "  XNNPACK #1 (forward): the earlier build's record kept no partitions to compare with "
        "(an older lowerd)",
        edge_line(config, "tiny_linear"),
        UP_TO_DATE,
    ]


def test_the_summary_names_every_input_of_the_key() -> None:
    fields = [f.name for f in dataclasses.fields(PartitionKeyDetails)]
    assert [f.name for f in dataclasses.fields(KeySummary)] == fields
    assert sorted(KEY_WORDS) == sorted(fields)


def test_partitions_match_by_weights_before_position() -> None:
    def key(graph: str, *weights: str) -> KeySummary:
        return KeySummary(
            2,
            "XnnpackBackend",
            "stable",
            "t",
            "e",
            "c",
            graph,
            "s",
            "g",
            "r",
            {w: "0" for w in weights},
        )

    def at(k: KeySummary) -> PartitionIdentity:
        return PartitionIdentity("forward", "XNNPACK", k)

    earlier = [at(key("a", "blocks.0.w")), at(key("a", "blocks.1.w")), at(key("relu"))]
    # blocks.0 is gone; blocks.1's graph changed; a new weight-free partition came first
    now = [at(key("new")), at(key("b", "blocks.1.w")), at(key("relu"))]
    matches = match_partitions(now, earlier)
    assert {p: (m.earlier, m.how) for p, m in matches.items()} == {
        0: (0, "position"),
        1: (1, "weights"),
        2: (2, "key"),
    }


def test_changed_lines_are_ranges_of_the_new_text() -> None:
    old = [1, 2, 3, 4, 5, 6]
    assert changed_lines(old, [1, 2, 9, 9, 4, 5, 6]) == [[3, 4]]
    assert changed_lines(old, [1, 2, 4, 5, 6]) == [[3, 3]]  # a deletion: the line in its place
    assert changed_lines(old, [0, 2, 3, 4, 5, 7]) == [[1, 1], [6, 6]]
    assert changed_lines(None, [1]) == []
