"""code-server (a real VS Code) and the e2e driver's playwright-core, installed once per machine.

tests/test_vscode_e2e.py drives the packaged extension in code-server. Installing it (from the
npm registry, by ../shared/tools/setup-code-server.sh) is a machine's setup, like apt's nvim for
tests/test_neovim.py: `.ci/run` runs it before the suite (`python -m testkit.code_server`), and
the test calls the same function, which finds the install in the cache and returns at once.

The install is kept per code-server version, Node ABI and setup script (a change of any makes a
new one); two sessions at once install it once (a lock), and a half-done install is never used
(it is renamed into place when complete).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
E2E = REPO / "editors" / "vscode" / "e2e"
SETUP = REPO.parent / "shared" / "tools" / "setup-code-server.sh"
CODE_SERVER_VERSION = "4.100.3"
# A cold npm cache on a slow registry: the install is minutes, not hours.
INSTALL_SECONDS = 1800


class Unavailable(Exception):
    """Why code-server cannot be installed here (a missing tool, a failed install)."""


def cache_root() -> Path:
    if os.environ.get("LOWERD_E2E_CACHE"):
        return Path(os.environ["LOWERD_E2E_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "lowerd-e2e"


def install() -> Path:
    """code-server's entry script, installed if it is not yet; playwright-core at its locked
    version in editors/vscode/e2e. Raises Unavailable with the reason."""
    for tool, package in (("node", "nodejs"), ("npm", "npm")):
        if shutil.which(tool) is None:
            raise Unavailable(f"{tool} is not installed (apt-get install {package})")
    if not SETUP.is_file():
        raise Unavailable(f"{SETUP} is missing: it installs code-server")
    key = hashlib.sha256(SETUP.read_bytes()).hexdigest()[:12]
    root = cache_root()
    home = root / f"code-server-{CODE_SERVER_VERSION}-node{_node_abi()}-{key}"
    entry = home / "node_modules" / "code-server" / "out" / "node" / "entry.js"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not entry.is_file():
            if shutil.which("krb5-config") is None:
                raise Unavailable(
                    "libkrb5-dev is not installed (code-server's kerberos module needs it)"
                )
            partial = home.with_name(home.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            _run(["bash", str(SETUP), str(partial)], root, "installing code-server")
            partial.rename(home)
        _install_playwright()
    return entry


def _install_playwright() -> None:
    """The driver's playwright-core, as its lockfile pins it (a second with a warm npm cache)."""
    installed = E2E / "node_modules" / "playwright-core" / "package.json"
    locked = json.loads((E2E / "package-lock.json").read_text())
    wanted = locked["packages"]["node_modules/playwright-core"]["version"]
    if not installed.is_file() or json.loads(installed.read_text())["version"] != wanted:
        _run(["npm", "ci", "--no-audit", "--no-fund"], E2E, "installing playwright-core")


def _node_abi() -> str:
    return subprocess.run(
        ["node", "-p", "process.versions.modules"], capture_output=True, text=True, check=True
    ).stdout.strip()


def _run(args: list[str], cwd: Path, what: str) -> None:
    process = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=INSTALL_SECONDS)
    if process.returncode != 0:
        tail = "\n".join((process.stdout + process.stderr).splitlines()[-30:])
        raise Unavailable(f"{what} failed (exit {process.returncode}):\n{tail}")


def main() -> int:
    """Exit 1 when the install fails and LOWERD_E2E_REQUIRED=1 (CI: the test would fail the
    same way, later); otherwise the test skips with the reason printed here."""
    try:
        entry = install()
    except Unavailable as why:
        required = os.environ.get("LOWERD_E2E_REQUIRED") == "1"
        skips = "" if required else " (tests/test_vscode_e2e.py will skip)"
        print(f"code-server: {why}{skips}", file=sys.stderr)
        return 1 if required else 0
    print(f"code-server: {entry}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
