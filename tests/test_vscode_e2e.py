"""The VS Code extension end to end in a real VS Code (issue 15 §8).

code-server 4.100.3 (VS Code 1.100, installed from the npm registry by
../shared/tools/setup-code-server.sh and cached in ~/.cache/lowerd-e2e: testkit/code_server.py,
which .ci/run runs before the suite, as it installs nvim for test_neovim.py) gets the packaged
editors/vscode/dist/lowerd.vsix and opens a copy of tests/projects/editor (its `refused` target
only); editors/vscode/e2e/run.mjs drives it in Debian's chromium with playwright-core and waits,
phase by phase, for what a user sees: the not-delegated warnings at the pow and cumsum lines in
the Problems panel, the coverage in the status bar, the coverage code lens above the entry, the
host latency it adds once the verified target's .pte ran on this host (`verify = true`), the
inlay hints, the report webview opened from the lens, *lowerd: Build target…* from the command
palette, lowerd's code actions on a warning and the explanation *Explain this rebuild* opens, the
compare view from *Compare backends*, and the pow warning gone after a save that fixes it.
Each phase is a test here; a failed phase names its screenshot (in $LOWERD_E2E_ARTIFACTS, else
this test's tmp folder).

Without node, chromium or ripgrep, or when code-server cannot be installed, the tests skip with the
reason; with LOWERD_E2E_REQUIRED=1 (.ci/run sets it, after installing them) they fail instead: CI
must not pass with the extension untested.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from helpers import DEADLINE, PROJECTS, TESTS, line_marks
from testkit import code_server

REPO = TESTS.parent
EXTENSION = REPO / "editors" / "vscode"
E2E = EXTENSION / "e2e"
DRIVER = E2E / "run.mjs"
VSIX = EXTENSION / "dist" / "lowerd.vsix"
PROJECT = PROJECTS / "editor"
TARGET = "refused"
REQUIRED = os.environ.get("LOWERD_E2E_REQUIRED") == "1"

# Per wait in the driver: the first build imports torch and ExecuTorch in a cold worker.
WAIT_SECONDS = DEADLINE
# The whole drive: a dozen waits, most of them short, with room to spare.
RUN_SECONDS = 6 * DEADLINE

pytestmark = pytest.mark.e2e


def unavailable(reason: str) -> NoReturn:
    if REQUIRED:
        pytest.fail(f"{reason} (LOWERD_E2E_REQUIRED=1: the VS Code end-to-end test must run)")
    pytest.skip(reason)


def check_tools() -> None:
    for tool, package in (("node", "nodejs"), ("npm", "npm"), ("rg", "ripgrep")):
        if shutil.which(tool) is None:
            unavailable(f"{tool} is not installed (apt-get install {package}; .ci/run installs it)")
    if chromium() is None:
        unavailable("chromium is not installed (apt-get install chromium; .ci/run installs it)")
    if not VSIX.is_file():
        unavailable(f"{VSIX.relative_to(REPO)} is missing: run editors/vscode/check.sh first")


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def check_vsix_fresh() -> None:
    """The test is of the packaged extension: one older than its sources would test old code."""
    sources = [EXTENSION / "package.json", *(EXTENSION / "src").rglob("*.ts")]
    newest = max(sources, key=lambda path: path.stat().st_mtime)
    if newest.stat().st_mtime > VSIX.stat().st_mtime:
        pytest.fail(
            f"{VSIX.relative_to(REPO)} is older than {newest.relative_to(REPO)}: "
            "run editors/vscode/check.sh (or `npm run package` there) before this test"
        )


def install_code_server() -> Path:
    """code-server as .ci/run installed it before the suite (testkit/code_server.py), or
    installed now where nothing did (a developer's first run)."""
    try:
        return code_server.install()
    except code_server.Unavailable as why:
        unavailable(str(why))


def copy_project(root: Path) -> None:
    """tests/projects/editor with only the refused target, verified: one build per save, and
    its .pte run on this host's runtime after each (a fraction of a second on this model)."""
    shutil.copytree(PROJECT, root, ignore=shutil.ignore_patterns("build", "__pycache__"))
    pyproject = root / "pyproject.toml"
    text = pyproject.read_text()
    tables = re.split(r"(?m)^(?=\[tool\.lowerd\.targets\.)", text)
    header = f"[tool.lowerd.targets.{TARGET}]"
    kept = [
        t.replace(header, f"{header}\nverify = true", 1) if t.startswith(header) else t
        for t in tables
        if not t.startswith("[tool.lowerd.targets.") or t.startswith(header)
    ]
    pyproject.write_text("".join(kept))


class CodeServer:
    """code-server in its own process group (the extension host and `lowerd serve` with it),
    its output kept for the failure messages."""

    def __init__(self, entry: Path, tmp_path: Path, project: Path):
        home = tmp_path / "home"
        self.user_data = tmp_path / "user-data"
        extensions = tmp_path / "extensions"
        (self.user_data / "User").mkdir(parents=True)
        settings = {
            "lowerd.interpreter": sys.executable,
            "workbench.startupEditor": "none",
            "workbench.tips.enabled": False,
            "security.workspace.trust.enabled": False,
            "telemetry.telemetryLevel": "off",
            "extensions.autoCheckUpdates": False,
            "extensions.autoUpdate": False,
        }
        (self.user_data / "User" / "settings.json").write_text(json.dumps(settings, indent=2))
        self.env = {
            **os.environ,
            # code-server's config, VS Code's state and lowerd's blob cache: in the test's folder.
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / "config"),
            "XDG_DATA_HOME": str(home / "data"),
            "XDG_CACHE_HOME": str(home / "cache"),
            "LOWERD_CACHE_DIR": str(tmp_path / "lowerd-cache"),
        }
        self.env.pop("VIRTUAL_ENV", None)
        common = ["--user-data-dir", str(self.user_data), "--extensions-dir", str(extensions)]
        install = subprocess.run(
            ["node", str(entry), *common, "--install-extension", str(VSIX)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=DEADLINE,
        )
        assert install.returncode == 0 and "successfully installed" in install.stdout, (
            f"code-server --install-extension {VSIX}:\n{install.stdout}\n{install.stderr}"
        )
        self.lines: list[str] = []
        self.url: str | None = None
        self.listening = threading.Event()
        self.process = subprocess.Popen(
            [
                "node",
                str(entry),
                "--auth",
                "none",
                "--bind-addr",
                "127.0.0.1:0",
                *common,
                "--disable-telemetry",
                "--disable-update-check",
                "--disable-workspace-trust",
                "--ignore-last-opened",
                str(project),
            ],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        threading.Thread(target=self._read, daemon=True).start()
        if not self.listening.wait(DEADLINE) or self.url is None:
            self.stop()
            pytest.fail(f"code-server did not listen:\n{self.output()}")

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))
            match = re.search(r"HTTP server listening on (http://127\.0\.0\.1:\d+)/", line)
            if match:
                self.url = match[1]
                self.listening.set()
        self.listening.set()

    def output(self) -> str:
        return "\n".join(self.lines[-40:])

    def lowerd_log(self) -> str:
        """The extension's *lowerd* output channel, as VS Code logged it."""
        logs = sorted((self.user_data / "logs").rglob("*lowerd*.log"))
        return "\n".join(
            f"{log}:\n" + "\n".join(log.read_text(errors="replace").splitlines()[-40:])
            for log in logs
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=DEADLINE / 4)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        # What the group left behind (lowerd serve's build workers) goes with it.
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="module")
def drive(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    check_tools()
    check_vsix_fresh()
    entry = install_code_server()
    tmp_path = tmp_path_factory.mktemp("vscode")
    project = tmp_path / "editor"
    copy_project(project)
    marks = line_marks(project)
    model = project / marks["refused.pow"][0]
    source = model.read_text().splitlines()
    lines = {name: marks[f"refused.{name}"][1] for name in ("linear", "pow", "cumsum", "entry")}
    # One character into each warned statement: the cursor must be in the warning's range.
    columns = {
        name: len(source[lines[name] - 1]) - len(source[lines[name] - 1].lstrip()) + 2
        for name in ("pow", "cumsum")
    }
    artifacts = Path(os.environ.get("LOWERD_E2E_ARTIFACTS") or tmp_path / "screenshots")
    server = CodeServer(entry, tmp_path, project)
    config = {
        "url": f"{server.url}/?folder={project}",
        "file": marks["refused.pow"][0],
        "target": TARGET,
        "pte": str(project / "build" / f"{TARGET}.pte"),
        "lines": lines,
        "columns": columns,
        **{f"{name}Mark": f"LINE-MARK: refused.{name}" for name in ("linear", "pow", "cumsum")},
        "editFrom": "x**3",
        "editTo": "x**2",
        "screenshots": str(artifacts),
        "result": str(tmp_path / "result.json"),
        "waitMs": int(WAIT_SECONDS * 1000),
        "chromium": chromium(),
    }
    (tmp_path / "config.json").write_text(json.dumps(config, indent=2))
    begun = time.monotonic()
    try:
        driver = subprocess.run(
            ["node", str(DRIVER), str(tmp_path / "config.json")],
            cwd=E2E,
            capture_output=True,
            text=True,
            timeout=RUN_SECONDS,
        )
        seconds = time.monotonic() - begun
        log = (
            f"driver exit {driver.returncode} after {seconds:.0f} s\n{driver.stdout}{driver.stderr}"
            f"\ncode-server:\n{server.output()}\n{server.lowerd_log()}"
        )
    finally:
        server.stop()
    result_file = Path(config["result"])
    if not result_file.is_file():
        pytest.fail(f"the driver wrote no result\n{log}")
    result = json.loads(result_file.read_text())
    yield {**result, "log": log, "config": config, "model": model}


def phase(drive: dict[str, Any], name: str) -> Any:
    """The phase's observations; fails with its error, screenshot and the logs when it failed."""
    found = [p for p in drive["phases"] if p["name"] == name]
    if not found:
        pytest.fail(
            f"the driver did not reach the {name} phase: {drive['message']}\n{drive['log']}"
        )
    [record] = found
    if not record["ok"]:
        pytest.fail(
            f"{name}: {record['error']}\nscreenshot: {record['screenshot']}\n{drive['log']}"
        )
    return record["observed"]


def test_problems_panel_lists_the_refused_ops_at_their_lines(drive: dict[str, Any]):
    rows = phase(drive, "problems")
    lines = drive["config"]["lines"]
    warnings = {row["line"]: row for row in rows if row["severity"] == "Warning"}
    assert "only support power == 2, got 3" in warnings[lines["pow"]]["message"], rows
    assert "no XNNPACK support for aten.cumsum.default" in warnings[lines["cumsum"]]["message"]
    assert lines["linear"] not in warnings  # delegated: no warning


def test_status_bar_shows_the_coverage(drive: dict[str, Any]):
    item = phase(drive, "status-bar")
    assert re.fullmatch(r"XNNPACK \d+ %", item["text"]), item
    assert item["text"] == "XNNPACK 50 %"  # 2 of 4 ops: the two Linears


def test_coverage_code_lens_above_the_entry(drive: dict[str, Any]):
    lens = phase(drive, "code-lens")
    assert re.match(
        r"lowerd(?: refused)?: forward: 2 of 4 ops on XNNPACK in 2 partitions \(50 %\)",
        lens["text"],
    ), lens
    assert any("Build .pte" in text for text in lens["lenses"]), lens


def test_verified_lens_shows_the_host_latency(drive: dict[str, Any]):
    """verify = true: the .pte ran on this host's runtime; the lens says how long each part took."""
    lens = phase(drive, "verified-lens")
    assert lens.startswith("lowerd"), lens
    match = re.search(r" · forward ([\d.e+-]+) ms here · XNNPACK #1 ([\d.e+-]+) ms", lens)
    assert match and float(match[1]) > 0 and float(match[2]) > 0, lens
    assert " · CPU " in lens, lens  # pow and cumsum, run by the CPU kernels


def test_inlay_hints_at_the_line_ends(drive: dict[str, Any]):
    # VS Code pads an inlay hint with a hair space.
    hints = {k: v.replace("\u200a", " ") for k, v in phase(drive, "inlay-hints").items()}
    assert hints["pow"].endswith("# LINE-MARK: refused.pow → CPU"), hints
    assert hints["cumsum"].endswith("# LINE-MARK: refused.cumsum → CPU"), hints
    assert hints["linear"].endswith("→ XNNPACK #1"), hints


def test_report_webview_opens_from_the_lens(drive: dict[str, Any]):
    report = phase(drive, "report-from-lens")["text"]
    lines = drive["config"]["lines"]
    assert "forward: 2 of 4 ops on XNNPACK in 2 partitions (50 %)" in report, report
    assert f"models/refused.py:{lines['pow']}" in report
    assert f"models/refused.py:{lines['cumsum']}" in report


def test_build_target_from_the_command_palette(drive: dict[str, Any]):
    """The .pte deleted (the server does not watch out_dir), only the command rebuilds it."""
    seen = phase(drive, "build-target")
    assert any(TARGET in text for text in seen["appeared"]), seen
    assert seen["coverage"]["text"] == "XNNPACK 50 %", seen
    assert Path(drive["config"]["pte"]).is_file()


def test_code_action_explains_the_rebuild(drive: dict[str, Any]):
    observed = phase(drive, "code-action")
    titles = observed["titles"]
    for title in (
        f"lowerd: Show in report ({TARGET})",
        f"lowerd: Explain this rebuild of {TARGET}",
        f"lowerd: Copy a stock ExecuTorch script for {TARGET}",
        f"lowerd: Compare backends for {TARGET}",
    ):
        assert title in titles, titles
    text = observed["document"]["text"]
    assert "# lowerd explain" in text and TARGET in text, text
    # The build-target phase's: the .pte it deleted.
    assert "lowered because the .pte was missing or modified" in text, text


def test_compare_view(drive: dict[str, Any]):
    text = phase(drive, "compare-view")["text"]
    assert TARGET in text and "XNNPACK" in text, text
    assert "50 %" in text, text  # XNNPACK's coverage, as the status bar's


def test_saving_a_fix_removes_its_warning(drive: dict[str, Any]):
    observed = phase(drive, "save-fix")
    lines = drive["config"]["lines"]
    assert not any(row["line"] == lines["pow"] for row in observed["rows"]), observed
    assert any(row["line"] == lines["cumsum"] for row in observed["rows"]), observed
    assert "x = x**2" in drive["model"].read_text().splitlines()[lines["pow"] - 1]


def test_every_phase_passed(drive: dict[str, Any]):
    failed = [p["name"] for p in drive["phases"] if not p["ok"]]
    assert drive["ok"] and not failed, f"failed: {failed} {drive['message']}\n{drive['log']}"
