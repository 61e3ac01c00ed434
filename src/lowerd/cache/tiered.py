"""The local store with a remote tier behind it: read through, write through.

A local miss asks the remote; what it returns has been verified under its key (cache/remote.py)
and is verified again when the local store reads its own copy. A fresh entry of any kind (a
partition's blob, a memo) is stored locally and queued for the remote. Everything else — stats,
gc, problems — is the local store's.
"""

from __future__ import annotations

from pathlib import Path

from .entry import DEFAULT_KIND
from .location import DEFAULT_MAX_BYTES
from .remote import RemoteReport, RemoteTier
from .remote_stats import add_remote_counts
from .store import BlobStore


class TieredStore(BlobStore):
    def __init__(
        self, root: Path, remote: RemoteTier, max_bytes: int | None = DEFAULT_MAX_BYTES
    ) -> None:
        super().__init__(root, max_bytes)
        self.remote = remote

    def get(self, key: str, kind: str = DEFAULT_KIND) -> bytes | None:
        payload = super().get(key, kind)
        if payload is None:
            payload = self.remote.get(key, kind)
            if payload is not None:
                super().put(key, payload, kind)  # kept locally; a failure is noted, not fatal
        return payload

    def put(self, key: str, payload: bytes, kind: str = DEFAULT_KIND) -> bool:
        stored = super().put(key, payload, kind)
        self.remote.put_later(key, payload, kind)
        return stored

    def finish_remote(self) -> RemoteReport | None:
        """The remote tier's part in this build, once its uploads are sent or given up; added to
        this machine's totals (`lowerd cache stats`). None if the build never needed it."""
        if not self.remote.used:
            return None
        report = self.remote.finish()
        add_remote_counts(self.root, report.counts)
        return report
