"""[<table>.runtime]: the runtime a target's .pte must load on, its check (the reader the field
table, config_keys.py, names) and how a target's keys are laid over the project's.

Without it, the runtime is this host's: the kernels and backends ExecuTorch's Python runtime
registers. `ops` names a selective-build op list (what ExecuTorch's gen_oplist writes and its
build reads), `backends` the backend ids the device runtime registers. The engine's side, which
reads the op list with torchgen's own parser, is lowering/loadability.py.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from lowerd.project.config_reader import KeyReader, describe
from lowerd.project.config_values import refuse_nul
from lowerd.project.located import Located
from lowerd.project.toml_lines import KeyPath

RUNTIME_KEYS = ("ops", "backends")


@dataclass(frozen=True)
class RuntimeConfig:
    """The runtime the .pte must load on; a part not given is this host's."""

    # The op list's path as written, relative to the pyproject.toml unless absolute, at its line.
    ops: Located[str] | None = None
    # Backend ids (`XnnpackBackend`) the runtime registers, at the key's line.
    backends: Located[tuple[str, ...]] | None = None
    given: frozenset[str] = frozenset()  # the keys its table wrote: laid over the project's

    @property
    def declared(self) -> bool:
        return self.ops is not None or self.backends is not None

    def describe(self) -> str:
        """The runtime in a report's words: "this host's runtime", "ops.yaml, [VulkanBackend]"."""
        if not self.declared:
            return "this host's runtime"
        return f"{self.kernel_source()}, {self.backend_source()}"

    def kernel_source(self) -> str:
        """Where its kernels are listed: "the op list ops.yaml", "this host's kernels"."""
        return f"the op list {self.ops.value}" if self.ops else "this host's kernels"

    def backend_source(self) -> str:
        """Where its backends are listed: "backends [VulkanBackend]", "this host's backends"."""
        if self.backends is None:
            return "this host's backends"
        return f"backends [{', '.join(self.backends.value)}]"

    def to_json(self) -> dict[str, object]:
        """What the build's inputs digest: only what was declared."""
        shown: dict[str, object] = {}
        if self.ops is not None:
            shown["ops"] = self.ops.value
        if self.backends is not None:
            shown["backends"] = list(self.backends.value)
        return shown


def runtime_settings(reader: KeyReader, value: object, key: KeyPath) -> RuntimeConfig:
    """[<table>.runtime]: ops (an existing file) and backends (an array of backend ids)."""
    if not isinstance(value, dict):
        raise reader.error(
            f'runtime must be a table like {{ ops = "ops.yaml" }}, got {describe(value)}', key
        )
    reader.check_keys(value, RUNTIME_KEYS, key, "runtime")
    ops = backends = None
    if "ops" in value:
        ops_key = (*key, "ops")
        ops = Located(_op_list(reader, value["ops"], ops_key), reader.line(ops_key) or 1)
    if "backends" in value:
        backends_key = (*key, "backends")
        ids = _backend_ids(reader, value["backends"], backends_key)
        backends = Located(ids, reader.line(backends_key) or 1)
    return RuntimeConfig(ops=ops, backends=backends, given=frozenset(value))


def _op_list(reader: KeyReader, value: object, key: KeyPath) -> str:
    if not isinstance(value, str) or not value:
        raise reader.error(
            f"ops must be the path of an op list (.yaml), got {describe(value)}", key
        )
    refuse_nul(reader, value, key)
    if not (reader.root / value).expanduser().is_file():
        raise reader.error(f"ops: no file {value!r} (relative to the pyproject.toml)", key)
    return value


def _backend_ids(reader: KeyReader, value: object, key: KeyPath) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise reader.error(
            f'backends must be an array of backend ids like ["XnnpackBackend"], got '
            f"{describe(value)}",
            key,
        )
    return tuple(value)


def lay_runtime(default: RuntimeConfig, given: RuntimeConfig | None) -> RuntimeConfig:
    """A target's runtime keys laid over the project's, key by key."""
    if given is None:
        return default
    laid = {name: getattr(given, name) for name in given.given}
    return replace(default, **laid, given=default.given | given.given)
