"""One `lowerd build` of several targets: what is already up to date, the JSON document, the
outcome (which the CLI turns into its exit code).

Shared by the in-process build (lowerd.cli.build_command) and the daemon
(lowerd.daemon.build_service), so that a build answers with the same document and exit code
whichever path ran it. Nothing here imports torch: the daemon answers up-to-date targets with it,
without a worker.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lowerd.project.build_state import discard_failed_output, read_state, still_standing
from lowerd.project.config import ProjectConfig, TargetConfig, load_config, select_targets
from lowerd.project.disk_errors import key_line
from lowerd.project.project_store import configured_cache_dir, store_for
from lowerd.project.result import TargetResult, remote_warnings
from lowerd.project.wire import encode

# How a build ended: every target built; a target failed (the others still build); a usage or
# config error stopped it. cli/exit_codes.py maps each to the process's exit code.
Outcome = Literal["ok", "target_failed", "usage"]


@dataclass(frozen=True)
class BuildDocument:
    """What `lowerd build --json` prints, and the daemon's answer to a build: each target's
    result, in the order asked, and the blob cache's warnings."""

    config: str  # the project's pyproject.toml
    targets: list[TargetResult]
    warnings: list[str] = field(default_factory=list)


@dataclass
class Batch:
    config: ProjectConfig
    targets: list[TargetConfig]
    use_cache: bool
    results: dict[str, TargetResult] = field(default_factory=dict)  # target name -> its result
    # The lines saying which build records were there and not taken (build_state.read_state).
    refused: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, config_path: Path, target_names: Sequence[str], use_cache: bool) -> Batch:
        config = load_config(config_path)
        return cls(config, select_targets(config, target_names), use_cache)

    def answer_up_to_date(self) -> None:
        """Fill in every target whose last build still stands (never with --no-cache); note each
        record that is there and not taken."""
        for target in self.stale:
            result = self.up_to_date(target)
            if result is not None:
                self.results[target.name] = result

    def up_to_date(self, target: TargetConfig) -> TargetResult | None:
        """The target's last result when it still stands; a record not taken is noted."""
        started = time.perf_counter()
        read = read_state(self.config, target)
        refusal = read.refusal(target.name)
        if refusal is not None and refusal not in self.refused:
            self.refused.append(refusal)
        if not self.use_cache:
            return None
        result = still_standing(self.config, target, read.state)
        return result and result.timed(time.perf_counter() - started)

    @property
    def stale(self) -> list[TargetConfig]:
        return [target for target in self.targets if target.name not in self.results]

    def outcome(self) -> tuple[dict[str, Any], Outcome]:
        """The JSON document and how the build ended, once every target has its result."""
        results = [self.results[target.name] for target in self.targets]
        for result in results:
            discard_failed_output(self.config, result)
        said = [line for result in results for line in result.warnings or ()]
        warnings = self.refused + said + cache_warnings(self.config, self.use_cache, results)
        document = encode(BuildDocument(str(self.config.path), results, warnings))
        # A .pte its runtime would refuse is written, and still a failure of the build; so is
        # one whose verification failed (it runs, but not as eager does).
        failed = any(result.verdict != "ok" for result in results)
        return document, "target_failed" if failed else "ok"


def cache_warnings(
    config: ProjectConfig, use_cache: bool, results: list[TargetResult]
) -> list[str]:
    """What of the blob cache, or of its remote tier, a build's results (or a compare's,
    project/compare.py) could not use; the local store is trimmed to its cap first."""
    local = _store_warnings(config, use_cache, results)
    if where := _cache_dir_key(config):
        local = [where + line.removeprefix("cache: ") for line in local]
    return local + remote_warnings(results)


def _cache_dir_key(config: ProjectConfig) -> str:
    """`pyproject.toml:N: cache_dir: ` when the config's cache_dir chose the cache (a problem
    of it is that key's to fix), else nothing ($LOWERD_CACHE_DIR or the user's cache)."""
    if configured_cache_dir(config) is None:
        return ""
    line = key_line(config, "cache_dir")
    return f"{config.path.name}:{line}: cache_dir: " if line else f"{config.path.name}: cache_dir: "


def _store_warnings(
    config: ProjectConfig, use_cache: bool, results: list[TargetResult]
) -> list[str]:
    """Trim the cache to its cap, and say what of it could not be used.

    Only a build that missed can have stored blobs, or found the cache unusable: a store
    that cannot be written makes every partition a miss ("uncached"). The store notes its
    I/O errors instead of raising them, so the .pte already written stands.
    """
    # What the builds' own stores met (a full disk fails their writes), each line once.
    met = list(dict.fromkeys(line for result in results for line in result.cache.problems or ()))
    if not use_cache or not any(result.cache.misses for result in results):
        return met
    store = store_for(config)
    if store.check() is not None:
        return [f"{line}; built without it" for line in store.warnings()]
    store.enforce_limit()
    return list(dict.fromkeys([*met, *store.warnings()]))
