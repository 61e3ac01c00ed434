"""Serve observers' qparam searches from the content-addressed store while a target's entry runs.

A PT2E-quantized model spends most of its build in `convert_pt2e`, and almost all of that in
`HistogramObserver._non_linear_param_search`: once per observer, a pure function of the
observer's histogram, its min/max, its settings and the library's code. An edit elsewhere in the
model leaves most observers' inputs as they were, so their searches are served from the store
(memo kind "qparams"), keyed by every input the search reads, and verified on read like blobs.

Only the library's own observer classes are memoized: a subclass may override the helpers the
search calls, so its instances always search afresh. Wrapped for the duration of the entry only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import msgpack
import torch

from lowerd.cache.store import BlobStore
from lowerd.lowering.tensor_codec import TensorKey, decode_tensors, encode_tensors, tensor_key

MEMO_KIND = "qparams"
FORMAT_VERSION = 1
SEARCH = "_non_linear_param_search"
# Modules whose HistogramObserver runs the search: torchao's PT2E flow, and torch's own older copy.
_OBSERVER_MODULES = ("torchao.quantization.pt2e.observer", "torch.ao.quantization.observer")

Search = Callable[[Any], tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class SearchKeyDetails:
    """Every input of one histogram search; two keys differ iff some input does."""

    format_version: int
    observer: str  # module and qualified name of the observer's exact class
    torch_version: str
    torchao_version: str
    # The search builds scalars with the default dtype and reduces with torch's thread pool.
    default_dtype: str
    num_threads: int
    bins: int
    dst_nbins: int
    histogram: TensorKey
    min_val: TensorKey
    max_val: TensorKey

    def digest(self) -> str:
        packed = msgpack.packb(dataclasses.astuple(self), use_bin_type=True)
        return hashlib.sha256(packed).hexdigest()


@dataclass
class QParamMemo:
    store: BlobStore | None
    hits: int = 0
    misses: int = 0
    _memoized: frozenset[type] = field(default=frozenset(), repr=False)

    def counts(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses}

    @contextmanager
    def installed(self) -> Iterator[QParamMemo]:
        """Wrap each library observer class's search; restore it on exit."""
        if self.store is None:
            yield self
            return
        originals = [(cls, cls.__dict__[SEARCH]) for cls in _observer_classes()]
        self._memoized = frozenset(cls for cls, _ in originals)
        try:
            for cls, search in originals:
                setattr(cls, SEARCH, self._wrap(search))
            yield self
        finally:
            for cls, search in originals:
                setattr(cls, SEARCH, search)

    def _wrap(self, search: Search) -> Search:
        def memoized_search(observer: Any) -> tuple[torch.Tensor, torch.Tensor]:
            if type(observer) not in self._memoized:
                return search(observer)
            return self._search(observer, search)

        return memoized_search

    def _search(self, observer: Any, search: Search) -> tuple[torch.Tensor, torch.Tensor]:
        assert self.store is not None
        key = key_details(observer).digest()
        stored = self.store.get(key, MEMO_KIND)
        if stored is not None:
            decoded = decode_tensors(stored)
            if decoded is not None and len(decoded) == 2:
                self.hits += 1
                return decoded[0], decoded[1]
        found = search(observer)
        self.misses += 1
        encoded = encode_tensors(found)
        if encoded is not None:
            self.store.put(key, encoded, MEMO_KIND)
        return found


def key_details(observer: Any) -> SearchKeyDetails:
    cls = type(observer)
    return SearchKeyDetails(
        format_version=FORMAT_VERSION,
        observer=f"{cls.__module__}.{cls.__qualname__}",
        torch_version=torch.__version__,
        torchao_version=torchao_version(),
        default_dtype=str(torch.get_default_dtype()),
        num_threads=torch.get_num_threads(),
        bins=int(observer.bins),
        dst_nbins=int(observer.dst_nbins),
        histogram=tensor_key(observer.histogram),
        min_val=tensor_key(observer.min_val),
        max_val=tensor_key(observer.max_val),
    )


def _observer_classes() -> list[type]:
    classes = []
    for name in _OBSERVER_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        cls = getattr(module, "HistogramObserver", None)
        if isinstance(cls, type) and SEARCH in cls.__dict__:
            classes.append(cls)
    return classes


@cache
def torchao_version() -> str:
    try:
        return version("torchao")
    except PackageNotFoundError:
        return "none"
