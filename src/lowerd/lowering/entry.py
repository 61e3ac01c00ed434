"""Load a target's entry function and turn what it returns into the methods to export.

An entry returns a `lowerd.Method(module, args, kwargs, dynamic_shapes=...)`, `(module, args)`,
`(module, args, dynamic_shapes)`, or a dict of those keyed by method name; each is read into a
Method. Every failure is blamed on a line: the config line that names the entry, the line of
a syntax error, the user's frame that raised, or the entry function's `def`.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lowerd.project.config import ProjectConfig, TargetConfig
from lowerd.project.errors import EntryError
from lowerd.project.located import Located
from lowerd.project.method import Method
from lowerd.project.source_map import UserFiles


@dataclass
class LoadedEntry:
    function: Callable[[], Any]
    file: str
    line: int
    methods: dict[str, Method]


def load_entry(config: ProjectConfig, target: TargetConfig) -> LoadedEntry:
    found = find_function(config, target, target.entry, "entry")
    file, line = found.file, found.line
    user_files = UserFiles(config.root)
    try:
        returned = found.function()
    except Exception as error:
        raise _blame(error, user_files, file, line, f"entry {target.entry.value} raised") from error
    methods = _methods_from(returned, target, file, line)
    return LoadedEntry(found.function, file, line, methods)


@dataclass(frozen=True)
class UserFunction:
    """A function a config key names, and its `def`: where what it does is blamed."""

    function: Callable[..., Any]
    file: str
    line: int


def find_function(
    config: ProjectConfig, target: TargetConfig, located: Located[str], role: str
) -> UserFunction:
    """The function a "file.py:fn" or "package.module:fn" reference names, imported as the
    entry is: the one rule for every key that names user code (entry, transform_passes,
    partitioners, export.module_passes, calibration, verify_inputs). A failure is blamed on its
    config line, before anything is called: so is a name without Python source (`os:getcwd`, a
    builtin or C function), which no user wrote and a build must not call."""
    reference, line = located.value, located.line
    where, _, function_name = reference.rpartition(":")
    root = str(config.root)
    if root not in sys.path:  # entry files import their siblings as `models.blocks`
        sys.path.insert(0, root)
    module = _import(config, target, where, line, role)
    function: Any = getattr(module, function_name, None)
    if function is None:
        raise EntryError(
            f"{where} has no function {function_name!r} ({role} of target {target.name!r})",
            config.path,
            line,
        )
    if not callable(function):
        raise EntryError(
            f"{role} {reference} is a {type(function).__name__}, not a function",
            config.path,
            line,
        )
    # A callable object's code is its class's.
    file, def_line = definition_site(function)
    if file is None and not inspect.isroutine(function):
        file, def_line = definition_site(type(function))
    if file is None or def_line is None:
        raise EntryError(
            f"{role} {reference} is {_describe(function)} without Python source: {role} names "
            "a function defined in a .py file, like 'models/net.py:make'",
            config.path,
            line,
        )
    return UserFunction(function, file, def_line)


def _import(config: ProjectConfig, target: TargetConfig, where: str, line: int, role: str) -> Any:
    user_files = UserFiles(config.root)
    try:
        if where.endswith(".py") or "/" in where:
            return _import_path(config, target, config.root / where, line, role)
        return importlib.import_module(where)
    except SyntaxError as error:
        raise EntryError(
            f"syntax error: {error.msg}", error.filename or where, error.lineno
        ) from error
    except ModuleNotFoundError as error:
        if error.name and where.startswith(error.name):
            raise EntryError(
                f"cannot import {where!r}: no module named {error.name!r}",
                config.path,
                line,
            ) from error
        raise _blame(error, user_files, str(config.path), line, f"importing {where}") from error
    except EntryError:
        raise
    except Exception as error:
        raise _blame(error, user_files, str(config.path), line, f"importing {where}") from error


def _import_path(
    config: ProjectConfig, target: TargetConfig, path: Path, line: int, role: str
) -> Any:
    if not path.is_file():
        shown = path.relative_to(config.root) if path.is_relative_to(config.root) else path
        raise EntryError(
            f"{role} file {shown} does not exist (target {target.name!r})",
            config.path,
            line,
        )
    name = _module_name(config.root, path)
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(path):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # the config refuses non-.py names; this is a backstop
        raise EntryError(
            f"{role} file {path} cannot be imported as Python (target {target.name!r})",
            config.path,
            line,
        )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # so that dataclasses and pickling-free reflection find it
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _module_name(root: Path, path: Path) -> str:
    """models/vit.py under the root imports as `models.vit`, the same module its siblings see."""
    try:
        parts = path.resolve().relative_to(root.resolve()).with_suffix("").parts
    except ValueError:
        return f"lowerd_entry_{abs(hash(str(path)))}"
    return ".".join(parts)


def definition_site(thing: Any) -> tuple[str | None, int | None]:
    """File and line where a function or class is defined, when Python can tell. A function's
    line is its code's, read without decoding its file: CPython runs a file whose comment is not
    UTF-8, which `tokenize` (inspect's reading of the source) refuses."""
    try:
        file = inspect.getsourcefile(thing)
        code = getattr(thing, "__code__", None)
        if isinstance(code, types.CodeType):
            line = code.co_firstlineno
        else:
            _, line = inspect.getsourcelines(thing)
    except (TypeError, OSError, SyntaxError, UnicodeDecodeError):
        return None, None
    return (str(Path(file).resolve()) if file else None), line


def _blame(
    error: BaseException, user_files: UserFiles, file: str | None, line: int | None, doing: str
) -> EntryError:
    source = user_files.innermost_in_exception(error)
    if source:
        file, line = source.file, source.line
    return EntryError(f"{doing}: {type(error).__name__}: {error}", file, line)


def _methods_from(
    returned: Any, target: TargetConfig, file: str | None, line: int | None
) -> dict[str, Method]:
    if isinstance(returned, dict):
        if not returned:
            raise EntryError(
                f"entry {target.entry.value} returned an empty dict of methods", file, line
            )
        return {
            _method_name(name, target, file, line): _method(value, f"method {name!r}", file, line)
            for name, value in returned.items()
        }
    return {"forward": _method(returned, f"entry {target.entry.value}", file, line)}


def _method_name(name: Any, target: TargetConfig, file: str | None, line: int | None) -> str:
    if not isinstance(name, str) or not name.isidentifier():
        raise EntryError(
            f"entry {target.entry.value} returned method name {name!r}; names must be identifiers",
            file,
            line,
        )
    return name


def _method(value: Any, what: str, file: str | None, line: int | None) -> Method:
    import torch

    shape = "a lowerd.Method, (module, example_args) or (module, example_args, dynamic_shapes)"
    if isinstance(value, Method):
        method = value
    elif isinstance(value, tuple) and len(value) in (2, 3):
        module, args, *rest = value
        method = Method(module, args, dynamic_shapes=rest[0] if rest else None)
    else:
        raise EntryError(f"{what} returned {_describe(value)}; expected {shape}", file, line)
    if not isinstance(method.module, torch.nn.Module):
        raise EntryError(
            f"{what}: the module is {_describe(method.module)}, not a torch.nn.Module", file, line
        )
    if not isinstance(method.args, tuple):
        hint = " (write (x,) for a single input)" if isinstance(method.args, torch.Tensor) else ""
        raise EntryError(
            f"{what}: example_args is {_describe(method.args)}, expected a tuple{hint}", file, line
        )
    if not isinstance(method.kwargs, dict) or not all(isinstance(k, str) for k in method.kwargs):
        raise EntryError(
            f"{what}: kwargs is {_describe(method.kwargs)}, expected a dict of keyword example "
            "inputs by parameter name",
            file,
            line,
        )
    return method


def refuse_keyword_inputs(
    methods: Mapping[str, Method], why: str, file: str | None, line: int | None
) -> None:
    """For a lowering that takes example inputs by position only (`why` says which): a method
    with keyword example inputs is an error at the entry function."""
    keyword = next((name for name, method in methods.items() if method.kwargs), None)
    if keyword is not None:
        names = ", ".join(methods[keyword].kwargs)
        raise EntryError(
            f"method {keyword!r} has keyword example inputs ({names}); {why}: give them as args",
            file,
            line,
        )


def _describe(value: Any) -> str:
    if isinstance(value, tuple):
        return f"a tuple of {len(value)}"
    return f"a {type(value).__name__}"
