"""`lowerd build` through a warm daemon vs in-process vs stock ExecuTorch, on examples/, in one run.

Every measured run is a fresh process timed from outside, as a user or a CI script would run it:

    stock        a Python script: torch.export + to_edge_transform_and_lower([XnnpackPartitioner()])
                 + to_executorch() for each target, written to a .pte (the whole project for a
                 full build, the edited target alone for a one-target change)
    --no-daemon  `lowerd build --no-daemon --json`: everything in the client process
    daemon       `lowerd build --json` with the project's daemon running and warm

in three situations:

    full build   no outputs, no build records, an empty blob cache
    unchanged    nothing changed since the last build (stock has no such notion: it builds again)
    one target   one target's model edited (a new seed in models/cnn.py: every weight changes)

The project is copied to a temp dir with its own runtime folder and blob cache; the daemon is
started and warmed with one unmeasured build before anything is measured. Each cell is the median
of --repeat runs. The .pte files of the three paths are compared byte for byte.

    .venv/bin/python -m bench.bench_daemon              # --repeat 3: a few minutes
    .venv/bin/python -m bench.bench_daemon --repeat 1   # quicker

This is a script, not a test: its timings assert nothing.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import EXAMPLES, Processes, bench_env, workdir
from testkit.projects import copy_project

EDITED_TARGET, EDITED_FILE = "cnn", "models/cnn.py"
# The LLM's flow (optimum-executorch's) is not the plain stock chain: bench_optimum.py measures it.
NOT_BENCHED = ("llm",)
_SEED = re.compile(r"torch\.manual_seed\(\d+\)")
UNCHANGED_GOAL_SECONDS = 0.3
SITUATIONS = ("full build", "unchanged", "one target")
PATHS = ("stock", "--no-daemon", "daemon")


@dataclass
class Cell:
    seconds: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


class Bench:
    def __init__(self, workdir: Path):
        self.project = copy_project(EXAMPLES, workdir / "project")
        self.cache = workdir / "cache"
        self.stock_out = workdir / "stock"
        # lowerd as installed (no snapshot), its own runtime folder (the daemon's) and cache
        env = bench_env(cache=self.cache, runtime=workdir / "run")
        self.processes = Processes(workdir, cwd=self.project, env=env)
        config = tomllib.loads((self.project / "pyproject.toml").read_text())
        targets = config["tool"]["lowerd"]["targets"].items()
        self.entries = {n: t["entry"] for n, t in targets if n not in NOT_BENCHED}
        self.seed = 0
        self.cells = {(s, p): Cell() for s in SITUATIONS for p in PATHS}
        self.differing: set[str] = set()  # situations where a .pte differed from stock's

    # The runs -----------------------------------------------------------------------------

    def lowerd(self, *args: str) -> tuple[float, dict[str, str]]:
        done = self.processes.lowerd(*args)
        document = json.loads(done.stdout) if "--json" in args else {"targets": []}
        return done.seconds, {t["name"]: t["sha256"] for t in document["targets"]}

    def stock(self, targets: list[str]) -> tuple[float, dict[str, str]]:
        spec = {"project": str(self.project), "out": str(self.stock_out)}
        spec["entries"] = {name: self.entries[name] for name in targets}
        shas = self.processes.worker("stock-targets", spec)
        return shas.pop("wall_seconds"), shas

    def forget_builds(self) -> None:
        """No outputs, no build records, an empty blob cache: a first build."""
        shutil.rmtree(self.project / "build", ignore_errors=True)
        shutil.rmtree(self.cache, ignore_errors=True)

    def edit(self) -> None:
        self.seed += 1
        path = self.project / EDITED_FILE
        text, count = _SEED.subn(f"torch.manual_seed({self.seed})", path.read_text())
        assert count == 1, f"expected one torch.manual_seed(...) in {EDITED_FILE}"
        path.write_text(text)

    def record(
        self,
        situation: str,
        path: str,
        run: Callable[..., tuple[float, dict[str, str]]],
        *args: Any,
    ) -> dict[str, str]:
        seconds, shas = run(*args)
        self.cells[situation, path].seconds.append(seconds)
        print(f"  {situation:<11} {path:<12} {seconds:6.2f} s", file=sys.stderr)
        return shas

    def compare(self, situation: str, stock: dict[str, str], shas: dict[str, str]) -> None:
        if any(shas.get(name) != sha for name, sha in stock.items()):
            self.differing.add(situation)

    # The bench ----------------------------------------------------------------------------

    def run(self, repeat: int) -> None:
        print("starting the daemon and warming it with one build", file=sys.stderr)
        self.lowerd("daemon", "start")
        self.lowerd("build", "--json", *self.entries)
        lowerd_paths = (("--no-daemon", ["--no-daemon"]), ("daemon", []))
        for round_number in range(1, repeat + 1):
            print(f"round {round_number} of {repeat}", file=sys.stderr)
            stock = self.record("full build", "stock", self.stock, list(self.entries))
            for path, flags in lowerd_paths:
                build = ["build", "--json", *flags, *self.entries]
                self.forget_builds()
                full = self.record("full build", path, self.lowerd, *build)
                self.compare("full build", stock, full)
                self.compare(
                    "unchanged", stock, self.record("unchanged", path, self.lowerd, *build)
                )
            for path, flags in lowerd_paths:
                self.edit()
                build = ["build", "--json", *flags, *self.entries]
                shas = self.record("one target", path, self.lowerd, *build)
                edited = self.record("one target", "stock", self.stock, [EDITED_TARGET])
                self.compare("one target", edited, shas)
        # Stock has no incremental build: unchanged inputs cost it a full build again.
        self.cells["unchanged", "stock"] = self.cells["full build", "stock"]

    def table(self) -> str:
        header = (
            f"{'':<12} {'stock s':>8} {'--no-daemon s':>14} {'daemon s':>9}"
            f" {'daemon/stock':>13} {'daemon/--no-daemon':>19} {'= stock':>8}"
        )
        lines = [header]
        for situation in SITUATIONS:
            stock, local, daemon = (self.cells[situation, p] for p in PATHS)
            lines.append(
                f"{situation:<12} {stock.median:>8.2f} {local.median:>14.2f} {daemon.median:>9.2f}"
                f" {daemon.median / stock.median:>12.3f}x {daemon.median / local.median:>18.3f}x"
                f" {'NO' if situation in self.differing else 'yes':>8}"
            )
        unchanged = self.cells["unchanged", "daemon"].median
        verdict = "met" if unchanged <= UNCHANGED_GOAL_SECONDS else "missed"
        lines += [
            "",
            f"unchanged rebuild through the daemon: {unchanged:.3f} s "
            f"(goal <= {UNCHANGED_GOAL_SECONDS} s: {verdict})",
            f"one-target change: {self.cells['one target', 'daemon'].median:.2f} s through the "
            f"daemon, {self.cells['one target', '--no-daemon'].median:.2f} s in-process "
            "(which pays the torch import)",
        ]
        return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per cell (median shown)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = parser.parse_args()
    with workdir("lowerd-bench-daemon-", args.keep) as root:
        bench = Bench(root)
        try:
            bench.run(args.repeat)
        finally:
            bench.lowerd("daemon", "stop")
        print(bench.table())


if __name__ == "__main__":
    main()
