"""The JSON Schema (draft 2020-12) of wire shapes, derived from their classes as project/wire.py
derives their encoding: a dataclass is an object of its fields' keys (required: the fields
without a default; a key written only when given is not required and never null), its computed
keys read-only; a class with a wire form (MethodGraph) is its form's object. Each class is one
entry of "$defs", named by the class, described by its docstring. No torch here.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from lowerd.project.wire import WIRE_FORMS, field_options, is_rest, shape_options, wire_key

DIALECT = "https://json-schema.org/draft/2020-12/schema"
_SCALARS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
    Any: {},
    object: {},
}


class SchemaWriter:
    """Collects the definitions of the classes it meets, each once."""

    def __init__(self) -> None:
        self.definitions: dict[str, dict[str, Any]] = {}

    def reference(self, cls: type) -> dict[str, Any]:
        """{"$ref": ...} to the class's definition, written the first time."""
        form = WIRE_FORMS.get(cls, cls)
        name = form.__name__
        if name not in self.definitions:
            self.definitions[name] = {}  # taken: a class that refers to itself stops here
            self.definitions[name] = self._object(form)
        return {"$ref": f"#/$defs/{name}"}

    def of(self, annotation: Any) -> dict[str, Any]:
        """The schema of a value of this annotation."""
        if annotation in _SCALARS:
            return dict(_SCALARS[annotation])
        if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
            return self.reference(annotation)
        origin, items = get_origin(annotation), get_args(annotation)
        if origin is Literal:
            return {"enum": list(items)}
        if origin in (Union, types.UnionType):
            return {"anyOf": [self.of(item) for item in items]}
        if origin in (dict, Mapping):
            return {"type": "object", "additionalProperties": self.of(items[1])}
        if origin is tuple and items and items[-1] is not Ellipsis:
            fixed = [self.of(item) for item in items]
            return {"type": "array", "prefixItems": fixed, "items": False}
        if origin in (list, tuple, Sequence):
            return {"type": "array", "items": self.of(items[0])}
        raise TypeError(f"no JSON Schema for {annotation!r}")

    def _object(self, cls: type) -> dict[str, Any]:
        if shape_options(cls).positional:
            return self._positional(cls)
        hints = get_type_hints(cls)
        shape = shape_options(cls)
        properties: dict[str, Any] = {}
        required = []
        if shape.tag is not None:
            properties[shape.tag[0]] = {"const": shape.tag[1]}
            required.append(shape.tag[0])
        for field in dataclasses.fields(cls):
            options = field_options(field)
            value = hints[field.name]
            if options.omit_none:
                value = _without_none(value)
            properties[wire_key(field)] = self.of(value)
            if _required(field):
                required.append(wire_key(field))
        for name in shape.computed:
            computed = get_type_hints(getattr(cls, name).fget)["return"]
            properties[name] = {**self.of(computed), "readOnly": True}
        if shape.order:
            properties = {k: properties.pop(k) for k in shape.order if k in properties} | properties
        return _described(cls) | {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        }

    def _positional(self, cls: type) -> dict[str, Any]:
        """A list of the fields' values in order; a last tuple field is the rest of it."""
        hints = get_type_hints(cls)
        fields = dataclasses.fields(cls)
        rest = fields[-1] if is_rest(cls) else None
        items = [self.of(hints[field.name]) for field in fields if field is not rest]
        schema = _described(cls) | {"type": "array"}
        if items:
            schema["prefixItems"] = items
        if rest is not None:
            schema["items"] = self.of(get_args(hints[rest.name])[0])
        else:
            schema["items"] = False
        schema["minItems"] = sum(1 for field in fields if _required(field))
        return schema


def schema_of(
    roots: Mapping[str, type | tuple[type, ...]], title: str, description: str
) -> dict[str, Any]:
    """One document for these classes: any of the roots (each described by where it is sent;
    a tuple of classes: any of them), every class they use in "$defs", sorted by name."""
    writer = SchemaWriter()
    any_of = [{**writer.of(_union(root)), "description": where} for where, root in roots.items()]
    return {
        "$schema": DIALECT,
        "title": title,
        "description": description,
        "anyOf": any_of,
        "$defs": dict(sorted(writer.definitions.items())),
    }


def _union(root: type | tuple[type, ...]) -> Any:
    return Union[root] if isinstance(root, tuple) else root  # noqa: UP007 - built from a tuple


def _described(cls: type) -> dict[str, Any]:
    description = inspect.getdoc(cls)
    if not description or description.startswith(f"{cls.__name__}("):  # dataclass's own
        return {}
    return {"description": description}


def _without_none(annotation: Any) -> Any:
    items = [item for item in get_args(annotation) if item is not type(None)]
    return Union[tuple(items)] if len(items) > 1 else items[0]  # noqa: UP007 - built from a tuple


def _required(field: dataclasses.Field[Any]) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
