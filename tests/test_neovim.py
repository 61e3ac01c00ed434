"""Neovim end to end: headless `nvim` with editors/neovim drives the real `python -m lowerd serve`.

On a copy of tests/projects/nvim, the driver (editors/neovim/test/e2e.lua) opens the model, waits
for lowerd's not-delegated diagnostics on the refused lines, runs :LowerdRelated on the norm line
(ops torch.nn's RMSNorm made: the location list of the library lines, and the jump to the first),
rewrites the pow line to `x * x`, writes the file, and waits for that line's diagnostic to go
while the cumsum one stays; then for the statusline to show the server's coverage, and opens
:LowerdModules, whose first line is the server's coverage sentence (issue 12 §4: the editor shows
what the server computed).
Lines are found by their `# LINE-MARK: <name>` comments (tests/projects/README.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import DEADLINE, PROJECTS, TESTS, line_marks

REPO = TESTS.parent
NEOVIM_PLUGIN = REPO / "editors" / "neovim"
DRIVER = NEOVIM_PLUGIN / "test" / "e2e.lua"
UNIT_TESTS = NEOVIM_PLUGIN / "test" / "unit.lua"
PROJECT = PROJECTS / "nvim"
NVIM = shutil.which("nvim")

# Per wait inside the driver: the first build imports torch and ExecuTorch in a cold worker.
WAIT_SECONDS = 2.5 * DEADLINE
# The whole run: three waits and start-up, with room to spare.
RUN_SECONDS = 3 * WAIT_SECONDS + DEADLINE / 2

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        NVIM is None, reason="nvim is not installed (apt-get install neovim; .ci/run installs it)"
    ),
]


def nvim_headless(script: Path) -> list[str]:
    assert NVIM is not None
    return [NVIM, "--headless", "-u", "NONE", "-i", "NONE", "-n", "-c", f"luafile {script}"]


def line_of(path: Path, mark: str) -> int:
    """The line of a LINE-MARK in the file (models/net.py of the nvim project)."""
    root = path.parents[1]
    relative, line = line_marks(root).get(mark, (None, 0))
    assert relative == path.relative_to(root).as_posix(), f"no LINE-MARK: {mark} in {path}"
    return line


def run_driver(tmp_path: Path) -> tuple[dict[str, Any], str]:
    root = tmp_path / "nvim"
    shutil.copytree(PROJECT, root, ignore=shutil.ignore_patterns("build", "__pycache__"))
    model = root / "models" / "net.py"
    result_file = tmp_path / "result.json"
    home = tmp_path / "home"
    env = {
        **os.environ,
        # Neovim's state, logs and the blob cache stay inside the test's folder.
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_STATE_HOME": str(home / "state"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "LOWERD_CACHE_DIR": str(tmp_path / "lowerd-cache"),
        "LOWERD_NVIM_RTP": str(NEOVIM_PLUGIN),
        "LOWERD_NVIM_PYTHON": sys.executable,
        "LOWERD_NVIM_FILE": str(model),
        "LOWERD_NVIM_EDIT_LINE": str(line_of(model, "nvim.pow")),
        "LOWERD_NVIM_KEEP_LINE": str(line_of(model, "nvim.cumsum")),
        "LOWERD_NVIM_RELATED_LINE": str(line_of(model, "nvim.norm")),
        "LOWERD_NVIM_EDIT_FROM": "x**3",
        "LOWERD_NVIM_EDIT_TO": "x * x",
        "LOWERD_NVIM_RESULT": str(result_file),
        "LOWERD_NVIM_TIMEOUT_MS": str(int(WAIT_SECONDS * 1000)),
    }
    env.pop("VIRTUAL_ENV", None)
    process = subprocess.run(
        nvim_headless(DRIVER),
        cwd=root,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )
    log = f"nvim exit {process.returncode}\nstdout:\n{process.stdout}\nstderr:\n{process.stderr}"
    if not result_file.exists():
        pytest.fail(f"the driver wrote no result\n{log}")
    result = json.loads(result_file.read_text())
    lsp_log = Path(result.get("lsp_log") or "")
    if lsp_log.is_file():
        log += "\nlsp.log (tail):\n" + "\n".join(lsp_log.read_text().splitlines()[-60:])
    return result, log


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str, Path]:
    tmp_path = tmp_path_factory.mktemp("neovim")
    result, log = run_driver(tmp_path)
    return result, log, tmp_path / "nvim" / "models" / "net.py"


def not_delegated(diagnostics: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {d["line"]: d for d in diagnostics if d["code"] == "not-delegated"}


def test_diagnostics_appear_then_follow_the_edit(session: tuple[dict[str, Any], str, Path]):
    result, log, model = session
    summary = json.dumps({k: v for k, v in result.items() if k != "lsp_log"}, indent=2)
    assert result["ok"], f"{result['message']}\n{summary}\n{log}"
    assert result["filetype"] == "python"
    pow_line, cumsum_line = line_of(model, "nvim.pow"), line_of(model, "nvim.cumsum")

    before = not_delegated(result["before"])
    assert "aten.pow.Tensor_Scalar" in before[pow_line]["message"]
    assert "only support power == 2, got 3" in before[pow_line]["message"]
    assert "aten.cumsum.default" in before[cumsum_line]["message"]
    assert before[pow_line]["severity"] == 2  # vim.diagnostic.severity.WARN, the default

    after = not_delegated(result["after"])
    assert pow_line not in after
    assert "aten.cumsum.default" in after[cumsum_line]["message"]
    assert result["edited_line"].strip().startswith("x = x * x")
    assert "x * x" in model.read_text().splitlines()[pow_line - 1]  # :write wrote it


def test_the_library_lines_of_a_lines_ops_in_the_location_list(
    session: tuple[dict[str, Any], str, Path],
):
    """The norm line's warning carries relatedInformation at RMSNorm.forward's line in torch.nn;
    :LowerdRelated lists it and jumps there."""
    result, log, model = session
    assert result["ok"], f"{result['message']}\n{log}"
    norm_line = line_of(model, "nvim.norm")
    [warning] = [d for d in result["before"] if d["line"] == norm_line]
    assert warning["code"] == "not-delegated" and warning["related"] == 2
    related = result["related"]
    normalization = Path(related["items"][0]["filename"])
    assert normalization.parts[-3:] == ("nn", "modules", "normalization.py")
    assert all(Path(item["filename"]) == normalization for item in related["items"])
    assert all("RMSNorm.forward" in item["text"] for item in related["items"])
    source = normalization.read_text().splitlines()
    assert all("F.rms_norm(" in source[item["lnum"] - 1] for item in related["items"])
    assert Path(related["jumped_to"]).resolve() == normalization.resolve()
    assert related["jumped_line"] == related["items"][0]["lnum"]


def test_phases_in_order(session: tuple[dict[str, Any], str, Path]):
    result, log, _ = session
    names = [phase["name"] for phase in result["phases"]]
    phases = ["attached", "diagnostics", "related", "after-write", "coverage", "modules"]
    assert names == phases, log
    assert all(phase["ok"] for phase in result["phases"]), log


def test_coverage_as_the_server_words_it(session: tuple[dict[str, Any], str, Path]):
    """The statusline shows the target's coverage the server sent ({percent, backends}) and
    :LowerdModules heads the method with the server's sentence: one method, so one percent."""
    result, log, _ = session
    assert result["ok"], f"{result['message']}\n{log}"
    status = re.fullmatch(r"XNNPACK (\d+) %", result["status"])
    assert status, result["status"]
    sizes, first = result["module_lines"][:2]  # the target's sizes, then its method
    assert re.fullmatch(
        r"net · \.pte [\d.]+ KiB \(constants .*\); forward: planned memory .*", sizes
    )
    sentence = re.fullmatch(
        r"net · forward: (\d+) of (\d+) ops on XNNPACK in \d+ partitions? \((\d+) %\)"
        r"(?:; \d+ fix(?:es)? would make this \d+ partitions?)?",  # the server's fixes hint
        first,
    )
    assert sentence, first
    delegated, ops, percent = map(int, sentence.groups())
    assert 0 < delegated < ops  # the cumsum stays on the CPU
    assert int(status.group(1)) == percent < 100
    # The root module row is the whole method: the server's row percent is the method's.
    root = next(line for line in result["module_lines"] if line.lstrip().startswith("(model)"))
    assert root.split()[1:5] == [str(delegated), "of", str(ops), str(percent)], root


def test_lua_units(tmp_path: Path):
    """editors/neovim/test/unit.lua: the report text, quickfix items and root finding."""
    env = {**os.environ, "LOWERD_NVIM_RTP": str(NEOVIM_PLUGIN), "LOWERD_NVIM_TMP": str(tmp_path)}
    process = subprocess.run(
        nvim_headless(UNIT_TESTS),
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )
    output = process.stdout + process.stderr
    assert process.returncode == 0, output
    assert re.search(r"^\d+ passed, 0 failed$", process.stdout, re.MULTILINE), output
