"""Serve torchao's weight quantization from the content-addressed store while a target's modules
are quantized (its entry, and a declared torchao scheme).

torchao's `quantize_` with Int8DynamicActivationIntxWeightConfig (8da4w, 8da8w) or
IntxWeightOnlyConfig makes each linear's weight with `IntxUnpackedToInt8Tensor.from_hp(weight,
block_size, target_dtype, mapping_type=..., activation_quantization=...,
intx_choose_qparams_algorithm=..., ...)`: a pure function of the float weight and those
arguments, whose last step is `IntxUnpackedToInt8Tensor(qdata, scale, zero_point, target_dtype,
block_size, weight.dtype, activation_quantization)`. With HQQ (optimum's "hqq_scale_only") the
function is an iterative fit, seconds per hundred million weights; an edit elsewhere in the model
leaves most weights as they were. So each call is served from the store (memo kind "intx"), keyed
by every argument (a tensor by dtype, shape, strides and bytes) with the class, torch's and
torchao's versions, the default dtype and the thread count, and the value, the three tensors, is
put back through that same constructor: the same tensor, bit for bit (the .pte equals stock's,
tested). Only what is shown exact is stored: the library's own class (a subclass may compute
otherwise), arguments of known kinds, and a result the constructor would rebuild as it is (its
attributes the arguments', its tensors plain, contiguous CPU tensors of their own storage).
"""

from __future__ import annotations

import enum
import hashlib
import importlib
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from lowerd.cache.store import BlobStore
from lowerd.lowering.qparam_memo import torchao_version
from lowerd.lowering.tensor_codec import decode_tensors, encode_tensors

MEMO_KIND = "intx"
FORMAT_VERSION = 1
_MODULE = "torchao.quantization.quantize_.workflows.intx.intx_unpacked_to_int8_tensor"
_CLASS = "IntxUnpackedToInt8Tensor"
FROM_HP = "from_hp"
_TENSORS = ("qdata", "scale", "zero_point")


class _Unkeyable(Exception):
    """An argument of a kind the key cannot hold: the call runs unmemoized."""


@dataclass
class IntxMemo:
    store: BlobStore | None
    hits: int = 0
    misses: int = 0

    def counts(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses}

    @contextmanager
    def installed(self) -> Iterator[IntxMemo]:
        """IntxUnpackedToInt8Tensor.from_hp served from the store; restored on exit."""
        cls = _tensor_class()
        if self.store is None or cls is None:
            yield self
            return
        original = cls.__dict__[FROM_HP]
        setattr(cls, FROM_HP, classmethod(self._wrap(cls, original.__func__)))
        try:
            yield self
        finally:
            setattr(cls, FROM_HP, original)

    def _wrap(self, library: type, from_hp: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(from_hp)

        def memoized_from_hp(cls: type, *args: Any, **kwargs: Any) -> Any:
            if cls is not library:
                return from_hp(cls, *args, **kwargs)
            bound = signature.bind(cls, *args, **kwargs)
            bound.apply_defaults()
            arguments = dict(list(bound.arguments.items())[1:])  # without cls
            if any(isinstance(v, torch.Tensor) for n, v in arguments.items() if n != "hp_tensor"):
                return from_hp(cls, *args, **kwargs)  # custom qparams: kept as the caller's
            try:
                key = call_key(cls, arguments)
            except _Unkeyable:
                return from_hp(cls, *args, **kwargs)
            return self._quantized(cls, key, arguments, lambda: from_hp(cls, *args, **kwargs))

        return memoized_from_hp

    def _quantized(
        self, cls: type, key: str, arguments: dict[str, Any], compute: Callable[[], Any]
    ) -> Any:
        assert self.store is not None
        stored = self.store.get(key, MEMO_KIND)
        tensors = decode_tensors(stored) if stored is not None else None
        if tensors is not None and len(tensors) == len(_TENSORS):
            self.hits += 1
            return _rebuilt(cls, tensors, arguments)
        made = compute()
        self.misses += 1
        if _rebuildable(cls, made, arguments):
            encoded = encode_tensors([getattr(made, name) for name in _TENSORS])
            if encoded is not None:
                self.store.put(key, encoded, MEMO_KIND)
        return made


def call_key(cls: type, arguments: dict[str, Any]) -> str:
    """The digest of every input of one from_hp call; raises _Unkeyable for an argument of an
    unknown kind."""
    digest = hashlib.sha256()
    for part in (
        f"format {FORMAT_VERSION}",
        f"{cls.__module__}.{cls.__qualname__}",
        f"torch {torch.__version__}",
        f"torchao {torchao_version()}",
        f"default dtype {torch.get_default_dtype()}",
        f"threads {torch.get_num_threads()}",
    ):
        digest.update(part.encode() + b"\0")
    for name, value in arguments.items():
        digest.update(name.encode() + b"=")
        _digest_value(digest, value)
    return digest.hexdigest()


def _digest_value(digest: Any, value: Any) -> None:
    if type(value) in (torch.Tensor, torch.nn.Parameter):
        _digest_tensor(digest, value)
    elif value is None or type(value) in (bool, int, float, str):
        digest.update(f"{type(value).__name__}:{value!r}\0".encode())
    elif isinstance(value, torch.dtype):
        digest.update(f"dtype:{value}\0".encode())
    elif isinstance(value, enum.Enum):
        kind = type(value)
        digest.update(f"enum:{kind.__module__}.{kind.__qualname__}.{value.name}\0".encode())
    elif type(value) in (tuple, list):
        digest.update(f"{type(value).__name__}[{len(value)}](".encode())
        for item in value:
            _digest_value(digest, item)
        digest.update(b")\0")
    else:
        raise _Unkeyable(type(value).__name__)


def _digest_tensor(digest: Any, tensor: torch.Tensor) -> None:
    if tensor.device.type != "cpu" or tensor.is_conj() or tensor.is_neg():
        raise _Unkeyable("tensor")
    header = (
        f"tensor:{tensor.dtype}:{tuple(tensor.shape)}:{tensor.stride()}:"
        f"{tensor.requires_grad}:{tensor.numel()}\0"
    )
    digest.update(header.encode())
    flat = tensor.detach().contiguous().reshape(-1)
    if flat.numel():
        digest.update(flat.view(torch.uint8).numpy().data)  # hashed in place, not copied


def _rebuildable(cls: type, made: Any, arguments: dict[str, Any]) -> bool:
    """Whether _rebuilt would give back exactly `made`: its class, attributes and tensors."""
    if type(made) is not cls:
        return False
    hp_tensor = arguments.get("hp_tensor")
    expected = {
        "target_dtype": arguments.get("target_dtype"),
        "block_size": arguments.get("block_size"),
        "dtype": getattr(hp_tensor, "dtype", None),
        "activation_quantization": arguments.get("activation_quantization"),
    }
    if any(getattr(made, name, None) != value for name, value in expected.items()):
        return False
    return all(_plain(getattr(made, name, None)) for name in _TENSORS)


def _plain(tensor: Any) -> bool:
    """A plain CPU tensor, contiguous, alone in its storage, outside autograd."""
    if type(tensor) is not torch.Tensor or tensor.device.type != "cpu":
        return False
    whole = tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size()
    return (
        tensor.is_contiguous()
        and tensor.storage_offset() == 0
        and whole
        and not tensor.requires_grad
        and tensor.grad_fn is None
    )


def _rebuilt(cls: type, tensors: tuple[torch.Tensor, ...], arguments: dict[str, Any]) -> Any:
    """from_hp's own last step, with the stored tensors."""
    qdata, scale, zero_point = tensors
    return cls(
        qdata=qdata,
        scale=scale,
        zero_point=zero_point,
        target_dtype=arguments["target_dtype"],
        block_size=arguments["block_size"],
        dtype=arguments["hp_tensor"].dtype,
        activation_quantization=arguments["activation_quantization"],
    )


def _tensor_class() -> type | None:
    """torchao's IntxUnpackedToInt8Tensor, if this torchao has it with from_hp of its own."""
    try:
        module = importlib.import_module(_MODULE)
    except ImportError:
        return None
    cls = getattr(module, _CLASS, None)
    if not isinstance(cls, type) or not isinstance(cls.__dict__.get(FROM_HP), classmethod):
        return None
    required = {"hp_tensor", "block_size", "target_dtype", "activation_quantization"}
    if not required <= set(inspect.signature(cls.__dict__[FROM_HP].__func__).parameters):
        return None
    return cls
