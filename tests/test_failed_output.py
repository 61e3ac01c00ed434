"""A failed build leaves no output that could be taken for current: its .pte and record go."""

from __future__ import annotations

from pathlib import Path

from lowerd.cache.store import BlobStore
from lowerd.lowering.build import build_target
from lowerd.project.batch import Batch
from lowerd.project.build_state import load_state
from lowerd.project.config import load_config
from lowerd.project.result import TargetResult

from stock import forget_project_modules
from testkit.projects import write_text_atomic


def test_a_failed_rebuild_removes_the_previous_pte_and_its_record(
    project: Path, tmp_path: Path
) -> None:
    config = load_config(project / "pyproject.toml")
    target = config.targets["tiny_linear"]
    store = BlobStore(tmp_path / "cache")
    assert build_target(config, target, store).status == "ok"
    output = config.output_path("tiny_linear")
    assert output.is_file() and load_state(config, target) is not None

    model = project / "models" / "tiny_linear.py"
    write_text_atomic(model, model.read_text().replace("def make():", "def make():\n    1 / 0"))
    forget_project_modules(project)
    failed = build_target(config, target, store)

    assert failed.status == "error" and failed.error.kind == "entry-error"
    assert failed.output is None
    assert not output.exists()
    assert load_state(config, target) is None


def test_a_crashed_build_removes_the_pte_and_a_cancelled_one_keeps_it(project: Path) -> None:
    config = load_config(project / "pyproject.toml")
    outputs = {name: config.output_path(name) for name in ("tiny_linear", "refused")}
    for output in outputs.values():  # as an earlier good build left them
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_bytes(b"an earlier build's program")

    batch = Batch.load(config.path, list(outputs), use_cache=True)
    crashed = TargetResult.failed("tiny_linear", "worker-crash", "killed by SIGKILL")
    batch.results["tiny_linear"] = crashed
    batch.results["refused"] = TargetResult.failed(
        "refused", "cancelled", "the build was cancelled"
    )
    batch.outcome()

    assert not outputs["tiny_linear"].exists()
    assert outputs["refused"].read_bytes() == b"an earlier build's program"
