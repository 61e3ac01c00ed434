"""Signed team entries: who may decide the bytes a remote tier serves.

An entry's sha256 (cache/entry.py) proves it whole and stored under its name, but anyone who can
write the redis can recompute it. A team that wants more gives its writers (CI) an ed25519
signing key and every reader the matching verify key. A writer then puts

    SIGNED_MAGIC, the ed25519 signature (64 bytes), the entry

where the signature covers the entry's kind, key and content digest: a signed entry cannot be
replayed under another name, and only the signing key's holder can make one. A reader with the
verify key takes nothing else; a reader without it takes the entry inside either form.

Key files: PEM (`openssl genpkey -algorithm ed25519`, `openssl pkey -pubout`) or OpenSSH's
(`ssh-keygen -t ed25519`), unencrypted. A signing key that its owner's group or others may read
or write is refused, as ssh refuses one; so is a verify key that others may write.
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from .entry import entry_digest, entry_frame

if TYPE_CHECKING:  # imported where used: a build without keys never loads cryptography
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

SIGNED_MAGIC = b"LWS1"
_SIGNATURE_SIZE = 64
SIGNED_HEAD_SIZE = len(SIGNED_MAGIC) + _SIGNATURE_SIZE
# Domain separation: these bytes are signed for this purpose and no other.
_CONTEXT = b"lowerd cache entry signature v1\0"
_MAX_KEY_FILE = 64 * 1024
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC

# Why a value was not taken from a tier that wants signatures.
# A bad signature: made with another key, or for another entry's name (a replayed value).
Refusal = Literal["unsigned", "with a bad signature"]
REFUSALS: tuple[Refusal, ...] = ("unsigned", "with a bad signature")


class KeyFileError(ValueError):
    """A key file that cannot be used, in words that follow its config key or variable."""


@dataclass(frozen=True)
class EntrySigner:
    """The writer's half: signs each entry it puts."""

    key: Ed25519PrivateKey

    def sign(self, key: str, kind: str, entry: bytes) -> bytes:
        """The value to store: the entry with its signature in front."""
        return SIGNED_MAGIC + self.key.sign(_message(key, kind, entry)) + entry

    def verifier(self) -> EntryVerifier:
        """A writer verifies what it reads with its own public key."""
        return EntryVerifier(self.key.public_key())


@dataclass(frozen=True)
class EntryVerifier:
    """The reader's half: takes only entries signed by the signing key for their own name."""

    key: Ed25519PublicKey

    @property
    def fingerprint(self) -> str:
        """`SHA256:<base64>` of the raw public key, as `ssh-keygen -l` shows an ed25519 key's."""
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

        blob = self.key.public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).split()[1]
        digest = hashlib.sha256(base64.b64decode(blob)).digest()
        return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")

    def open(self, key: str, kind: str, value: bytes) -> bytes | Refusal:
        """The entry inside value if the signing key signed it for (key, kind); else why not."""
        from cryptography.exceptions import InvalidSignature

        if not value.startswith(SIGNED_MAGIC):
            return "unsigned"
        entry = value[SIGNED_HEAD_SIZE:]
        try:
            self.key.verify(value[len(SIGNED_MAGIC) : SIGNED_HEAD_SIZE], _message(key, kind, entry))
        except InvalidSignature:
            return "with a bad signature"
        return entry


def without_signature(value: bytes) -> bytes:
    """The entry inside a value, signed or not, for a reader that does not check signatures."""
    return value[SIGNED_HEAD_SIZE:] if value.startswith(SIGNED_MAGIC) else value


def load_signing_key(path: Path) -> EntrySigner:
    """The ed25519 private key in path; KeyFileError if others may read it or it is none."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import (
        load_pem_private_key,
        load_ssh_private_key,
    )

    data = _read_key_file(
        path,
        0o077,
        "is open to its group or others",
        "chmod 600 it: whoever reads it can sign cache entries",
    )
    load = load_ssh_private_key if b"OPENSSH PRIVATE KEY" in data else load_pem_private_key
    try:
        key = load(data, password=None)
    except (ValueError, TypeError) as error:
        raise KeyFileError(f"{path} is no unencrypted private key ({_first_line(error)})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"{path} is a {type(key).__name__.removeprefix('_')}, not ed25519")
    return EntrySigner(key)


def load_verify_key(path: Path) -> EntryVerifier:
    """The ed25519 public key in path; KeyFileError if others may write it or it is none."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import (
        load_pem_public_key,
        load_ssh_public_key,
    )

    data = _read_key_file(
        path,
        0o022,
        "can be changed by its group or others",
        "chmod 644 it: whoever changes it decides what is trusted",
    )
    if b"PRIVATE KEY" in data:
        raise KeyFileError(
            f"{path} is a private key: give readers its public half"
            " (`openssl pkey -in KEY -pubout`), so that they cannot sign"
        )
    load = load_pem_public_key if data.lstrip().startswith(b"-----") else load_ssh_public_key
    try:
        key = load(data)
    except (ValueError, TypeError) as error:
        raise KeyFileError(f"{path} is no public key ({_first_line(error)})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise KeyFileError(f"{path} is a {type(key).__name__.removeprefix('_')}, not ed25519")
    return EntryVerifier(key)


def _message(key: str, kind: str, entry: bytes) -> bytes:
    # The frame names the kind and the key; the digest covers them and the payload. A value
    # too short to hold a digest is signed as empty, and then fails its own check anyway.
    return _CONTEXT + entry_frame(key, kind) + (entry_digest(entry) or b"")


def _read_key_file(path: Path, forbidden: int, problem: str, fix: str) -> bytes:
    """The bytes of a regular file that its mode keeps safe; never blocks on a FIFO."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as error:
        raise KeyFileError(f"{path} cannot be read ({error.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise KeyFileError(f"{path} is not a regular file")
        if info.st_mode & forbidden:
            mode = stat.S_IMODE(info.st_mode)
            raise KeyFileError(f"{path} {problem} (mode {mode:04o}); {fix}")
        data = os.read(fd, _MAX_KEY_FILE + 1)
    finally:
        os.close(fd)
    if len(data) > _MAX_KEY_FILE:
        raise KeyFileError(f"{path} is larger than a key file ({_MAX_KEY_FILE} bytes at most)")
    return data


def _first_line(error: Exception) -> str:
    return (str(error).splitlines() or [type(error).__name__])[0]
