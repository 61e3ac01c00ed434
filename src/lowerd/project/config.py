"""The [tool.lowerd] table of a pyproject.toml: what to build, with which backends, and where.

Every mistake in it is reported as a ConfigError at the file and line of the offending key, so an
editor can underline it. The keys, their checks and their defaults are the field table of
config_keys.py; this module reads a file with it into a ProjectConfig and its TargetConfigs. Only
the standard library (and lowerd.cache.location's size grammar) is imported: loading a config
must stay cheap.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar, cast

from lowerd.project.config_keys import Scope, key_names, keys_in
from lowerd.project.config_reader import (
    LOWERD,
    TARGETS,
    KeyReader,
    Table,
    decode_text,
    describe,
    did_you_mean,
    parse_toml,
    read_toml,
)
from lowerd.project.config_values import is_path
from lowerd.project.errors import ConfigError
from lowerd.project.export_options import ExportConfig
from lowerd.project.located import Located
from lowerd.project.lowering_options import (
    BackendOptions,
    ConstantMethods,
    Options,
    WholeProgram,
    check_lowering_route,
    lay_external_constants,
)
from lowerd.project.quantize_options import QuantizeConfig
from lowerd.project.recipes import RecipeConfig, recipe_clears
from lowerd.project.runtime_options import RuntimeConfig
from lowerd.project.team_config import Executor, RemoteCacheConfig
from lowerd.project.toml_lines import KeyPath

PYPROJECT = "pyproject.toml"
T = TypeVar("T")

# <name>.pte is written into out_dir, so a name must be a plain file stem.
_TARGET_NAME = re.compile(r"[A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class TargetConfig:
    """A [tool.lowerd.targets.<name>] table: each field but name and line is the target key of
    that name (config_keys.py says what each does); a key [tool.lowerd] also takes has the
    project's value as its default."""

    name: str
    # The target's table header, or its entry key when the target is a dotted or inline table.
    line: int
    # "file.py:fn" or "package.module:fn"; its line is where a missing file or function is blamed.
    entry: Located[str]
    backends: tuple[str, ...]
    etrecord: bool
    # backend name -> its partitioner's options, for every backend given any.
    backend_options: BackendOptions = field(hash=False)
    quantize: QuantizeConfig | None
    edge_compile_config: Options = field(hash=False)
    # With `external_constants = true` laid in.
    executorch_backend_config: Options = field(hash=False)
    transform_passes: Located[str] | None
    constant_methods: ConstantMethods = field(hash=False)
    partitioners: Located[str] | None
    whole_program: Located[WholeProgram] | None = field(hash=False)
    export: ExportConfig
    # MemoryPlanningPass's arguments, the algorithm by name; {}: ExecuTorch's default pass.
    memory_planning: Options = field(hash=False)
    sym_shape_eval: str | None  # "hint" or "constraint"; None: ExecuTorch's default
    # One of ExecuTorch's export recipes: the target's whole lowering (project/recipes.py).
    recipe: RecipeConfig | None = field(default=None, hash=False)
    # The runtime the .pte must load on (project/runtime_options.py); default: this host's.
    runtime: RuntimeConfig = RuntimeConfig()
    # Run the .pte on the host runtime after the build (project/verification.py VerifySettings).
    verify: bool = False
    verify_inputs: Located[str] | None = None
    atol: float | None = None
    rtol: float | None = None
    verify_runs: int = 10
    verify_warmup: int = 2
    # Also write <target>.bpte, the program with its test cases (lowering/bundle.py).
    bundled: bool = False

    @property
    def external_constants(self) -> bool:
        """ExecutorchBackendConfig(external_constants=True): constants go to .ptd files."""
        return bool(self.executorch_backend_config.get("external_constants", False))

    def lowering_options(self) -> dict[str, object]:
        """The export settings, configs, passes and constant methods given to torch.export and
        ExecuTorch, as the config holds them (only those given, an export setting only when
        not torch.export's default): part of the program fingerprint and of the JSON result."""
        options: dict[str, object] = {
            "export": self.export.to_json(),
            "edge_compile_config": self.edge_compile_config,
            "executorch_backend_config": self.executorch_backend_config,
            "transform_passes": _value(self.transform_passes),
            "constant_methods": self.constant_methods,
            "partitioners": _value(self.partitioners),
            "whole_program": _value(self.whole_program),
            "recipe": self.recipe.to_json() if self.recipe else None,
            "memory_planning": self.memory_planning,
            "sym_shape_eval": self.sym_shape_eval,
        }
        return {name: value for name, value in options.items() if value}

    def shown_options(self) -> dict[str, object]:
        """The lowering options and the declared quantization, resolved: the result's "options"
        (the quantization is keyed by the inputs digest on its own, and by the program it makes)."""
        quantize = {"quantize": self.quantize.to_json()} if self.quantize else {}
        return {**self.lowering_options(), **quantize}

    def entry_parts(self) -> tuple[str, str]:
        """(file path or module name, function name) of the entry."""
        module_or_path, _, function = self.entry.value.rpartition(":")
        return module_or_path, function

    @property
    def entry_is_path(self) -> bool:
        return is_path(self.entry_parts()[0])

    def used_backend_options(self) -> BackendOptions:
        """The options of the backends this target lowers with: what decides its bytes."""
        if self.partitioners or self.whole_program or self.recipe:  # no backends' partitioners
            return {}
        return {b: self.backend_options[b] for b in self.backends if self.backend_options.get(b)}


@dataclass(frozen=True)
class ProjectConfig:
    """The [tool.lowerd] table: each field but path, root, targets, digest and remote_cache is
    the project key of that name (config_keys.py)."""

    path: Path
    root: Path
    targets: dict[str, TargetConfig]
    # sha256 of the [tool.lowerd] table, canonically serialized: changes iff the config does.
    digest: str
    backends: tuple[str, ...]
    out_dir: Path
    cache_dir: Path | None
    cache_max_size: str | None
    # The redis tier behind the local cache (cache_url and its cache_* keys), as written; its
    # url "" when the file names none (then $LOWERD_CACHE_URL may: project/team_config.py).
    remote_cache: RemoteCacheConfig
    executor: Executor
    ray_address: str | None
    timeout: float | None
    daemon: bool
    warm_libraries: bool
    etrecord: bool
    # Every target's defaults for these keys.
    backend_options: BackendOptions = field(hash=False)
    edge_compile_config: Options = field(hash=False)
    executorch_backend_config: Options = field(hash=False)
    export: ExportConfig
    memory_planning: Options = field(hash=False)
    sym_shape_eval: str | None
    runtime: RuntimeConfig = RuntimeConfig()
    verify: bool = False
    atol: float | None = None
    rtol: float | None = None
    verify_runs: int = 10
    verify_warmup: int = 2
    bundled: bool = False

    def with_verify(self, names: Sequence[str]) -> ProjectConfig:
        """The named targets verified after their build, whatever the file says (`lowerd
        verify`); no names: every target."""
        targets = {
            name: replace(t, verify=True) if not names or name in names else t
            for name, t in self.targets.items()
        }
        return replace(self, targets=targets)

    def with_backends(self, backends: tuple[str, ...] | None) -> ProjectConfig:
        """Every target lowered with `backends` instead (an editor's override); None: as written."""
        if not backends:
            return self
        targets = {
            name: t if t.recipe else replace(t, backends=backends)  # a recipe says its backends
            for name, t in self.targets.items()
        }
        return replace(self, backends=backends, targets=targets)

    def output_path(self, target_name: str) -> Path:
        if target_name not in self.targets:
            raise _unknown_targets_error(self, [target_name])
        return self.out_dir / f"{target_name}.pte"

    def entry_path(self, target: TargetConfig) -> Path | None:
        """The entry's file resolved against the config's folder; None for a module entry."""
        if not target.entry_is_path:
            return None
        return self.root / Path(target.entry_parts()[0]).expanduser()


def _value(located: Located[T] | None) -> T | None:
    return located.value if located is not None else None


def find_config(start: Path) -> Path:
    """The first pyproject.toml with a [tool.lowerd] table in start's folder or above it."""
    start = Path(os.path.abspath(start))
    folder = start if start.is_dir() else start.parent
    for candidate in (f / PYPROJECT for f in (folder, *folder.parents)):
        if candidate.is_file() and _declares_lowerd(candidate):
            return candidate
    raise ConfigError(f"no {PYPROJECT} with [tool.lowerd] found in {start} or its parents")


def choose_config(explicit: str | None) -> Path:
    """The pyproject.toml a command uses: --config's, else the one found from the cwd up."""
    return Path(explicit) if explicit else find_config(Path.cwd())


def load_config(path: Path) -> ProjectConfig:
    path = Path(os.path.abspath(path))
    text, data = read_toml(path)
    table = _lowerd_table(data)
    if table is None:
        raise ConfigError(f"no [tool.lowerd] table in {path.name}", path)
    return _read_project(KeyReader(path, text), table)


def select_targets(config: ProjectConfig, names: Sequence[str]) -> list[TargetConfig]:
    """The named targets in the order given (duplicates dropped); all of them, in file order, if
    no names are given."""
    if not names:
        return list(config.targets.values())
    unknown = [n for n in names if n not in config.targets]
    if unknown:
        raise _unknown_targets_error(config, unknown)
    return [config.targets[n] for n in dict.fromkeys(names)]


def _unknown_targets_error(config: ProjectConfig, names: Sequence[str]) -> ConfigError:
    known = list(config.targets)
    listed = ", ".join(repr(n) for n in dict.fromkeys(names))
    hint = did_you_mean(names[0], known) if len(names) == 1 else ""
    noun = "target" if len(names) == 1 else "targets"
    return ConfigError(
        f"unknown {noun} {listed}{hint}; known targets: {', '.join(known)}", config.path
    )


# Reading and parsing -------------------------------------------------------------------------


def _lowerd_table(data: Mapping[str, object]) -> object:
    tool = data.get("tool")
    return tool.get("lowerd") if isinstance(tool, dict) else None


def _declares_lowerd(candidate: Path) -> bool:
    try:
        raw = candidate.read_bytes()
    except OSError:
        return False
    # Skips unrelated projects without parsing them. A broken file that does mention lowerd is
    # most likely the one meant: its error is raised rather than walked past to a parent project.
    if b"lowerd" not in raw:
        return False
    data = parse_toml(decode_text(raw, candidate), candidate)
    return _lowerd_table(data) is not None


# Reading with the field table -----------------------------------------------------------------


def _read_project(reader: KeyReader, table: object) -> ProjectConfig:
    if not isinstance(table, dict):
        raise reader.error(f"tool.lowerd must be a table, got {describe(table)}", LOWERD)
    reader.check_keys(table, key_names(Scope.PROJECT), LOWERD, "[tool.lowerd]")
    values = _read_keys(reader, table, LOWERD, Scope.PROJECT)
    fields = _fields(Scope.PROJECT, values, group=None)
    remote = _fields(Scope.PROJECT, values, group="remote_cache")
    return ProjectConfig(
        path=reader.path,
        root=reader.root,
        targets=_read_targets(reader, table.get("targets"), values),
        digest=_digest(table),
        remote_cache=_remote_cache(reader, remote),
        **fields,
    )


def _remote_cache(reader: KeyReader, fields: dict[str, Any]) -> RemoteCacheConfig:
    url = fields.pop("url") or ""
    line = reader.line((*LOWERD, "cache_url")) if url else None
    return RemoteCacheConfig(url=url, line=line, **fields)


def _read_targets(
    reader: KeyReader, table: object, project: Mapping[str, object]
) -> dict[str, TargetConfig]:
    if table is None:
        raise reader.error("no targets: add a [tool.lowerd.targets.<name>] table", LOWERD)
    if not isinstance(table, dict):
        raise reader.error(f"targets must be a table, got {describe(table)}", TARGETS)
    if not table:
        raise reader.error("no targets: add a [tool.lowerd.targets.<name>] table", TARGETS)
    return {name: _read_target(reader, name, value, project) for name, value in table.items()}


def _read_target(
    reader: KeyReader, name: str, table: object, project: Mapping[str, object]
) -> TargetConfig:
    key = (*TARGETS, name)
    line = _target_line(reader, key)
    if not _TARGET_NAME.fullmatch(name):
        raise ConfigError(
            f"target name {name!r} cannot name a .pte file: use letters, digits, '_', '.', '-'",
            reader.path,
            line,
        )
    if not isinstance(table, dict):
        raise reader.error(
            f"target {name!r} must be a table with an entry, got {describe(table)}", key
        )
    where = f"target {name!r}"
    reader.check_keys(table, key_names(Scope.TARGET), key, where)
    values = _read_keys(reader, table, key, Scope.TARGET, project, where, line)
    check_lowering_route(reader, table, key)
    fields = _fields(Scope.TARGET, values, group=None)
    if fields["recipe"] is not None:  # it says these: the project's defaults do not reach it
        fields.update(recipe_clears())
    lay_external_constants(reader, table, key, cast(Options, fields["executorch_backend_config"]))
    return TargetConfig(name=name, line=line, **fields)


_NO_VALUES: Mapping[str, object] = {}


def _read_keys(
    reader: KeyReader,
    table: Table,
    at: KeyPath,
    scope: Scope,
    project: Mapping[str, object] = _NO_VALUES,
    where: str = "",
    line: int = 1,
) -> dict[str, object]:
    """Each key of `scope` by name, in the table's order: the value given, checked (a located
    key's with its line, else `line`), else its default. A target's key that [tool.lowerd] also
    takes has the project's value as its default, the target's laid over it."""
    read: dict[str, object] = {}
    for key in keys_in(scope):
        if key.read is None:
            continue
        path = (*at, key.name)
        inherited = key.scope is Scope.BOTH and key.name in project
        value: object = None
        if key.name in table:
            value = key.read(reader, table[key.name], path)
            if key.located:
                value = Located(value, reader.line(path) or line)
        elif key.missing:
            raise ConfigError(f"{where} {key.missing}", reader.path, line)
        elif key.default is not None and not inherited:
            value = key.read(reader, key.default, path)
        if inherited:
            value = key.lay(project[key.name], value)
        read[key.name] = value
    return read


def _fields(scope: Scope, values: Mapping[str, object], group: str | None) -> dict[str, Any]:
    """The values of a group's keys (None: those of no group) by the field each fills."""
    return {
        key.attribute: values[key.name]
        for key in keys_in(scope)
        if key.attribute is not None and key.read is not None and key.group == group
    }


def _target_line(reader: KeyReader, key: KeyPath) -> int:
    # A target declared without a header of its own is best pointed at by its entry.
    line = reader.locator.header_line(key) or reader.locator.line((*key, "entry"))
    return line or reader.line(key) or 1


def _digest(table: Table) -> str:
    # default=str covers TOML dates and times, which JSON has no type for.
    canonical = json.dumps(table, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
