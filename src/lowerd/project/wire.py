"""One converter for every shape that crosses a process or language boundary: the `--json`
documents, the worker pipe's and the daemon socket's msgpack frames, the build records on disk
and the editors' payloads (docs/schema/README.md). Each shape is a dataclass; its wire form is
derived from its fields:

    encode(value)      -> dicts, lists and scalars, keys in the fields' order
    decode(cls, raw)   -> the class, checked whole: a key it does not know, a missing field
                          without a default, a value of the wrong type is a WireError naming
                          each one by its path ("methods['forward'].ops: expected int, got str")

What a class's fields cannot say, it says once, beside them: wire_field(omit_none, digits, key,
check, rest) on a field; @wire_shape(computed, order, tag, positional) on the class (properties
written besides the fields and never read back, another key order, the tag that names a message
among others on one wire, a list instead of a map); wire_form() for a class that travels as
another (a compact form). Everything else is cattrs' own. project/wire_schema.py derives the
JSON Schema from the same. No torch here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, get_args, get_origin, get_type_hints

from cattrs import Converter
from cattrs.cols import homogenous_tuple_structure_factory, list_structure_factory
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override
from cattrs.strategies import configure_union_passthrough

T = TypeVar("T")
F = TypeVar("F")
C = TypeVar("C", bound=type)

_WIRE = "lowerd.wire"  # the key of a field's options in its dataclass metadata
_SHOWN_CHARS = 40  # of a wrong value, in an error


class WireError(ValueError):
    """A document that is not the shape it should be; `problems` are "path: what is wrong"."""

    def __init__(self, problems: Sequence[str]):
        super().__init__("; ".join(problems))
        self.problems = list(problems)


@dataclass(frozen=True)
class FieldOptions:
    omit_none: bool = False  # the key is left out while the value is None
    digits: int | None = None  # a float written rounded to this many decimals
    key: str | None = None  # the key, when not the field's name (a camelCase one)
    rest: bool = False  # a positional class's last field, a tuple: the rest of its list
    # What a value of the right type may still be wrong in ("expected ..."), else None.
    check: Callable[[Any], str | None] | None = None


@dataclass(frozen=True)
class ShapeOptions:
    # Properties written after the fields (or where `order` puts them), ignored when read.
    computed: tuple[str, ...] = ()
    # The keys' order when it is not the fields' (the computed ones among them); keys not named
    # come after, in the fields' order.
    order: tuple[str, ...] = ()
    # Sent as a list, the fields in order (a command's arguments); a last field marked
    # wire_field(rest=True) takes the rest of the list. read_positional reads it.
    positional: bool = False
    # (key, value) written first, naming the message among others on one wire: ("op", "build").
    # decode_tagged reads a message of any of several classes by it.
    tag: tuple[str, str] | None = None


def wire_field(
    *,
    omit_none: bool = False,
    digits: int | None = None,
    key: str | None = None,
    rest: bool = False,
    check: Callable[[Any], str | None] | None = None,
) -> dict[str, Any]:
    """A field's metadata for its wire form: field(default=None, metadata=wire_field(...))."""
    return {_WIRE: FieldOptions(omit_none, digits, key, rest, check)}


def wire_key(field: dataclasses.Field[Any]) -> str:
    return field_options(field).key or field.name


def wire_shape(
    *,
    computed: Sequence[str] = (),
    order: Sequence[str] = (),
    positional: bool = False,
    tag: str | None = None,
) -> Callable[[C], C]:
    """A class decorator: what the class writes besides its fields, in which key order, that
    it travels as a list, or the key of the tag it is known by (its value the class's ClassVar
    of that name: op: ClassVar[str] = "build")."""

    def mark(cls: C) -> C:
        tagged = (tag, str(getattr(cls, tag))) if tag else None
        options = ShapeOptions(tuple(computed), tuple(order), positional, tagged)
        cls.__wire_shape__ = options  # type: ignore[attr-defined]
        return cls

    return mark


# A class whose wire form is another class's (a compact encoding): class -> that class.
WIRE_FORMS: dict[type, type] = {}


def wire_form(cls: type[T], form: type[F], write: Callable[[T], F], read: Callable[[F], T]) -> None:
    """`cls` travels as `form` (its fields the wire's), made by `write` and read back by `read`:
    for a shape whose wire form is not its fields (MethodGraph's compact node lists)."""
    WIRE_FORMS[cls] = form
    _CONVERTER.register_unstructure_hook(cls, lambda value: _CONVERTER.unstructure(write(value)))
    _CONVERTER.register_structure_hook(cls, lambda raw, _: read(_CONVERTER.structure(raw, form)))


def field_options(field: dataclasses.Field[Any]) -> FieldOptions:
    options: FieldOptions = field.metadata.get(_WIRE, FieldOptions())
    return options


def shape_options(cls: type) -> ShapeOptions:
    options: ShapeOptions = cls.__dict__.get("__wire_shape__", ShapeOptions())
    return options


def encode(value: object) -> Any:
    """The value as plain data: dicts (str keys), lists, str, int, float, bool, None."""
    return _CONVERTER.unstructure(value)


def decode(cls: type[T], raw: object) -> T:
    """`raw` read as `cls`, checked whole; WireError naming every field that is wrong."""
    decoded: T = decode_as(cls, raw)
    return decoded


def decode_as(annotation: Any, raw: object) -> Any:
    """decode() for an annotation that is not a class: `TargetResult | None`, `list[DataFile]`."""
    try:
        return _CONVERTER.structure(raw, annotation)
    except (
        ClassValidationError,
        IterableValidationError,
        LookupError,
        TypeError,
        ValueError,
    ) as error:
        if isinstance(error, WireError):
            raise
        raise WireError(problems(error)) from error


def decode_tagged(classes: Sequence[type[T]], raw: object, what: str) -> T:
    """A message of one of the tagged `classes` (their tags under one key), by its tag;
    WireError naming an unknown tag or what is wrong in the message."""
    tags = {shape_options(cls).tag: cls for cls in classes}
    key = next(iter(tags))[0]  # type: ignore[index]
    if not isinstance(raw, Mapping):
        raise WireError([f"expected a map, got {_shown(raw)}"])
    cls = tags.get((key, raw.get(key)))  # type: ignore[arg-type]
    if cls is None:
        known = ", ".join(tag[1] for tag in tags if tag is not None)
        raise WireError([f"{key}: unknown {what} {raw.get(key)!r}; expected {known}"])
    return decode(cls, raw)


def read_positional(cls: type[T], raw: Sequence[Any]) -> T:
    """A positional class (wire_shape(positional=True)) from its list: the fields in order, the
    rest of the list in a last field marked rest; WireError naming what is wrong."""
    names = [field.name for field in dataclasses.fields(cls)]  # type: ignore[arg-type]
    rest = is_rest(cls)
    given = dict(zip(names, raw, strict=False))
    if rest:
        given[names[-1]] = list(raw[len(names) - 1 :])
    elif len(raw) > len(names):
        raise WireError([f"[{len(names)}]: at most {len(names)} arguments, got {len(raw)}"])
    return decode(cls, given)


def is_rest(cls: type) -> bool:
    """Whether a positional class's last field takes the rest of its list."""
    return field_options(dataclasses.fields(cls)[-1]).rest


def problems(error: BaseException, path: str = "") -> list[str]:
    """Each leaf failure of cattrs' detailed validation as "path: what is wrong"."""
    if isinstance(error, ClassValidationError | IterableValidationError):
        found = []
        with_notes, without = error.group_exceptions()
        for inner, note in with_notes:
            step = getattr(note, "name", None)
            where = f"{path}.{step}" if step is not None else f"{path}[{note.index!r}]"
            found += problems(inner, where.lstrip("."))
        for inner in without:
            found += problems(inner, path)
        return found
    if isinstance(error, ForbiddenExtraKeysError):
        where = f"{path}." if path else ""
        return [f"{where}{key}: unknown field" for key in sorted(map(str, error.extra_fields))]
    reason = "missing" if isinstance(error, KeyError) else str(error)
    return [f"{path}: {reason}" if path else reason]


def strict_scalar(accepted: tuple[type, ...], value: Any, declared: type) -> Any:
    """A JSON scalar of the declared type, never coerced: "3" is no int, 1 no bool. The hook
    also serves subclasses (IntEnum, StrEnum), which is why the value goes through `declared`."""
    if not isinstance(value, accepted) or (isinstance(value, bool) and bool not in accepted):
        raise TypeError(f"expected {declared.__name__}, got {_shown(value)}")
    return declared(value)


def _shown(value: Any) -> str:
    text = repr(value)
    if len(text) > _SHOWN_CHARS:
        text = text[: _SHOWN_CHARS - 3] + "..."
    return f"{type(value).__name__} {text}"


# The converter ---------------------------------------------------------------------------------


def _is_shape(cls: Any) -> bool:
    return isinstance(cls, type) and dataclasses.is_dataclass(cls)


def _encoder(cls: type, converter: Converter) -> Callable[[Any], dict[str, Any]]:
    overrides = {}
    for field in dataclasses.fields(cls):
        options = field_options(field)
        rounded = _rounder(options.digits) if options.digits is not None else None
        omitted = True if options.omit_none else None
        overrides[field.name] = override(omitted, options.key, unstruct_hook=rounded)
    # cattrs takes the overrides as keyword arguments beside its own, which mypy cannot tell apart
    fields_only: Callable[[Any], dict[str, Any]] = make_dict_unstructure_fn(
        cls,
        converter,
        **overrides,  # type: ignore[arg-type]
    )
    shape = shape_options(cls)
    if not shape.computed and not shape.order and not shape.tag:
        return fields_only
    tagged = dict([shape.tag]) if shape.tag else {}

    def with_computed(value: Any) -> dict[str, Any]:
        document = fields_only(value)
        for name in shape.computed:
            document[name] = converter.unstructure(getattr(value, name))
        ordered = {key: document.pop(key) for key in shape.order if key in document}
        return tagged | ordered | document

    return with_computed


def _rounder(digits: int) -> Callable[[float], float]:
    return lambda value: round(value, digits)


def _decoder(cls: type, converter: Converter) -> Callable[[Any, Any], Any]:
    hints = get_type_hints(cls)
    overrides = {
        field.name: override(
            rename=options.key,
            struct_hook=_checking(converter, hints[field.name], options.check),
        )
        for field in dataclasses.fields(cls)
        if (options := field_options(field)).key or options.check
    }
    fields_only: Callable[[Any, Any], Any] = make_dict_structure_fn(
        cls,
        converter,
        _cattrs_forbid_extra_keys=True,
        **overrides,  # type: ignore[arg-type]
    )
    shape = shape_options(cls)
    not_fields = set(shape.computed) | ({shape.tag[0]} if shape.tag else set())

    def checked(raw: Any, _: Any) -> Any:
        if not isinstance(raw, Mapping):
            raise TypeError(f"expected a map, got {_shown(raw)}")
        if shape.tag and raw.get(shape.tag[0]) != shape.tag[1]:
            found = _shown(raw.get(shape.tag[0]))
            raise ValueError(f"{shape.tag[0]}: expected {shape.tag[1]!r}, got {found}")
        if not_fields:
            raw = {key: value for key, value in raw.items() if key not in not_fields}
        return fields_only(raw, cls)

    return checked


def _checking(
    converter: Converter, annotation: Any, check: Callable[[Any], str | None] | None
) -> Callable[[Any, Any], Any] | None:
    """The field's own structure hook, then its check."""
    if check is None:
        return None
    structure = converter.get_structure_hook(annotation)

    def checked(raw: Any, declared: Any) -> Any:
        value = structure(raw, declared)
        problem = check(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    return checked


def is_sequence_type(annotation: Any) -> bool:
    return get_origin(annotation) in (list, tuple, Sequence)


def sequence_decoder(annotation: Any, converter: Converter) -> Callable[[Any, Any], Any]:
    """cattrs' own, but only for a list: it would take any iterable (a map's keys, a string's
    characters) for one."""
    items = get_args(annotation)
    if get_origin(annotation) is tuple and items and items[-1] is not Ellipsis:
        return lambda raw, _: _fixed_tuple(converter, items, raw)
    if get_origin(annotation) is list:
        inner = list_structure_factory(annotation, converter)
    else:
        inner = homogenous_tuple_structure_factory(annotation, converter)

    def checked(raw: Any, _: Any) -> Any:
        if not isinstance(raw, list | tuple):
            raise TypeError(f"expected a list, got {_shown(raw)}")
        return inner(raw, annotation)

    return checked


def _fixed_tuple(converter: Converter, items: tuple[Any, ...], raw: Any) -> tuple[Any, ...]:
    if not isinstance(raw, list | tuple) or len(raw) != len(items):
        raise TypeError(f"expected a list of {len(items)} items, got {_shown(raw)}")
    return tuple(converter.structure(value, item) for value, item in zip(raw, items, strict=True))


def _make_converter() -> Converter:
    converter = Converter(
        forbid_extra_keys=True,
        # JSON has one sequence: a tuple is written as a list, as msgpack reads it back.
        unstruct_collection_overrides={Sequence: list, tuple: list},
    )
    for declared, accepted in ((str, (str,)), (int, (int,)), (float, (int, float))):
        converter.register_structure_hook(declared, _scalar_hook(accepted))
    converter.register_structure_hook(bool, _scalar_hook((bool,)))
    configure_union_passthrough(int | float | str | bool | None, converter)
    converter.register_unstructure_hook_factory(_is_shape, _encoder)
    converter.register_structure_hook_factory(is_sequence_type, sequence_decoder)
    converter.register_structure_hook_factory(_is_shape, _decoder)
    return converter


def _scalar_hook(accepted: tuple[type, ...]) -> Callable[[Any, type], Any]:
    return lambda value, declared: strict_scalar(accepted, value, declared)


_CONVERTER = _make_converter()
