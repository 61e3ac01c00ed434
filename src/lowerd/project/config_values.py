"""The checks of [tool.lowerd]'s plain values: flags, folders, sizes, seconds, names, function
references and backend lists. Each is a reader that the field table (config_keys.py) names: it
takes the value tomllib gave and returns what the config holds, or raises at the key's line."""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeGuard, TypeVar

from lowerd.cache.location import parse_size
from lowerd.cache.signing import KeyFileError, load_signing_key, load_verify_key
from lowerd.project.backends import KNOWN_BACKENDS
from lowerd.project.config_reader import KeyReader, Read, article, describe, did_you_mean, key_name
from lowerd.project.errors import ConfigError
from lowerd.project.team_config import KeyFile, check_cache_url
from lowerd.project.toml_lines import KeyPath

S = TypeVar("S", bound=str)


def flag(reader: KeyReader, value: object, key: KeyPath) -> bool:
    if not isinstance(value, bool):
        raise reader.error(f"{key_name(key)} must be true or false, got {describe(value)}", key)
    return value


def folder(reader: KeyReader, value: object, key: KeyPath) -> Path:
    return Path(path_text(reader, value, key, "folder")).expanduser()


def path_text(reader: KeyReader, value: object, key: KeyPath, kind: str) -> str:
    """A path as the config gives it (a `kind`: folder, file): a non-empty string without NUL,
    which no path holds (the system would refuse it far from this line, in a traceback)."""
    if not isinstance(value, str) or not value:
        raise reader.error(
            f"{key_name(key)} must be a {kind} path string, got {describe(value)}", key
        )
    refuse_nul(reader, value, key)
    return value


def refuse_nul(reader: KeyReader, value: str, key: KeyPath) -> None:
    if "\0" in value:
        raise reader.error(f"{key_name(key)} {value!r} holds a NUL character: no path can", key)


def project_folder(reader: KeyReader, value: object, key: KeyPath) -> Path:
    """A folder, relative to the config's folder unless absolute."""
    return reader.root / folder(reader, value, key)


def output_folder(reader: KeyReader, value: object, key: KeyPath) -> Path:
    """The output folder, refused now if no .pte could be written there: a failure found
    only at write time would come after the whole lowering, far from the config line."""
    written = folder(reader, value, key)
    problem = unwritable_folder(reader.root / written)
    if problem:
        raise reader.error(f"{key_name(key)} {str(written)!r} {problem}", key)
    return reader.root / written


def size(reader: KeyReader, value: object, key: KeyPath) -> str:
    """A size the cache will read (lowerd.cache.location.parse_size), checked here so a bad
    one is blamed on its line."""
    if not isinstance(value, str) or not _is_size(value):
        raise reader.error(
            f'{key_name(key)} must be a size like "500M" or "5G", got {describe(value)}', key
        )
    return value.strip()


def seconds(reader: KeyReader, value: object, key: KeyPath) -> float:
    # bool is an int to Python, but `timeout = true` is surely a mistake.
    if isinstance(value, bool) or not isinstance(value, int | float):
        pass
    elif math.isfinite(value) and value > 0:
        return float(value)
    raise reader.error(
        f"{key_name(key)} must be a positive number of seconds, got {describe(value)}", key
    )


def tolerance(reader: KeyReader, value: object, key: KeyPath) -> float:
    """atol and rtol: a number, zero or more."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if math.isfinite(value) and value >= 0:
            return float(value)
    raise reader.error(f"{key_name(key)} must be a number >= 0, got {describe(value)}", key)


def count(reader: KeyReader, value: object, key: KeyPath) -> int:
    """A number of runs: a whole number, zero or more."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise reader.error(f"{key_name(key)} must be a whole number >= 0, got {describe(value)}", key)


def whole_seconds(reader: KeyReader, value: object, key: KeyPath) -> int:
    if not positive_int(value):
        raise reader.error(
            f"{key_name(key)} must be a positive number of seconds, got {describe(value)}", key
        )
    return value


def one_of(valid: Sequence[S]) -> Read[S]:
    """The reader of a key that takes one of `valid`."""

    def read(reader: KeyReader, value: object, key: KeyPath) -> S:
        chosen = next((name for name in valid if name == value), None)
        if chosen is None:
            names = ", ".join(repr(v) for v in valid)
            raise reader.error(
                f"{key_name(key)} must be one of {names}, got {describe(value)}", key
            )
        return chosen

    return read


def text(reader: KeyReader, value: object, key: KeyPath) -> str:
    if not isinstance(value, str) or not value.strip():
        raise reader.error(
            f"{key_name(key)} must be a non-empty string, got {describe(value)}", key
        )
    return value


def redis_url(reader: KeyReader, value: object, key: KeyPath) -> str:
    url = text(reader, value, key)
    try:
        return check_cache_url(url, key_name(key))
    except ConfigError as error:
        raise reader.error(error.message, key) from None


def sign_key_file(reader: KeyReader, value: object, key: KeyPath) -> KeyFile:
    return _key_file(reader, value, key, load_signing_key)


def verify_key_file(reader: KeyReader, value: object, key: KeyPath) -> KeyFile:
    return _key_file(reader, value, key, load_verify_key)


def _key_file(
    reader: KeyReader, value: object, key: KeyPath, load: Callable[[Path], object]
) -> KeyFile:
    """A key file, relative to the config's folder unless absolute, loaded now so that an
    unusable one is blamed on its line (the build loads it again: it may change meanwhile)."""
    path = reader.root / Path(path_text(reader, value, key, "file")).expanduser()
    try:
        load(path)
    except KeyFileError as error:
        raise reader.error(f"{key_name(key)}: {error}", key) from None
    return KeyFile(path, key_name(key), reader.path, reader.line(key))


def reference(reader: KeyReader, value: object, key: KeyPath) -> str:
    """A "file.py:function" or "package.module:function" reference (entry, transform_passes,
    partitioners, calibration: the key's name is what its errors call it)."""
    what = key_name(key)
    if not isinstance(value, str):
        raise reader.error(
            f'{what} must be a string like "models/net.py:make", got {describe(value)}', key
        )
    refuse_nul(reader, value, key)
    module, colon, function = value.rpartition(":")
    if not colon or not function:
        example = f"{module or value or 'models/net.py'}:make"
        raise reader.error(f"{what} {value!r} must name a function: {example!r}", key)
    if not module.strip():
        raise reader.error(f"{what} {value!r} needs a file or module before ':'", key)
    if not function.isidentifier():
        raise reader.error(f"{function!r} in {what} {value!r} is not a function name", key)
    if is_path(module) and not module.endswith(".py"):
        raise reader.error(
            f"{what} file {module!r} is not a Python file: {article(what)} {what} names a "
            f".py file or a dotted module, like 'models/net.py:{function}'",
            key,
        )
    if not is_path(module) and not all(p.isidentifier() for p in module.split(".")):
        raise reader.error(
            f"{module!r} in {what} {value!r} is neither a .py file nor a dotted module name", key
        )
    return value


def is_path(module_or_path: str) -> bool:
    return module_or_path.endswith(".py") or "/" in module_or_path


def backend_names(reader: KeyReader, value: object, key: KeyPath) -> tuple[str, ...]:
    known = ", ".join(KNOWN_BACKENDS)
    if not isinstance(value, list):
        raise reader.error(
            f'backends must be a list of names like ["xnnpack"], got {describe(value)}', key
        )
    if not value:
        raise reader.error(f"backends must not be empty; known backends: {known}", key)
    for i, name in enumerate(value):
        if not isinstance(name, str):
            raise reader.error(f"backend names are strings, got {describe(name)}", (*key, i))
        if name not in KNOWN_BACKENDS:
            hint = did_you_mean(name, KNOWN_BACKENDS)
            raise reader.error(
                f"unknown backend {name!r}{hint}; known backends: {known}", (*key, i)
            )
        if name in value[:i]:
            raise reader.error(f"backend {name!r} is listed twice", (*key, i))
    return tuple(value)


def positive_int(value: object) -> TypeGuard[int]:
    # bool is an int to Python, but `buffer_limit = true` is surely a mistake.
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _is_size(text: str) -> bool:
    try:
        parse_size(text)
    except ValueError:
        return False
    return True


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
