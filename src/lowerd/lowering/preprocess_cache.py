"""Serve backends' preprocess from the blob cache while ExecuTorch lowers.

Every ExecuTorch lowering path finds a backend by class name among BackendDetails.__subclasses__()
and calls the class attribute `preprocess` (or `preprocess_multimethod`, where a backend overrides
it). Subclassing a backend is refused, so lowerd wraps those attributes for the duration of a build
and puts them back afterwards. The key is computed before the original runs, because preprocess
mutates its copy of the program.

That copy is made only for a program preprocess runs on. ExecuTorch deep-copies every partition's
program before the backend's preprocess_multimethod ("in case backends change graph inside
preprocess", `copy_exported_program_for_preprocess`, backend_api.py), and the copy is read by
preprocess alone; on a hit it is read by nothing (the key is the same read of either: a deep copy
has the same content). So while the wrappers are installed, each wrapped backend that inherits
BackendDetails' copy hands over the program itself, remembered as uncopied, and a miss (or a run
the cache cannot serve) deep-copies it right before preprocess runs, as the partition's only
preprocess. Nothing writes the partitions' programs between the two moments (the other
partitions' preprocess runs on copies of their own), so the copy preprocess gets is the one
ExecuTorch would have made. An edit that hits every partition but one copies one program, not
every one (each copy holds the partition's weights).
"""

from __future__ import annotations

import copy
import hashlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult

from lowerd.cache.store import BlobStore
from lowerd.lowering.partition_key import Unkeyable, key_details
from lowerd.lowering.preprocess_codec import NotPlainData, decode_results, encode_results
from lowerd.lowering.rebase import REBASABLE_BACKENDS, CannotRebase, rebase
from lowerd.lowering.shared_passes import SharedPasses
from lowerd.project.key_summary import KeySummary

# hit: served as stored; rebased: served with its debug handles renumbered; miss: preprocessed
# and stored; uncached: preprocessed, and not storable (or the cache is off).
Outcome = Literal["hit", "rebased", "miss", "uncached"]
# preprocess_multimethod's arguments and answer: per method, a list (one per partition).
ProgramsByMethod = dict[str, list[Any]]
SpecsByMethod = dict[str, list[list[Any]]]
ResultsByMethod = dict[str, list[PreprocessResult]]
# When a preprocess call began: perf_counter and process_time.
Started = tuple[float, float]


@dataclass
class PreprocessRecord:
    """One preprocess call: which blob it produced and whether the cache served it."""

    backend: str
    key: str | None
    outcome: Outcome
    seconds: float
    blob_digests: list[str]
    note: str | None = None
    # What the build record keeps of the key, so the next build can say why it missed.
    key_summary: KeySummary | None = None
    # A miss whose passes were shared with an earlier partition of the same structure.
    shared: bool = False
    cpu_seconds: float = 0.0


@dataclass
class PreprocessCache:
    store: BlobStore | None
    records: list[PreprocessRecord] = field(default_factory=list)
    on_preprocess: Callable[[PreprocessRecord], None] | None = None
    # Repeated layers: misses that differ from an earlier one only in their weights.
    sharing: SharedPasses = field(default_factory=SharedPasses)
    _inside_multimethod: bool = False
    copies: int = 0  # programs deep-copied for a preprocess that ran (ExecuTorch copies all)
    # The programs handed over uncopied, by id (each kept alive, so no other object takes its id).
    _uncopied: dict[int, Any] = field(default_factory=dict)
    _digests: dict[int, tuple[bytes, str]] = field(default_factory=dict)
    _by_digest: dict[str, PreprocessRecord] = field(default_factory=dict)

    @property
    def hits(self) -> int:
        """Blobs served by the cache, rebased ones included."""
        return self._count("hit", "rebased")

    @property
    def rebased(self) -> int:
        return self._count("rebased")

    @property
    def misses(self) -> int:
        return self._count("miss", "uncached")

    def _count(self, *outcomes: Outcome) -> int:
        return sum(len(r.blob_digests) for r in self.records if r.outcome in outcomes)

    def outcome_of_blob(self, processed_bytes: bytes) -> PreprocessRecord | None:
        """The first call that produced this blob, or None."""
        return self._by_digest.get(self._digest(processed_bytes))

    def _digest(self, blob: bytes) -> str:
        """The blob's sha256, computed once per blob object: the report and the build record
        ask again of each lowered module's processed_bytes, the very object its call returned
        (a .pte's delegate blobs hold its weights: hundreds of MB on an LLM). The entry keeps
        the blob, so its id cannot be another object's while the entry lives."""
        known = self._digests.get(id(blob))
        if known is not None and known[0] is blob:
            return known[1]
        digest = _blob_digest(blob)
        if type(blob) is bytes:  # immutable: a bytearray could change under its digest
            self._digests[id(blob)] = (blob, digest)
        return digest

    @contextmanager
    def installed(self) -> Iterator[PreprocessCache]:
        """Wrap every registered backend's preprocess entry points; restore them on exit."""
        originals: list[tuple[type, str, Any]] = []
        copies_deferred: list[type] = []
        try:
            for backend_cls in BackendDetails.__subclasses__():
                for name in ("preprocess", "preprocess_multimethod"):
                    raw = backend_cls.__dict__.get(name)
                    if raw is None:  # inherited: the base implementation calls our preprocess
                        continue
                    originals.append((backend_cls, name, raw))
                    setattr(backend_cls, name, self._wrap(backend_cls, name, raw))
                # only where a wrapper of ours runs preprocess, which makes the copy
                wrapped = bool(originals) and originals[-1][0] is backend_cls
                if wrapped and _copies_as_executorch_does(backend_cls):
                    copies_deferred.append(backend_cls)
                    backend_cls.copy_exported_program_for_preprocess = classmethod(
                        self._handed_over
                    )
            yield self
        finally:
            for backend_cls in copies_deferred:
                del backend_cls.copy_exported_program_for_preprocess  # type: ignore[attr-defined]
            for backend_cls, name, raw in reversed(originals):
                setattr(backend_cls, name, raw)
            self._uncopied.clear()

    def _handed_over(self, cls: type, program: Any, specs: list[Any]) -> Any:
        """copy_exported_program_for_preprocess, the copy deferred to a preprocess that runs."""
        self._uncopied[id(program)] = program
        return program

    def _isolated(self, programs: list[Any]) -> list[Any]:
        """The programs as preprocess is given them: a program handed over uncopied, deep-copied
        as BackendDetails.copy_exported_program_for_preprocess copies it."""
        given = [copy.deepcopy(p) if self._uncopied.get(id(p)) is p else p for p in programs]
        self.copies += sum(a is not b for a, b in zip(given, programs, strict=True))
        return given

    def _wrap(self, backend_cls: type, name: str, raw: Any) -> Any:
        function = raw.__func__
        backend = backend_cls.__name__
        if name == "preprocess_multimethod":

            def preprocess_multimethod(
                cls: type, programs: ProgramsByMethod, specs: SpecsByMethod
            ) -> ResultsByMethod:
                return self._multimethod(
                    backend, lambda given: function(cls, given, specs), programs, specs
                )

            return classmethod(preprocess_multimethod)

        if isinstance(raw, classmethod):

            def preprocess_classmethod(
                cls: type, program: Any, specs: list[Any]
            ) -> PreprocessResult:
                return self._single(
                    backend, lambda given: function(cls, given, specs), program, specs
                )

            return classmethod(preprocess_classmethod)

        def preprocess_static(program: Any, specs: list[Any]) -> PreprocessResult:
            return self._single(backend, lambda given: function(given, specs), program, specs)

        return staticmethod(preprocess_static)

    def _single(
        self,
        backend: str,
        run: Callable[[Any], PreprocessResult],
        program: Any,
        specs: list[Any],
    ) -> PreprocessResult:
        """One program's preprocess; `run` runs the backend's on the program it is given."""
        if self._inside_multimethod:  # the enclosing multimethod call is cached as a whole
            return run(program)  # (given copies already)
        [result] = self._cached(backend, lambda given: [run(given[0])], [program], [specs])
        return result

    def _multimethod(
        self,
        backend: str,
        run: Callable[[ProgramsByMethod], ResultsByMethod],
        programs: ProgramsByMethod,
        specs: SpecsByMethod,
    ) -> ResultsByMethod:
        methods = list(programs)
        flat_programs = [p for m in methods for p in programs[m]]
        flat_specs = [s for m in methods for s in specs[m]]

        def run_flat(given: list[Any]) -> list[PreprocessResult]:
            remaining = iter(given)
            by_method_given = {m: [next(remaining) for _ in programs[m]] for m in methods}
            self._inside_multimethod = True
            try:
                by_method = run(by_method_given)
            finally:
                self._inside_multimethod = False
            return [r for m in methods for r in by_method[m]]

        flat_results = iter(self._cached(backend, run_flat, flat_programs, flat_specs))
        return {m: [next(flat_results) for _ in programs[m]] for m in methods}

    def _cached(
        self,
        backend: str,
        run: Callable[[list[Any]], list[PreprocessResult]],
        programs: list[Any],
        specs: list[Any],
    ) -> list[PreprocessResult]:
        """The results of `run` (the backend's preprocess of the programs it is given), served
        from the store where it has them; run on the programs as ExecuTorch gives them."""
        started = time.perf_counter(), time.process_time()
        store = self.store

        def run_given() -> list[PreprocessResult]:
            return run(self._isolated(programs))

        if store is None:
            return self._record_run(backend, None, run_given, started, note="cache disabled")
        try:
            key = key_details(backend, programs, specs, stable_naming=backend in REBASABLE_BACKENDS)
        except Unkeyable as why:
            return self._record_run(backend, None, run_given, started, note=str(why))
        digest = key.digest()
        summary = key.details.summary()

        cached, note = self._load(store, digest)
        if cached is not None:
            results, built_with = cached
            try:
                results = rebase(backend, results, built_with, key.handles)
            except CannotRebase as why:
                note = f"cached blob not rebased: {why}"
            else:
                outcome: Outcome = "hit" if built_with == key.handles else "rebased"
                self._record(backend, digest, outcome, started, results, summary=summary)
                return results

        given = self._isolated(programs)
        results, shared = self.sharing.preprocess(backend, key, given, lambda: run(given))
        outcome, lost = self._stored(store, digest, results, key.handles)
        self._record(
            backend, digest, outcome, started, results, lost or note, summary, shared=shared
        )
        return results

    def _stored(
        self, store: BlobStore, digest: str, results: list[PreprocessResult], handles: Any
    ) -> tuple[Outcome, str | None]:
        """Put fresh results in the store: "miss" if kept, else "uncached" and why not. A cache
        that cannot take them never fails a build: the blob is simply not stored."""
        try:
            payload = encode_results(results, handles)
        except NotPlainData as why:
            return "uncached", str(why)
        problems = len(store.problems)
        if not store.put(digest, payload):
            return "uncached", _store_note(store, problems, store.corrupt_removed) or "not stored"
        return "miss", None

    def _load(
        self, store: BlobStore, digest: str
    ) -> tuple[tuple[list[PreprocessResult], tuple[int, ...]] | None, str | None]:
        """The cached results and the handles they were built with, or why there are none."""
        problems, corrupt = len(store.problems), store.corrupt_removed
        payload = store.get(digest)
        if payload is None:
            return None, _store_note(store, problems, corrupt)
        try:
            return decode_results(payload), None
        except Exception as why:  # digest-valid but undecodable: preprocess again
            return None, f"cached entry not decodable: {why}"

    def _record_run(
        self,
        backend: str,
        key: str | None,
        run: Callable[[], list[PreprocessResult]],
        started: Started,
        note: str,
    ) -> list[PreprocessResult]:
        results = run()
        self._record(backend, key, "uncached", started, results, note=note)
        return results

    def _record(
        self,
        backend: str,
        key: str | None,
        outcome: Outcome,
        started: Started,
        results: list[PreprocessResult],
        note: str | None = None,
        summary: KeySummary | None = None,
        shared: bool = False,
    ) -> None:
        record = PreprocessRecord(
            backend=backend,
            key=key,
            outcome=outcome,
            seconds=time.perf_counter() - started[0],
            blob_digests=[self._digest(r.processed_bytes) for r in results],
            note=note,
            key_summary=summary,
            shared=shared,
            cpu_seconds=time.process_time() - started[1],
        )
        self.records.append(record)
        for digest in record.blob_digests:
            self._by_digest.setdefault(digest, record)
        if self.on_preprocess:
            self.on_preprocess(record)


def _copies_as_executorch_does(backend_cls: type) -> bool:
    """Whether the backend's copy for preprocess is BackendDetails' deep copy (a backend may
    copy otherwise: its own runs)."""
    own = backend_cls.copy_exported_program_for_preprocess.__func__  # type: ignore[attr-defined]
    return own is BackendDetails.copy_exported_program_for_preprocess.__func__


def _blob_digest(processed_bytes: bytes) -> str:
    return hashlib.sha256(processed_bytes).hexdigest()


def _store_note(store: BlobStore, problems_before: int, corrupt_before: int) -> str | None:
    """What went wrong in the store since those counts were taken: its I/O errors are noted,
    never raised, so this is how a record says why the cache did not serve or keep a blob."""
    new = [str(problem) for problem in store.problems[problems_before:]]
    if store.corrupt_removed > corrupt_before:
        new.append("a corrupt cache entry was removed")
    return "; ".join(new) or None
