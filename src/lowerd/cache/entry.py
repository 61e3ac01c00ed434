"""The entry format every tier stores, local file or redis value: bytes bound to their name.

An entry is MAGIC, the sha256 of the rest, then the rest: a frame (schema version, memo kind,
key) and the payload. The digest covers the kind and the key, so an entry read under another
name than it was written under (a file copied over another's path, a redis value swapped to
another key) fails the check like a damaged one.
"""

from __future__ import annotations

import hashlib
import re
import struct

MAGIC = b"LWB2"
# Entries of an older format: misses that are not corruption (an upgrade, not an attack).
OLD_MAGICS = (b"LWB1",)
SCHEMA = 2
DEFAULT_KIND = "blob"
_DIGEST_SIZE = hashlib.sha256().digest_size
_HEADER_SIZE = len(MAGIC) + _DIGEST_SIZE
# After the digest: schema version, then the lengths of the kind and the key that follow it.
_FRAME = struct.Struct(">HHH")
_KEY = re.compile(r"[0-9a-f]{16,128}")
_KIND = re.compile(r"[a-z][a-z0-9_]{0,31}")
# The most an entry holds besides its payload: the header and a frame of the longest names.
MAX_HEAD_SIZE = _HEADER_SIZE + _FRAME.size + 32 + 128


def check_name(key: str, kind: str) -> None:
    """Raise ValueError unless key is 16-128 lowercase hex digits and kind a short identifier:
    both become part of a file name or a redis key."""
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise ValueError(f"invalid cache key {key!r}: expected 16 to 128 lowercase hex digits")
    if not isinstance(kind, str) or not _KIND.fullmatch(kind):
        raise ValueError(f"invalid memo kind {kind!r}: expected a lowercase identifier")


def entry_head(key: str, kind: str, payload: bytes) -> bytes:
    """Everything an entry holds before its payload (written as two parts, never copied)."""
    frame = entry_frame(key, kind)
    digest = hashlib.sha256(frame)
    digest.update(payload)
    return MAGIC + digest.digest() + frame


def entry_digest(data: bytes) -> bytes | None:
    """The digest an entry claims for itself (unchecked); None if data is no entry of ours."""
    if len(data) < _HEADER_SIZE or not data.startswith(MAGIC):
        return None
    return data[len(MAGIC) : _HEADER_SIZE]


def decode_entry(data: bytes, key: str, kind: str) -> bytes | None:
    """The payload if data is a whole, unaltered entry stored under key for kind; else None."""
    if len(data) < _HEADER_SIZE or not data.startswith(MAGIC):
        return None
    body = memoryview(data)[_HEADER_SIZE:]
    if hashlib.sha256(body).digest() != data[len(MAGIC) : _HEADER_SIZE]:
        return None
    # The digest matches, so the frame is as written: it only remains to ask whose entry it is.
    frame = entry_frame(key, kind)
    if bytes(body[: len(frame)]) != frame:
        return None
    return bytes(body[len(frame) :])


def entry_frame(key: str, kind: str) -> bytes:
    """The bytes that name an entry's kind and key (with the schema), as its digest covers them."""
    kind_bytes, key_bytes = kind.encode(), key.encode()
    return _FRAME.pack(SCHEMA, len(kind_bytes), len(key_bytes)) + kind_bytes + key_bytes
