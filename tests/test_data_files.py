"""Files written beside the .pte (issue 13 §5, §6): the ETRecord of `etrecord = true` and the .ptd
files of `external_constants = true`. Each is what the stock script writes, listed in the result
(`data_files`), part of the up-to-date check, and removed when a later build no longer makes it."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from lowerd.cache.store import BlobStore
from lowerd.lowering.build import build_target
from lowerd.project.build_state import load_state, up_to_date_report, why_out_of_date
from lowerd.project.config import ProjectConfig, load_config
from lowerd.project.errors import ConfigError
from lowerd.project.result import DataFile, TargetResult
from lowerd.project.wire import encode

from helpers import write_pyproject
from stock import PROJECTS, call_entry, forget_project_modules, importable_copy, stock_pte
from testkit.projects import write_text_atomic

ENTRY = "models/lookup.py:make"


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    with importable_copy(PROJECTS / "datafiles", tmp_path / "datafiles") as copy:
        yield copy


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def edit_config(root: Path, old: str, new: str) -> ProjectConfig:
    path = root / "pyproject.toml"
    text = path.read_text()
    assert old in text
    write_text_atomic(path, text.replace(old, new))
    return load_config(path)


def rebuilt(config: ProjectConfig, name: str, store: BlobStore) -> TargetResult:
    forget_project_modules(config.root)
    result = build_target(config, config.targets[name], store)
    assert result.status == "ok", result.error
    return result


def test_etrecord_is_written_beside_an_unchanged_pte_and_parses(root: Path, tmp_path: Path) -> None:
    from executorch.devtools.etrecord import parse_etrecord

    config = load_config(root / "pyproject.toml")
    target = config.targets["traced"]
    store = BlobStore(tmp_path / "cache")
    result = rebuilt(config, "traced", store)

    etrecord = config.out_dir / "traced.etrecord"
    assert result.data_files == [DataFile(str(etrecord), digest(etrecord), "etrecord")]
    # The .pte is the stock run's without an ETRecord.
    assert result.sha256 == hashlib.sha256(stock_pte(root, ENTRY, ["xnnpack"])).hexdigest()
    assert result.sha256 == digest(config.output_path("traced"))
    parsed = parse_etrecord(str(etrecord))
    assert parsed.edge_dialect_program is not None
    assert set(parsed._debug_handle_map or {}) == {"forward"}
    # Listed in the JSON document, and by an up-to-date answer.
    assert encode(result)["data_files"] == [
        {"path": str(etrecord), "sha256": digest(etrecord), "kind": "etrecord"}
    ]
    answered = up_to_date_report(config, target)
    assert answered is not None and answered.data_files == result.data_files

    # Missing, the ETRecord makes the target out of date.
    etrecord.unlink()
    assert why_out_of_date(config, target, load_state(config, target)) is not None
    assert up_to_date_report(config, target) is None

    # Turned off: rebuilt, the same .pte, and the ETRecord of the earlier build is gone.
    rebuilt(config, "traced", store)
    assert etrecord.is_file()
    config = edit_config(root, "etrecord = true", "etrecord = false")
    assert why_out_of_date(config, config.targets["traced"], load_state(config, target)) == (
        "configuration or tool versions changed"
    )
    off = rebuilt(config, "traced", store)
    assert off.sha256 == result.sha256 and off.data_files == []
    assert not etrecord.exists()


def _stock_external(root: Path, outdir: Path) -> tuple[bytes, dict[str, bytes]]:
    """The stock script: external_constants=True and write_tensor_data_to_file."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

    module, args = call_entry(root, ENTRY)
    program = to_edge_transform_and_lower(
        torch.export.export(module, args), partitioner=[XnnpackPartitioner()]
    ).to_executorch(ExecutorchBackendConfig(external_constants=True))
    outdir.mkdir()
    program.write_tensor_data_to_file(str(outdir))
    return program.buffer, {p.name: p.read_bytes() for p in outdir.iterdir()}


def test_external_constants_write_the_stock_ptd(root: Path, tmp_path: Path) -> None:
    import torch

    stock_buffer, stock_files = _stock_external(root, tmp_path / "stock")
    assert list(stock_files) == ["_default_external_constant.ptd"]

    config = load_config(root / "pyproject.toml")
    target = config.targets["external"]
    store = BlobStore(tmp_path / "cache")
    result = rebuilt(config, "external", store)

    ptd = config.out_dir / "external.ptd"
    assert result.sha256 == hashlib.sha256(stock_buffer).hexdigest()
    assert ptd.read_bytes() == stock_files["_default_external_constant.ptd"]
    assert result.data_files == [DataFile(str(ptd), digest(ptd), "ptd")]
    assert result.sha256 != hashlib.sha256(stock_pte(root, ENTRY, ["xnnpack"])).hexdigest()
    # The .pte does not name its data file: the runtime runs it with the renamed .ptd.
    from executorch.extension.pybindings.portable_lib import _load_for_executorch

    module, args = call_entry(root, ENTRY)
    loaded = _load_for_executorch(str(config.output_path("external")), str(ptd))
    assert torch.allclose(loaded.forward(args)[0], module(*args))

    answered = up_to_date_report(config, target)
    assert answered is not None and answered.data_files == result.data_files
    ptd.write_bytes(b"not the constants")
    assert up_to_date_report(config, target) is None

    # Turned off: the constants are back in the .pte and the stale .ptd is removed.
    config = edit_config(root, "external_constants = true", "external_constants = false")
    inline = rebuilt(config, "external", store)
    assert inline.data_files == [] and not ptd.exists()
    assert inline.sha256 == hashlib.sha256(stock_pte(root, ENTRY, ["xnnpack"])).hexdigest()


def test_a_failed_build_removes_its_data_files(root: Path, tmp_path: Path) -> None:
    config = load_config(root / "pyproject.toml")
    store = BlobStore(tmp_path / "cache")
    for name in ("traced", "external"):
        rebuilt(config, name, store)
    written = [config.out_dir / "traced.etrecord", config.out_dir / "external.ptd"]
    assert all(path.is_file() for path in written)

    model = root / "models" / "lookup.py"
    write_text_atomic(model, model.read_text().replace("def make():", "def make():\n    1 / 0"))
    for name in ("traced", "external"):
        forget_project_modules(root)
        failed = build_target(config, config.targets[name], store)
        assert failed.status == "error" and failed.data_files == []
    assert not any(path.exists() for path in written)
    assert not config.output_path("traced").exists()


# Configuration -------------------------------------------------------------------------------


def test_etrecord_defaults_from_the_project_and_a_target_overrides(tmp_path: Path) -> None:
    config = load_config(
        write_pyproject(
            tmp_path,
            """\
            [tool.lowerd]
            etrecord = true
            [tool.lowerd.targets.a]
            entry = "a.py:make"
            [tool.lowerd.targets.b]
            entry = "b.py:make"
            etrecord = false
            external_constants = true
            """,
        )
    )
    assert config.etrecord
    a, b = config.targets["a"], config.targets["b"]
    assert (a.etrecord, a.external_constants) == (True, False)
    assert (b.etrecord, b.external_constants) == (False, True)


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        (
            '[tool.lowerd]\netrecord = "yes"\n[tool.lowerd.targets.a]\nentry = "a.py:make"\n',
            2,
            'etrecord must be true or false, got the string "yes"',
        ),
        (
            '[tool.lowerd.targets.a]\nentry = "a.py:make"\n\netrecord = 1\n',
            4,
            "etrecord must be true or false, got the integer 1",
        ),
        (
            '[tool.lowerd.targets.a]\nentry = "a.py:make"\nexternal_constants = "on"\n',
            3,
            'external_constants must be true or false, got the string "on"',
        ),
        (
            '[tool.lowerd.targets.a]\nentry = "a.py:make"\nexternal_constant = true\n',
            3,
            "unknown key 'external_constant' in target 'a' (did you mean 'external_constants'?)",
        ),
    ],
)
def test_bad_data_file_keys_are_blamed_at_their_line(
    tmp_path: Path, text: str, line: int, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write_pyproject(tmp_path, text))
    assert info.value.location.line == line
    assert message in str(info.value)
