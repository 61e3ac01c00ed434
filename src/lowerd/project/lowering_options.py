"""What a target passes to ExecuTorch besides its program: backend options, the edge and emit
configs with their memory planning, constant methods, a whole-program backend; their checks (each
a reader the field table, config_keys.py, names), how a target's value is laid over the
project's, and the rules between these keys. Declared quantization is quantize_options.py's, how
the program is exported export_options.py's.

Checked without importing torch or executorch: the option and field lists are in
project/backends.py and project/compile_configs.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias, TypedDict

from lowerd.project.backends import BACKEND_OPTIONS, BACKENDS, OptionKind
from lowerd.project.compile_configs import COMPILE_CONFIGS
from lowerd.project.config_reader import KeyReader, Table, describe, did_you_mean, key_name
from lowerd.project.config_values import positive_int
from lowerd.project.recipes import check_recipe_target
from lowerd.project.toml_lines import KeyPath

# A backend option's or a config field's value, as checked against its OptionKind.
OptionValue: TypeAlias = bool | int | str | list[int] | list[str] | dict[str, "OptionValue"]
Options = dict[str, OptionValue]  # one partitioner's options; one config's fields
BackendOptions = dict[str, Options]  # backend name -> its partitioner's options
Constant = bool | int | float | str
ConstantMethods = dict[str, Constant | list[Constant]]  # method name -> its value


class WholeProgram(TypedDict):
    """backend_api.to_backend(backend_id, program, [CompileSpec(key, value.encode())...])."""

    backend_id: str  # the BackendDetails class name
    compile_specs: dict[str, str]


# Backend options and config fields -----------------------------------------------------------


def backend_options(reader: KeyReader, value: object, key: KeyPath) -> BackendOptions:
    """[<table>.backend_options.<backend>] tables, each option checked against its kind."""
    known = ", ".join(BACKEND_OPTIONS)
    if not isinstance(value, dict):
        raise reader.error(
            "backend_options must be a table of backends, like [tool.lowerd.backend_options."
            f"xnnpack], got {describe(value)}",
            key,
        )
    read: BackendOptions = {}
    for backend, options in value.items():
        backend_key = (*key, backend)
        if backend not in BACKEND_OPTIONS:
            hint = did_you_mean(backend, BACKEND_OPTIONS)
            raise reader.error(
                f"unknown backend {backend!r} in backend_options{hint}; known backends: {known}",
                backend_key,
            )
        if not isinstance(options, dict):
            raise reader.error(
                f"backend_options.{backend} must be a table of options, got {describe(options)}",
                backend_key,
            )
        where = f"{BACKENDS[backend].display} option"
        kinds = BACKEND_OPTIONS[backend]
        read[backend] = {
            name: option(reader, name, item, kinds, (*backend_key, name), where)
            for name, item in options.items()
        }
    return read


def compile_config(reader: KeyReader, value: object, key: KeyPath) -> Options:
    """[<table>.edge_compile_config] or [...executorch_backend_config]: EdgeCompileConfig or
    ExecutorchBackendConfig fields."""
    name = key_name(key)
    if not isinstance(value, dict):
        raise reader.error(
            f"{name} must be a table of fields like [tool.lowerd.{name}], got {describe(value)}",
            key,
        )
    kinds = COMPILE_CONFIGS[name]
    return {
        field: option(reader, field, item, kinds, (*key, field), f"{name} field")
        for field, item in value.items()
    }


def memory_planning(reader: KeyReader, value: object, key: KeyPath) -> Options:
    """[<table>.memory_planning]: MemoryPlanningPass's arguments, the algorithm by name."""
    fields = compile_config(reader, value, key)
    if fields.get("share_mutable_buffers") is True and fields.get("alloc_mutable_buffers") is False:
        raise reader.error(
            "share_mutable_buffers needs alloc_mutable_buffers (MemoryPlanningPass refuses "
            "sharing buffers it does not plan): drop one",
            (*key, "share_mutable_buffers"),
        )
    return fields


def option(
    reader: KeyReader,
    name: str,
    value: object,
    kinds: Mapping[str, OptionKind],
    key: KeyPath,
    where: str,
) -> OptionValue:
    """A backend option's or config field's value, checked against its kind (backends.py)."""
    if name not in kinds:
        hint = did_you_mean(name, kinds)
        raise reader.error(
            f"unknown {where} {name!r}{hint}; valid options: {', '.join(kinds)}", key
        )
    kind = kinds[name]
    if kind.kind == "names":
        return _names(reader, name, value, kind.choices, key)
    wrong = reader.error(f"{name} must be {kind.describe()}, got {describe(value)}", key)
    if kind.kind == "bool" and isinstance(value, bool):
        return value
    if kind.kind == "int" and positive_int(value):
        return value
    if kind.kind == "ints3" and isinstance(value, list) and len(value) == 3:
        if all(positive_int(v) for v in value):
            return list(value)
    if kind.kind == "choice" and isinstance(value, str):
        reader.check_name(name, value, kind.choices, key)
        return value
    if kind.kind == "table" and isinstance(value, dict):  # a table of options of its own
        table = dict(kind.table)
        return {
            sub: option(reader, sub, item, table, (*key, sub), f"{name} key")
            for sub, item in value.items()
        }
    raise wrong


def _names(
    reader: KeyReader, name: str, value: object, choices: tuple[str, ...], key: KeyPath
) -> list[str]:
    if not isinstance(value, list) or not value:
        raise reader.error(
            f"{name} must be a non-empty list of names from {', '.join(choices)}, "
            f"got {describe(value)}",
            key,
        )
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise reader.error(f"{name} holds names, got {describe(item)}", (*key, i))
        reader.check_name(name, item, choices, (*key, i))
        if item in value[:i]:
            raise reader.error(f"{item!r} is listed twice in {name}", (*key, i))
    return list(value)


def lay_backend_options(default: BackendOptions, given: BackendOptions | None) -> BackendOptions:
    """A target's backend options laid over the project's, option by option."""
    laid = {backend: dict(options) for backend, options in default.items()}
    for backend, options in (given or {}).items():
        laid.setdefault(backend, {}).update(options)
    return laid


def lay_fields(default: Options, given: Options | None) -> Options:
    """A target's config fields laid over the project's, field by field."""
    return {**default, **(given or {})}


# Constant methods, whole program --------------------------------------------------------------


def constant_methods(reader: KeyReader, value: object, key: KeyPath) -> ConstantMethods:
    if not isinstance(value, dict):
        raise reader.error(
            "constant_methods must be a table of names and values like "
            f"{{ vocab_size = 32000 }}, got {describe(value)}",
            key,
        )
    for name, constant in value.items():
        if not name.isidentifier():
            raise reader.error(f"constant method name {name!r} is not an identifier", (*key, name))
        items = constant if isinstance(constant, list) else [constant]
        if not all(isinstance(item, bool | int | float | str) for item in items):
            raise reader.error(
                f"constant method {name} must be a boolean, integer, float or string, or a "
                f"list of them, got {describe(constant)}",
                (*key, name),
            )
    return dict(value)


def whole_program(reader: KeyReader, value: object, key: KeyPath) -> WholeProgram:
    example = '{ backend_id = "XnnpackBackend", compile_specs = { key = "value" } }'
    if not isinstance(value, dict):
        raise reader.error(
            f"whole_program must be a table like {example}, got {describe(value)}", key
        )
    reader.check_keys(value, ("backend_id", "compile_specs"), key, "whole_program")
    backend_id = value.get("backend_id")
    if not isinstance(backend_id, str) or not backend_id.isidentifier():
        raise reader.error(
            "whole_program needs backend_id, the name of a BackendDetails class like "
            f'"XnnpackBackend", got {describe(backend_id)}',
            (*key, "backend_id") if "backend_id" in value else key,
        )
    specs = value.get("compile_specs", {})
    if not isinstance(specs, dict):
        raise reader.error(
            f'compile_specs must be a table of strings like {{ key = "value" }}, got '
            f"{describe(specs)}",
            (*key, "compile_specs"),
        )
    for spec_key, spec_value in specs.items():
        if not isinstance(spec_value, str):
            raise reader.error(
                f"compile spec {spec_key} must be a string (given to the backend as "
                f"CompileSpec({spec_key!r}, value.encode())), got {describe(spec_value)}",
                (*key, "compile_specs", spec_key),
            )
    return WholeProgram(backend_id=backend_id, compile_specs=dict(specs))


# Rules between keys --------------------------------------------------------------------------


def check_lowering_route(reader: KeyReader, table: Table, key: KeyPath) -> None:
    """`partitioners` (a function reference), `whole_program` (a backend id and compile
    specs) or `recipe` (one of ExecuTorch's export recipes): each replaces `backends`; at most
    one of the four. A whole_program target has no transform_passes: it is lowered by to_edge
    and to_backend; a recipe target none of the keys its recipe decides (project/recipes.py)."""
    routes = ("backends", "partitioners", "whole_program", "recipe")
    given = [name for name in routes if name in table]
    if len(given) > 1:
        raise reader.error(
            f"{given[-1]} and {given[0]} both say how to lower target; keep one "
            "(partitioners, whole_program and recipe replace backends)",
            (*key, given[-1]),
        )
    check_recipe_target(reader, table, key)
    if "whole_program" in table and "transform_passes" in table:
        raise reader.error(
            "transform_passes is for to_edge_transform_and_lower; a whole_program target is "
            "lowered by to_edge and to_backend: drop one",
            (*key, "transform_passes"),
        )


def lay_external_constants(
    reader: KeyReader, table: Table, key: KeyPath, backend_config: Options
) -> None:
    """`external_constants = true` is executorch_backend_config.external_constants = true:
    one or the other, not both."""
    shorthand = table.get("external_constants")
    if not isinstance(shorthand, bool):  # absent (a wrong type was refused when read)
        return
    given = table.get("executorch_backend_config")
    if isinstance(given, dict) and "external_constants" in given:
        raise reader.error(
            "external_constants is given twice: here and in executorch_backend_config; keep one",
            (*key, "external_constants"),
        )
    backend_config["external_constants"] = shorthand
