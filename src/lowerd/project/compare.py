"""One `lowerd compare`: a target lowered once per backend, each alone, as `lowerd build` would
lower it with `backends = [that one]`.

Each backend's build is an ordinary build of the target under `config.with_backends((backend,))`
(the editor's `backends` override), with one difference: its .pte, data files and build record go
to out_dir/.lowerd/compare/<backend>/, so a compare never overwrites the target's real .pte or
record, and a second compare of unchanged sources is answered from that private record without a
worker. The partitions themselves come from the shared blob cache, like any build's: a backend the
target is really built with is served the real build's blobs, and a later real build with a
compared backend is served the compare's.

Shared by the daemon (daemon/compare_service.py) and the in-process CLI (cli/compare_command.py),
which build the stale backends in forked workers. No torch here.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from lowerd.project.backends import KNOWN_BACKENDS
from lowerd.project.batch import Outcome, cache_warnings
from lowerd.project.build_state import STATE_DIR, discard_failed_output, up_to_date_report
from lowerd.project.compare_result import BackendComparison, CompareResult
from lowerd.project.config import ProjectConfig, TargetConfig, load_config, select_targets
from lowerd.project.errors import ConfigError
from lowerd.project.result import TargetResult

COMPARE_DIR = "compare"


def parse_backends(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """`xnnpack,vulkan` (or a list of names) as backend names, duplicates dropped; every known
    backend when none are given. An unknown name is a ConfigError listing the known ones."""
    if text is None:
        return KNOWN_BACKENDS
    names = text.split(",") if isinstance(text, str) else list(text)
    backends = tuple(dict.fromkeys(name.strip() for name in names if name.strip()))
    unknown = [name for name in backends if name not in KNOWN_BACKENDS]
    if unknown:
        raise ConfigError(
            f"unknown backend {unknown[0]!r}; known backends: {', '.join(KNOWN_BACKENDS)}"
        )
    return backends or KNOWN_BACKENDS


def compare_config(config: ProjectConfig, backend: str) -> ProjectConfig:
    """The config a compare builds `backend` with: every target on that backend alone, writing
    into the compare's own folder."""
    out_dir = config.out_dir / STATE_DIR / COMPARE_DIR / backend
    return replace(config.with_backends((backend,)), out_dir=out_dir)


@dataclass
class CompareBatch:
    config: ProjectConfig  # the project's, as its file says
    target: TargetConfig
    backends: tuple[str, ...]
    use_cache: bool = True
    results: dict[str, TargetResult] = field(default_factory=dict)  # backend -> its build

    @classmethod
    def load(
        cls,
        config_path: Path,
        target_name: str,
        backends: str | Sequence[str] | None,
        use_cache: bool = True,
    ) -> CompareBatch:
        """ConfigError for an unknown target or backend, or a target that names its own
        partitioners, whole program or recipe (there is no backend of lowerd's to swap)."""
        config = load_config(config_path)
        [target] = select_targets(config, [target_name])
        routes = ("partitioners", "whole_program", "recipe")
        route = next((name for name in routes if getattr(target, name)), None)
        if route is not None:
            raise ConfigError(
                f"target {target.name!r} lowers with its own {route}: lowerd compare swaps "
                f"lowerd's backends ({', '.join(KNOWN_BACKENDS)}), which it does not use",
                config.path,
            )
        return cls(config, target, parse_backends(backends), use_cache)

    def config_for(self, backend: str) -> ProjectConfig:
        return compare_config(self.config, backend)

    def answer_up_to_date(self) -> None:
        """Fill in every backend whose last compare build still stands (never with --no-cache)."""
        if not self.use_cache:
            return
        for backend in self.stale:
            started = time.perf_counter()
            config = self.config_for(backend)
            result = up_to_date_report(config, config.targets[self.target.name])
            if result is not None:
                self.results[backend] = result.timed(time.perf_counter() - started)

    @property
    def stale(self) -> list[str]:
        return [backend for backend in self.backends if backend not in self.results]

    def outcome(self) -> tuple[CompareResult, Outcome]:
        """The compare once every backend has its result: "ok" when at least one backend
        lowered (the others' errors are their columns'), else "target_failed"."""
        columns = []
        for backend in self.backends:
            result = self.results[backend]
            discard_failed_output(self.config_for(backend), result)
            columns.append(BackendComparison.of(backend, result))
        warnings = self._warnings(self.results.values())
        compared = CompareResult(str(self.config.path), self.target.name, tuple(columns), warnings)
        return compared, "ok" if compared.compared else "target_failed"

    def _warnings(self, results: Iterable[TargetResult]) -> tuple[str, ...]:
        return tuple(cache_warnings(self.config, self.use_cache, list(results)))
