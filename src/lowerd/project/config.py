"""The [tool.lowerd] table of a pyproject.toml: what to build, with which backends, and where.

Every mistake in it is reported as a ConfigError at the file and line of the offending key, so an
editor can underline it. Only the standard library (and lowerd.cache.location's size grammar) is
imported: loading a config must stay cheap.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import os
import re
import stat
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from lowerd.cache.location import parse_size
from lowerd.project.backends import BACKEND_OPTIONS, BACKENDS, KNOWN_BACKENDS, OptionKind
from lowerd.project.compile_configs import COMPILE_CONFIGS
from lowerd.project.errors import ConfigError
from lowerd.project.team_config import (
    DEFAULT_REMOTE_MAX_ENTRY,
    DEFAULT_REMOTE_TIMEOUT,
    EXECUTORS,
    REMOTE_MODES,
    Executor,
    RemoteCacheConfig,
    check_cache_url,
)
from lowerd.project.toml_lines import KeyLocator, KeyPath

PYPROJECT = "pyproject.toml"
DEFAULT_BACKENDS: tuple[str, ...] = ("xnnpack",)
DEFAULT_OUT_DIR = "build"

# The remote tier's settings besides cache_url, which each need it.
REMOTE_CACHE_KEYS = (
    "cache_remote",
    "cache_ttl",
    "cache_remote_max_entry_size",
    "cache_remote_timeout",
)
PROJECT_KEYS = (
    "backends",
    "out_dir",
    "cache_dir",
    "cache_max_size",
    "cache_url",
    *REMOTE_CACHE_KEYS,
    "executor",
    "ray_address",
    "timeout",
    "daemon",
    "warm_libraries",
    "etrecord",
    "backend_options",
    "edge_compile_config",
    "executorch_backend_config",
    "targets",
)
TARGET_KEYS = (
    "entry",
    "backends",
    "etrecord",
    "external_constants",
    "backend_options",
    "quantize",
    "edge_compile_config",
    "executorch_backend_config",
    "transform_passes",
    "constant_methods",
    "partitioners",
    "whole_program",
)
# [tool.lowerd.targets.T.quantize] scheme -> is_dynamic of ExecuTorch's
# get_symmetric_quantization_config (both symmetric, per-channel).
QUANTIZE_SCHEMES = {"xnnpack-int8": False, "xnnpack-int8-dynamic": True}
QUANTIZE_KEYS = ("scheme", "calibration")

LOWERD: KeyPath = ("tool", "lowerd")
TARGETS: KeyPath = (*LOWERD, "targets")

# <name>.pte is written into out_dir, so a name must be a plain file stem.
_TARGET_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_TOML_POSITION = re.compile(r"\s*\(at (?:line (\d+), column (\d+)|end of document)\)\s*$")


@dataclass(frozen=True)
class QuantizeConfig:
    """[tool.lowerd.targets.T.quantize]: ExecuTorch's PT2E flow with XNNPACKQuantizer."""

    scheme: str  # a key of QUANTIZE_SCHEMES
    # "file.py:fn" or "package.module:fn" returning example-argument tuples; None: the target's
    # own example args.
    calibration: str | None
    line: int  # the table's (or its scheme key's) line
    calibration_line: int

    @property
    def is_dynamic(self) -> bool:
        return QUANTIZE_SCHEMES[self.scheme]

    def calibration_parts(self) -> tuple[str, str]:
        """(file path or module name, function name) of the calibration function."""
        module_or_path, _, function = (self.calibration or "").rpartition(":")
        return module_or_path, function

    def to_json(self) -> dict[str, Any]:
        return {"scheme": self.scheme, "calibration": self.calibration}


@dataclass(frozen=True)
class TargetConfig:
    name: str
    entry: str
    backends: tuple[str, ...]
    # The target's table header, or its entry key when the target is a dotted or inline table.
    line: int
    # The `entry = ...` line: where a missing file or function is blamed.
    entry_line: int
    # Write <name>.etrecord beside the .pte (to_edge_transform_and_lower(generate_etrecord=True)).
    etrecord: bool = False
    # backend name -> its partitioner's options ([tool.lowerd.backend_options.<backend>] with
    # the target's own table laid over it, option by option), for every backend given any.
    backend_options: dict[str, dict[str, Any]] = field(default_factory=dict, hash=False)
    # Quantized with the PT2E flow before the final export; None: exported as the entry returns.
    quantize: QuantizeConfig | None = None
    # EdgeCompileConfig(**edge_compile_config) and ExecutorchBackendConfig(
    # **executorch_backend_config) fields ([tool.lowerd.<table>] laid over by the target's, key by
    # key; `external_constants = true` is executorch_backend_config.external_constants = true).
    edge_compile_config: dict[str, Any] = field(default_factory=dict, hash=False)
    executorch_backend_config: dict[str, Any] = field(default_factory=dict, hash=False)
    # "file.py:fn" or "package.module:fn" returning to_edge_transform_and_lower's
    # transform_passes; its line is where a failure to load it is blamed.
    transform_passes: str | None = None
    transform_passes_line: int = 0
    # to_edge_transform_and_lower(constant_methods=...): name -> plain value.
    constant_methods: dict[str, Any] = field(default_factory=dict, hash=False)
    # "file.py:fn" or "package.module:fn" returning a list of Partitioner instances, used
    # instead of the backends' default partitioners; its line is where a failure is blamed.
    partitioners: str | None = None
    partitioners_line: int = 0
    # {"backend_id": BackendDetails class name, "compile_specs": {key: value}}: the whole of each
    # method lowered to that backend by backend_api.to_backend(backend_id, program, specs).
    whole_program: dict[str, Any] | None = field(default=None, hash=False)
    whole_program_line: int = 0

    @property
    def external_constants(self) -> bool:
        """ExecutorchBackendConfig(external_constants=True): constants go to .ptd files."""
        return bool(self.executorch_backend_config.get("external_constants", False))

    def lowering_options(self) -> dict[str, Any]:
        """The configs, passes and constant methods given to ExecuTorch, as the config holds
        them (only those given): part of the program fingerprint and of the JSON result."""
        options: dict[str, Any] = {
            "edge_compile_config": self.edge_compile_config,
            "executorch_backend_config": self.executorch_backend_config,
            "transform_passes": self.transform_passes,
            "constant_methods": self.constant_methods,
            "partitioners": self.partitioners,
            "whole_program": self.whole_program,
        }
        return {name: value for name, value in options.items() if value}

    def entry_parts(self) -> tuple[str, str]:
        """(file path or module name, function name) of the entry."""
        module_or_path, _, function = self.entry.rpartition(":")
        return module_or_path, function

    @property
    def entry_is_path(self) -> bool:
        return _is_path(self.entry_parts()[0])

    def used_backend_options(self) -> dict[str, dict[str, Any]]:
        """The options of the backends this target lowers with: what decides its bytes."""
        if self.partitioners or self.whole_program:  # the backends' partitioners are not used
            return {}
        return {b: self.backend_options[b] for b in self.backends if self.backend_options.get(b)}


@dataclass(frozen=True)
class ProjectConfig:
    path: Path
    root: Path
    backends: tuple[str, ...]
    out_dir: Path
    cache_dir: Path | None
    cache_max_size: str | None
    timeout: float | None
    # `lowerd build` starts the project's daemon when none runs (as `--daemon` does).
    daemon: bool
    # The daemon's fork server keeps the installed libraries a build imported (worker/libraries.py).
    warm_libraries: bool
    targets: dict[str, TargetConfig]
    # sha256 of the [tool.lowerd] table, canonically serialized: changes iff the config does.
    digest: str
    # Every target's default for `etrecord`.
    etrecord: bool = False
    # The redis tier behind the local cache (cache_url and its cache_* keys), as written.
    remote_cache: RemoteCacheConfig | None = None
    # Where stale targets build: forked local workers, or tasks on a Ray cluster at ray_address.
    executor: Executor = "local"
    ray_address: str | None = None

    def with_backends(self, backends: tuple[str, ...] | None) -> ProjectConfig:
        """Every target lowered with `backends` instead (an editor's override); None: as written."""
        if not backends:
            return self
        targets = {name: replace(t, backends=backends) for name, t in self.targets.items()}
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
    text = _decode(_read_bytes(path), path)
    table = _lowerd_table(_parse_toml(text, path))
    if table is None:
        raise ConfigError(f"no [tool.lowerd] table in {path.name}", path)
    return _Reader(path, text).project(table)


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
    hint = _did_you_mean(names[0], known) if len(names) == 1 else ""
    noun = "target" if len(names) == 1 else "targets"
    return ConfigError(
        f"unknown {noun} {listed}{hint}; known targets: {', '.join(known)}", config.path
    )


# Reading and parsing -------------------------------------------------------------------------


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ConfigError("file not found", path) from None
    except OSError as e:
        raise ConfigError(f"cannot read: {e.strerror or e}", path) from None


def _decode(raw: bytes, path: Path) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ConfigError("not valid UTF-8 text", path, line) from None


def _parse_toml(text: str, path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        message, line = _split_toml_position(str(e), text)
        raise ConfigError(f"invalid TOML: {message}", path, line) from None


def _split_toml_position(message: str, text: str) -> tuple[str, int | None]:
    """tomllib appends "(at line N, column M)" to its messages: move N to the error's location
    and keep the column in a shorter message."""
    match = _TOML_POSITION.search(message)
    if match is None:
        return message, None
    message = message[: match.start()]
    if match.group(1) is None:  # "at end of document": blame the last line
        return f"{message} at end of file", max(len(text.splitlines()), 1)
    return f"{message} (column {match.group(2)})", int(match.group(1))


def _lowerd_table(data: dict[str, Any]) -> Any:
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
    data = _parse_toml(_decode(raw, candidate), candidate)
    return _lowerd_table(data) is not None


# Validation ----------------------------------------------------------------------------------


class _Reader:
    """Validates the [tool.lowerd] table, blaming each error on the line of the key at fault."""

    def __init__(self, path: Path, text: str):
        self.path = path
        self.locator = KeyLocator(text)
        # [tool.lowerd.backend_options]: every target's, under its own.
        self.default_options: dict[str, dict[str, Any]] = {}
        # [tool.lowerd.edge_compile_config] and [...executorch_backend_config]: the same.
        self.default_configs: dict[str, dict[str, Any]] = {}

    def project(self, table: Any) -> ProjectConfig:
        if not isinstance(table, dict):
            raise self.error(f"tool.lowerd must be a table, got {_describe(table)}", LOWERD)
        self.check_keys(table, PROJECT_KEYS, LOWERD, "[tool.lowerd]")
        root = self.path.parent
        backends = self.backends(table, LOWERD, DEFAULT_BACKENDS)
        etrecord = self.flag(table, "etrecord")
        self.default_options = self.backend_options(table, LOWERD, {})
        self.default_configs = {
            name: self.compile_config(table, LOWERD, name, {}) for name in COMPILE_CONFIGS
        }
        return ProjectConfig(
            path=self.path,
            root=root,
            backends=backends,
            out_dir=self.out_dir(table, root),
            cache_dir=root / self.folder(table, "cache_dir") if "cache_dir" in table else None,
            cache_max_size=self.size(table, "cache_max_size"),
            timeout=self.timeout(table, "timeout"),
            daemon=self.flag(table, "daemon"),
            warm_libraries=self.flag(table, "warm_libraries", default=True),
            targets=self.targets(table.get("targets"), backends, etrecord),
            digest=_digest(table),
            etrecord=etrecord,
            remote_cache=self.remote_cache(table),
            executor=self.choice(table, "executor", EXECUTORS, "local"),
            ray_address=self.text(table, "ray_address"),
        )

    def remote_cache(self, table: dict[str, Any]) -> RemoteCacheConfig | None:
        url = self.text(table, "cache_url")
        if url is None:
            if stray := next((name for name in REMOTE_CACHE_KEYS if name in table), None):
                raise self.error(f"{stray} needs cache_url (a redis URL)", (*LOWERD, stray))
            return None
        try:
            check_cache_url(url, "cache_url")
        except ConfigError as error:
            raise self.error(error.message, (*LOWERD, "cache_url")) from None
        ttl = table.get("cache_ttl")
        if ttl is not None and not _positive_int(ttl):
            raise self.error(
                f"cache_ttl must be a positive number of seconds, got {_describe(ttl)}",
                (*LOWERD, "cache_ttl"),
            )
        return RemoteCacheConfig(
            url=url,
            mode=self.choice(table, "cache_remote", REMOTE_MODES, "read-write"),
            ttl=ttl,
            max_entry_size=self.size(table, "cache_remote_max_entry_size")
            or DEFAULT_REMOTE_MAX_ENTRY,
            timeout=self.timeout(table, "cache_remote_timeout") or DEFAULT_REMOTE_TIMEOUT,
            line=self.line((*LOWERD, "cache_url")),
        )

    def choice(self, table: dict[str, Any], name: str, valid: Sequence[str], default: str) -> Any:
        value = table.get(name, default)
        if value not in valid:
            names = ", ".join(repr(v) for v in valid)
            raise self.error(
                f"{name} must be one of {names}, got {_describe(value)}",
                (*LOWERD, name),
            )
        return value

    def text(self, table: dict[str, Any], name: str) -> str | None:
        value = table.get(name)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise self.error(
                f"{name} must be a non-empty string, got {_describe(value)}", (*LOWERD, name)
            )
        return value

    def targets(
        self, table: Any, default_backends: tuple[str, ...], default_etrecord: bool = False
    ) -> dict[str, TargetConfig]:
        if table is None:
            raise self.error("no targets: add a [tool.lowerd.targets.<name>] table", LOWERD)
        if not isinstance(table, dict):
            raise self.error(f"targets must be a table, got {_describe(table)}", TARGETS)
        if not table:
            raise self.error("no targets: add a [tool.lowerd.targets.<name>] table", TARGETS)
        return {
            name: self.target(name, value, default_backends, default_etrecord)
            for name, value in table.items()
        }

    def target(
        self,
        name: str,
        table: Any,
        default_backends: tuple[str, ...],
        default_etrecord: bool = False,
    ) -> TargetConfig:
        key = (*TARGETS, name)
        line = self.target_line(key)
        if not _TARGET_NAME.fullmatch(name):
            raise ConfigError(
                f"target name {name!r} cannot name a .pte file: use letters, digits, '_', '.', '-'",
                self.path,
                line,
            )
        if not isinstance(table, dict):
            raise self.error(
                f"target {name!r} must be a table with an entry, got {_describe(table)}", key
            )
        self.check_keys(table, TARGET_KEYS, key, f"target {name!r}")
        if "entry" not in table:
            example = 'entry = "models/net.py:make"'
            raise ConfigError(f"target {name!r} has no entry; add {example}", self.path, line)
        entry = self.entry(table["entry"], (*key, "entry"))
        backends = self.backends(table, key, default_backends)
        entry_line = self.line((*key, "entry")) or line
        transform_passes = table.get("transform_passes")
        if transform_passes is not None:
            transform_passes = self.entry(
                transform_passes, (*key, "transform_passes"), "transform_passes"
            )
        partitioners, whole_program = self.lowering_route(table, key)
        if whole_program and transform_passes:
            raise self.error(
                "transform_passes is for to_edge_transform_and_lower; a whole_program target is "
                "lowered by to_edge and to_backend: drop one",
                (*key, "transform_passes"),
            )
        return TargetConfig(
            name=name,
            entry=entry,
            backends=backends,
            line=line,
            entry_line=entry_line,
            etrecord=self.flag(table, "etrecord", default_etrecord, key),
            backend_options=self.backend_options(table, key, self.default_options),
            quantize=self.quantize(table, key),
            edge_compile_config=self.compile_config(
                table, key, "edge_compile_config", self.default_configs["edge_compile_config"]
            ),
            executorch_backend_config=self.backend_config(table, key),
            transform_passes=transform_passes,
            transform_passes_line=(self.line((*key, "transform_passes")) or line)
            if transform_passes
            else 0,
            constant_methods=self.constant_methods(table, key),
            partitioners=partitioners,
            partitioners_line=(self.line((*key, "partitioners")) or line) if partitioners else 0,
            whole_program=whole_program,
            whole_program_line=(self.line((*key, "whole_program")) or line) if whole_program else 0,
        )

    def lowering_route(
        self, table: dict[str, Any], key: KeyPath
    ) -> tuple[str | None, dict[str, Any] | None]:
        """`partitioners` (a function reference) or `whole_program` (a backend id and compile
        specs): each replaces `backends`; at most one of the three."""
        given = [name for name in ("backends", "partitioners", "whole_program") if name in table]
        if len(given) > 1:
            raise self.error(
                f"{given[-1]} and {given[0]} both say how to lower target; keep one "
                "(partitioners and whole_program replace backends)",
                (*key, given[-1]),
            )
        partitioners = table.get("partitioners")
        if partitioners is not None:
            partitioners = self.entry(partitioners, (*key, "partitioners"), "partitioners")
        if "whole_program" not in table:
            return partitioners, None
        return partitioners, self.whole_program(table["whole_program"], (*key, "whole_program"))

    def whole_program(self, value: Any, key: KeyPath) -> dict[str, Any]:
        example = '{ backend_id = "XnnpackBackend", compile_specs = { key = "value" } }'
        if not isinstance(value, dict):
            raise self.error(
                f"whole_program must be a table like {example}, got {_describe(value)}", key
            )
        self.check_keys(value, ("backend_id", "compile_specs"), key, "whole_program")
        backend_id = value.get("backend_id")
        if not isinstance(backend_id, str) or not backend_id.isidentifier():
            raise self.error(
                "whole_program needs backend_id, the name of a BackendDetails class like "
                f'"XnnpackBackend", got {_describe(backend_id)}',
                (*key, "backend_id") if "backend_id" in value else key,
            )
        specs = value.get("compile_specs", {})
        if not isinstance(specs, dict):
            raise self.error(
                f'compile_specs must be a table of strings like {{ key = "value" }}, got '
                f"{_describe(specs)}",
                (*key, "compile_specs"),
            )
        for spec_key, spec_value in specs.items():
            if not isinstance(spec_value, str):
                raise self.error(
                    f"compile spec {spec_key} must be a string (given to the backend as "
                    f"CompileSpec({spec_key!r}, value.encode())), got {_describe(spec_value)}",
                    (*key, "compile_specs", spec_key),
                )
        return {"backend_id": backend_id, "compile_specs": dict(specs)}

    def backend_config(self, table: dict[str, Any], key: KeyPath) -> dict[str, Any]:
        """[...executorch_backend_config], with the `external_constants = true` shorthand."""
        name = "executorch_backend_config"
        merged = self.compile_config(table, key, name, self.default_configs[name])
        if "external_constants" in table:
            shorthand = self.flag(table, "external_constants", key=key)
            given = table.get(name)
            if isinstance(given, dict) and "external_constants" in given:
                raise self.error(
                    f"external_constants is given twice: here and in {name}; keep one",
                    (*key, "external_constants"),
                )
            merged["external_constants"] = shorthand
        return merged

    def compile_config(
        self, table: dict[str, Any], key: KeyPath, name: str, default: dict[str, Any]
    ) -> dict[str, Any]:
        """[<key>.<name>] (EdgeCompileConfig or ExecutorchBackendConfig fields) laid over
        `default`, field by field."""
        merged = dict(default)
        if name not in table:
            return merged
        value, key = table[name], (*key, name)
        kinds = COMPILE_CONFIGS[name]
        if not isinstance(value, dict):
            raise self.error(
                f"{name} must be a table of fields like [tool.lowerd.{name}], got "
                f"{_describe(value)}",
                key,
            )
        for field_name, field_value in value.items():
            merged[field_name] = self.option(
                field_name, field_value, kinds, (*key, field_name), f"{name} field"
            )
        return merged

    def constant_methods(self, table: dict[str, Any], key: KeyPath) -> dict[str, Any]:
        if "constant_methods" not in table:
            return {}
        value, key = table["constant_methods"], (*key, "constant_methods")
        if not isinstance(value, dict):
            raise self.error(
                "constant_methods must be a table of names and values like "
                f"{{ vocab_size = 32000 }}, got {_describe(value)}",
                key,
            )
        for name, constant in value.items():
            if not name.isidentifier():
                raise self.error(
                    f"constant method name {name!r} is not an identifier", (*key, name)
                )
            items = constant if isinstance(constant, list) else [constant]
            if not all(isinstance(item, bool | int | float | str) for item in items):
                raise self.error(
                    f"constant method {name} must be a boolean, integer, float or string, or a "
                    f"list of them, got {_describe(constant)}",
                    (*key, name),
                )
        return dict(value)

    def quantize(self, table: dict[str, Any], key: KeyPath) -> QuantizeConfig | None:
        if "quantize" not in table:
            return None
        value, key = table["quantize"], (*key, "quantize")
        schemes = ", ".join(QUANTIZE_SCHEMES)
        if not isinstance(value, dict):
            raise self.error(
                f'quantize must be a table like {{ scheme = "xnnpack-int8" }}, got '
                f"{_describe(value)}",
                key,
            )
        self.check_keys(value, QUANTIZE_KEYS, key, "quantize")
        if "scheme" not in value:
            raise self.error(f"quantize has no scheme; valid schemes: {schemes}", key)
        scheme = value["scheme"]
        if not isinstance(scheme, str):
            raise self.error(
                f"quantize scheme must be a string, one of {schemes}; got {_describe(scheme)}",
                (*key, "scheme"),
            )
        if scheme not in QUANTIZE_SCHEMES:
            hint = _did_you_mean(scheme, QUANTIZE_SCHEMES)
            raise self.error(
                f"unknown quantize scheme {scheme!r}{hint}; valid schemes: {schemes}",
                (*key, "scheme"),
            )
        calibration = value.get("calibration")
        if calibration is not None:
            calibration = self.entry(calibration, (*key, "calibration"), "calibration")
        line = self.locator.header_line(key) or self.line((*key, "scheme")) or 1
        return QuantizeConfig(
            scheme=scheme,
            calibration=calibration,
            line=line,
            calibration_line=self.line((*key, "calibration")) or line,
        )

    def target_line(self, key: KeyPath) -> int:
        # A target declared without a header of its own is best pointed at by its entry.
        line = self.locator.header_line(key) or self.locator.line((*key, "entry"))
        return line or self.line(key) or 1

    def entry(self, entry: Any, key: KeyPath, what: str = "entry") -> str:
        """A "file.py:function" or "package.module:function" reference (`what`: the key's name)."""
        if not isinstance(entry, str):
            raise self.error(
                f'{what} must be a string like "models/net.py:make", got {_describe(entry)}', key
            )
        module, colon, function = entry.rpartition(":")
        if not colon or not function:
            example = f"{module or entry or 'models/net.py'}:make"
            raise self.error(f"{what} {entry!r} must name a function: {example!r}", key)
        if not module.strip():
            raise self.error(f"{what} {entry!r} needs a file or module before ':'", key)
        if not function.isidentifier():
            raise self.error(f"{function!r} in {what} {entry!r} is not a function name", key)
        if _is_path(module) and not module.endswith(".py"):
            raise self.error(
                f"{what} file {module!r} is not a Python file: {_article(what)} {what} names a "
                f".py file or a dotted module, like 'models/net.py:{function}'",
                key,
            )
        if not _is_path(module) and not all(p.isidentifier() for p in module.split(".")):
            raise self.error(
                f"{module!r} in {what} {entry!r} is neither a .py file nor a dotted module name",
                key,
            )
        return entry

    def backends(
        self, table: dict[str, Any], key: KeyPath, default: tuple[str, ...]
    ) -> tuple[str, ...]:
        if "backends" not in table:
            return default
        names, key = table["backends"], (*key, "backends")
        known = ", ".join(KNOWN_BACKENDS)
        if not isinstance(names, list):
            raise self.error(
                f'backends must be a list of names like ["xnnpack"], got {_describe(names)}', key
            )
        if not names:
            raise self.error(f"backends must not be empty; known backends: {known}", key)
        for i, name in enumerate(names):
            if not isinstance(name, str):
                raise self.error(f"backend names are strings, got {_describe(name)}", (*key, i))
            if name not in KNOWN_BACKENDS:
                hint = _did_you_mean(name, KNOWN_BACKENDS)
                raise self.error(
                    f"unknown backend {name!r}{hint}; known backends: {known}", (*key, i)
                )
            if name in names[:i]:
                raise self.error(f"backend {name!r} is listed twice", (*key, i))
        return tuple(names)

    def backend_options(
        self, table: dict[str, Any], key: KeyPath, default: dict[str, dict[str, Any]]
    ) -> dict[str, dict[str, Any]]:
        """[<key>.backend_options.<backend>] tables laid over `default`, option by option."""
        merged = {backend: dict(options) for backend, options in default.items()}
        if "backend_options" not in table:
            return merged
        value, key = table["backend_options"], (*key, "backend_options")
        known = ", ".join(BACKEND_OPTIONS)
        if not isinstance(value, dict):
            raise self.error(
                "backend_options must be a table of backends, like [tool.lowerd.backend_options."
                f"xnnpack], got {_describe(value)}",
                key,
            )
        for backend, options in value.items():
            backend_key = (*key, backend)
            if backend not in BACKEND_OPTIONS:
                hint = _did_you_mean(backend, BACKEND_OPTIONS)
                raise self.error(
                    f"unknown backend {backend!r} in backend_options{hint}; "
                    f"known backends: {known}",
                    backend_key,
                )
            if not isinstance(options, dict):
                raise self.error(
                    f"backend_options.{backend} must be a table of options, got "
                    f"{_describe(options)}",
                    backend_key,
                )
            where = f"{BACKENDS[backend].display} option"
            kinds = BACKEND_OPTIONS[backend]
            for name, option in options.items():
                merged.setdefault(backend, {})[name] = self.option(
                    name, option, kinds, (*backend_key, name), where
                )
        return merged

    def option(
        self, name: str, value: Any, kinds: dict[str, OptionKind], key: KeyPath, where: str
    ) -> Any:
        """A backend option's value, checked against its kind (project/backends.py)."""
        if name not in kinds:
            hint = _did_you_mean(name, kinds)
            raise self.error(
                f"unknown {where} {name!r}{hint}; valid options: {', '.join(kinds)}", key
            )
        kind = kinds[name]
        wrong = self.error(f"{name} must be {kind.describe()}, got {_describe(value)}", key)
        if kind.kind == "bool":
            if not isinstance(value, bool):
                raise wrong
            return value
        if kind.kind == "int":
            if not _positive_int(value):
                raise wrong
            return value
        if kind.kind == "ints3":
            if not isinstance(value, list) or len(value) != 3:
                raise wrong
            if not all(_positive_int(v) for v in value):
                raise wrong
            return list(value)
        if kind.kind == "choice":
            if not isinstance(value, str):
                raise wrong
            self.check_name(name, value, kind.choices, key)
            return value
        if kind.kind == "names":
            if not isinstance(value, list) or not value:
                raise self.error(
                    f"{name} must be a non-empty list of names from {', '.join(kind.choices)}, "
                    f"got {_describe(value)}",
                    key,
                )
            for i, item in enumerate(value):
                if not isinstance(item, str):
                    raise self.error(f"{name} holds names, got {_describe(item)}", (*key, i))
                self.check_name(name, item, kind.choices, (*key, i))
                if item in value[:i]:
                    raise self.error(f"{item!r} is listed twice in {name}", (*key, i))
            return list(value)
        if not isinstance(value, dict):  # a table of options of its own
            raise wrong
        table = dict(kind.table)
        return {
            sub: self.option(sub, item, table, (*key, sub), f"{name} key")
            for sub, item in value.items()
        }

    def check_name(self, option: str, name: str, valid: Sequence[str], key: KeyPath) -> None:
        if name not in valid:
            hint = _did_you_mean(name, valid)
            raise self.error(
                f"unknown {option} value {name!r}{hint}; valid values: {', '.join(valid)}", key
            )

    def folder(self, table: dict[str, Any], name: str, default: str = "") -> Path:
        value = table.get(name, default)
        if not isinstance(value, str) or not value:
            raise self.error(
                f"{name} must be a folder path string, got {_describe(value)}", (*LOWERD, name)
            )
        return Path(value).expanduser()

    def out_dir(self, table: dict[str, Any], root: Path) -> Path:
        """The output folder, refused now if no .pte could be written there: a failure found
        only at write time would come after the whole lowering, far from the config line."""
        written = self.folder(table, "out_dir", DEFAULT_OUT_DIR)
        problem = unwritable_folder(root / written)
        if problem:
            raise self.error(f"out_dir {str(written)!r} {problem}", (*LOWERD, "out_dir"))
        return root / written

    def size(self, table: dict[str, Any], name: str) -> str | None:
        """A size the cache will read (lowerd.cache.location.parse_size), checked here so a bad
        one is blamed on its line."""
        value = table.get(name)
        if value is None:
            return None
        if not isinstance(value, str) or not _is_size(value):
            raise self.error(
                f'{name} must be a size like "500M" or "5G", got {_describe(value)}',
                (*LOWERD, name),
            )
        return value.strip()

    def timeout(self, table: dict[str, Any], name: str) -> float | None:
        value = table.get(name)
        if value is None:
            return None
        # bool is an int to Python, but `timeout = true` is surely a mistake.
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or value <= 0:
            raise self.error(
                f"{name} must be a positive number of seconds, got {_describe(value)}",
                (*LOWERD, name),
            )
        return float(value)

    def flag(
        self, table: dict[str, Any], name: str, default: bool = False, key: KeyPath = LOWERD
    ) -> bool:
        value = table.get(name, default)
        if not isinstance(value, bool):
            raise self.error(f"{name} must be true or false, got {_describe(value)}", (*key, name))
        return value

    def check_keys(
        self, table: dict[str, Any], allowed: Sequence[str], key: KeyPath, where: str
    ) -> None:
        for name in table:
            if name not in allowed:
                hint = _did_you_mean(name, allowed)
                raise self.error(
                    f"unknown key {name!r} in {where}{hint}; allowed keys: {', '.join(allowed)}",
                    (*key, name),
                )

    def error(self, message: str, key: KeyPath) -> ConfigError:
        return ConfigError(message, self.path, self.line(key))

    def line(self, key: KeyPath) -> int | None:
        """The key's line, else that of the nearest enclosing table the locator found."""
        while key:
            line = self.locator.line(key)
            if line is not None:
                return line
            key = key[:-1]
        return None


# Room kept below PATH_MAX for what lowerd writes inside out_dir: .lowerd/<target>.msgpack and
# the temp files next to each output.
_OUTPUT_NAME_ROOM = 320


def unwritable_folder(folder: Path) -> str | None:
    """Why files could not be created in folder (made if missing), or None if they could.

    Only stats: nothing is created, so loading a config never writes.
    """
    name_max, path_max = _name_limits(folder)
    if len(os.fsencode(folder)) + _OUTPUT_NAME_ROOM > path_max:
        return (
            f"is too long: {len(os.fsencode(folder))} bytes leave no room below the system's "
            f"{path_max}-byte path limit for the files lowerd writes in it"
        )
    for part in folder.parts:
        if len(os.fsencode(part)) > name_max:
            return f"has a name of {len(os.fsencode(part))} bytes, over the limit of {name_max}"
    for existing in (folder, *folder.parents):
        try:
            mode = existing.stat().st_mode
        except (FileNotFoundError, NotADirectoryError):  # the file is further up
            continue
        except OSError as error:
            return f"cannot be used: {existing}: {error.strerror}"
        if stat.S_ISDIR(mode):
            return None
        if existing == folder:
            return "is an existing file, not a folder"
        return f"cannot be created: {existing} is a file, not a folder"
    return None


def _name_limits(folder: Path) -> tuple[int, int]:
    """NAME_MAX and PATH_MAX of the file system folder would be made on."""
    existing = next((p for p in folder.parents if os.path.isdir(p)), Path("/"))
    try:
        return os.pathconf(existing, "PC_NAME_MAX"), os.pathconf(existing, "PC_PATH_MAX")
    except (OSError, ValueError):
        return 255, 4096


def _is_path(module_or_path: str) -> bool:
    return module_or_path.endswith(".py") or "/" in module_or_path


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    # Compared lowercased so that "XNNPACK" still finds "xnnpack".
    by_lower = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=1)
    return f" (did you mean {by_lower[close[0]]!r}?)" if close else ""


_SCALAR_KINDS = {bool: "boolean", int: "integer", float: "float", str: "string"}


def _positive_int(value: Any) -> bool:
    # bool is an int to Python, but `buffer_limit = true` is surely a mistake.
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _is_size(text: str) -> bool:
    try:
        parse_size(text)
    except ValueError:
        return False
    return True


def _describe(value: Any) -> str:
    """The value as a TOML user would name it: 'the integer -1', 'an array'."""
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    kind = _SCALAR_KINDS.get(type(value))
    if kind is None:  # dates and times
        return f"a {type(value).__name__}"
    return f"the {kind} {json.dumps(value)}"


def _digest(table: dict[str, Any]) -> str:
    # default=str covers TOML dates and times, which JSON has no type for.
    canonical = json.dumps(table, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
