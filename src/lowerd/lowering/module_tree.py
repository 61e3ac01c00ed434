"""A module tree's fingerprint, per module path, and the subtrees an edit changed.

What decides a module's ops, as far as its own object shows it: its class (qualified name, and
the code of every function its class and bases define but __init__, with the code of the
functions those name in their globals, line numbers left out), its own attributes that are not
modules, parameters or buffers (a float's value, a function's code, an object's type), its
children's names, and its own parameters' and buffers' shapes and dtypes. Not their values: which
ops a backend takes depends on shapes and dtypes, and a weight-only edit leaves the last build's
refusals standing (reading 500 MB of weights to hash them would cost more than the report).

Each module path gets a short digest of those facts (DIGEST_BYTES), kept in the build record
(project/build_state.py TargetState.module_digests), so that the next build of the target finds
the deepest subtrees an edit changed (changed_roots) before it exports the whole program
(lowering/edited_region.py).
"""

from __future__ import annotations

import hashlib
import types
from collections.abc import Iterator, Mapping
from typing import Any

# 8 bytes per module path (16 hex characters): a 32-layer Llama's ~420 modules in ~20 kB.
DIGEST_BYTES = 8
# The attributes torch.nn.Module keeps for itself (hooks, the parameter dicts): not the model's.
_TORCH_OWN = "_"
_SIMPLE = (type(None), bool, int, float, complex, str, bytes)
# What a class defines that makes its modules, not their ops: what it made is digested instead
# (attributes, children, parameter shapes), so that a submodule swapped in __init__ is the
# region, not its parent.
_BUILDS_ONLY = frozenset({"__init__", "__doc__"})


def module_digests(module: Any) -> dict[str, str]:
    """Module path ("" for the root) -> digest of what the module itself decides."""
    code = _CodeDigests()
    return {path: _module_digest(child, code) for path, child in module.named_modules()}


def nesting(module: Any) -> int:
    """How many levels of submodules lie below `module`, on its deepest path (0: it has no
    children). Walked level by level, not recursively: the chains it measures are those past
    Python's recursion limit. A module met again (shared, or its own ancestor) counts once."""
    seen, level, depth = {id(module)}, [module], 0
    while True:
        below = {id(child): child for parent in level for child in parent.children()}
        level = [child for key, child in below.items() if key not in seen]
        if not level:
            return depth
        seen.update(below)
        depth += 1


def changed_roots(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """The paths of the deepest subtrees whose root changed (or is new), none inside another;
    [""] when the root itself did. A removed module changed its parent (its children's names)."""
    changed = sorted(path for path, digest in after.items() if before.get(path) != digest)
    roots: list[str] = []
    for path in changed:
        if not any(root == "" or inside(path, root) for root in roots):
            roots.append(path)
    return roots


def inside(path: str, root: str) -> bool:
    """Whether module `path` is `root` or under it."""
    return path == root or path.startswith(root + ".")


def _module_digest(module: Any, code: _CodeDigests) -> str:
    facts = hashlib.blake2b(digest_size=DIGEST_BYTES)
    kind = type(module)
    facts.update(f"{kind.__module__}.{kind.__qualname__}\0".encode())
    facts.update(code.of_class(kind).encode())
    for name, value in sorted(vars(module).items()):
        if not name.startswith(_TORCH_OWN) and name != "training":
            facts.update(f"{name}={code.of_value(value)}\0".encode())
    facts.update(("children:" + ",".join(module._modules) + "\0").encode())
    for name, tensor in _own_tensors(module):
        shape = "x".join(str(size) for size in tensor.shape)
        facts.update(f"{name}:{shape}:{tensor.dtype}\0".encode())
    return facts.hexdigest()


def _own_tensors(module: Any) -> Iterator[tuple[str, Any]]:
    for group in (module._parameters, module._buffers):
        for name, tensor in group.items():
            if tensor is not None:
                yield name, tensor


class _CodeDigests:
    """Digests of classes and functions, each computed once per tree (a Llama's 32 layers share
    their classes)."""

    def __init__(self) -> None:
        self._classes: dict[type, str] = {}
        self._code: dict[types.CodeType, str] = {}

    def of_class(self, kind: type) -> str:
        if kind not in self._classes:
            facts = hashlib.blake2b(digest_size=DIGEST_BYTES)
            for base in kind.__mro__:
                if base.__module__.startswith("torch.nn"):
                    break  # torch's own Module machinery: the same in every build
                for name, member in sorted(vars(base).items()):
                    if name in _BUILDS_ONLY:
                        continue
                    facts.update(f"{base.__qualname__}.{name}={self.of_value(member)}\0".encode())
            self._classes[kind] = facts.hexdigest()
        return self._classes[kind]

    def of_value(self, value: Any) -> str:
        """A non-module attribute as it decides the ops: a literal by value, a function by its
        code, anything else by its type (a tensor by shape and dtype)."""
        if isinstance(value, _SIMPLE):
            return repr(value)
        if isinstance(value, tuple | list):
            return "[" + ",".join(self.of_value(item) for item in value) + "]"
        if isinstance(value, frozenset | set):  # in sorted order: str hashes vary by process
            return "{" + ",".join(sorted(self.of_value(item) for item in value)) + "}"
        if isinstance(value, dict):
            items = sorted(f"{key!r}:{self.of_value(item)}" for key, item in value.items())
            return "{" + ",".join(items) + "}"
        if isinstance(value, type):
            return f"class {value.__module__}.{value.__qualname__}"
        function = getattr(value, "__func__", value)  # a bound method, classmethod, staticmethod
        if isinstance(function, staticmethod | classmethod):
            function = function.__func__
        if isinstance(function, types.FunctionType):
            return self._function(function)
        if isinstance(value, property) and value.fget is not None:
            return "property:" + self.of_value(value.fget)
        shape = getattr(value, "shape", None)
        dtype = getattr(value, "dtype", None)
        kind = type(value)
        return f"{kind.__module__}.{kind.__qualname__}{tuple(shape or ())}{dtype or ''}"

    def _function(self, function: types.FunctionType) -> str:
        return self._code_digest(function.__code__, function.__globals__)

    def _code_digest(self, code: types.CodeType, scope: Mapping[str, Any]) -> str:
        if code in self._code:
            return self._code[code]
        self._code[code] = "recursive"  # a function that calls itself
        facts = hashlib.blake2b(digest_size=DIGEST_BYTES)
        facts.update(code.co_code)
        facts.update(repr((code.co_names, code.co_varnames, code.co_freevars)).encode())
        for constant in code.co_consts:
            if isinstance(constant, types.CodeType):
                facts.update(self._code_digest(constant, scope).encode())
            else:
                facts.update(self.of_value(constant).encode())
        for name in code.co_names:  # the functions it calls by global name
            called = scope.get(name)
            if isinstance(called, types.FunctionType):
                facts.update(f"{name}:{self._function(called)}".encode())
        self._code[code] = facts.hexdigest()
        return self._code[code]
