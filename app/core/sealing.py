"""Sealing a user's text for a store whose files the service cannot purge (crypto-shredding,
docs/privacy.md "What stays on disk").

A value is sealed with AES-256-GCM under its user's key (32 random bytes, one per user,
kept in the database's `user_keys`): a fresh 12-byte nonce per value, and associated data
that names where the value belongs (tenant, user, point, field), so a sealed value copied
onto another point or field does not open. Destroying the key makes every copy of the
ciphertext, wherever the store's files left it, unreadable. Pure functions, no I/O.

A value the store must match for equality (a filter) cannot be sealed: it is stored as a
tag instead, a keyed hash of the value (HMAC-SHA-256 under a key derived from the user's,
cut to 128 bits) that the same value under the same key and place always gives, so a
filter tags the value it looks for and matches. Without the key a tag says nothing of its
value beyond which points share it. A sparse vector's term ids are keyed the same way
(`Sealer.term`, 31 bits), so the words of a text cannot be read back from them with a list
of words either.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from app.core import keys

KEY_BYTES = 32
NONCE_BYTES = 12
PREFIX = "s1:"  # the format: a later one gets a new prefix, read beside this one
TAG_PREFIX = "t1:"
KEYED_TERM = 0x80000000  # plain term ids have 31 bits (`app.core.terms.term_id`)


class SealBroken(ValueError):
    """The value does not open under this key and place: another key (the user's was
    replaced or destroyed), another point or field, or altered bytes."""


def new_key() -> bytes:
    return os.urandom(KEY_BYTES)


def place(*parts: str) -> bytes:
    """The associated data naming where a sealed value belongs: injective over its parts
    (`app.core.keys.join`), whatever characters the ids hold."""
    return keys.join(*parts).encode("utf-8", "surrogatepass")


def within(owner: bytes, *parts: str) -> bytes:
    """`place(*owner_parts, *parts)` from `owner = place(*owner_parts)`, for parts that need
    no escaping (point ids are UUIDs, field names ASCII words): without quoting them again,
    which was most of opening a value's time (5.8 of ~9 us, measured)."""
    return b"/".join((owner, *(p.encode("ascii") for p in parts)))


class Sealer:
    """Sealing under one key: its cipher and its tag key made once, for every value of a
    call (a recall opens up to a hundred points' text with it)."""

    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)
        self._tag_key = hmac.digest(key, b"strata filter tags", hashlib.sha256)

    def seal(self, plaintext: bytes, where: bytes) -> str:
        """`plaintext` sealed for the place `where`, as text a JSON payload holds."""
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, plaintext, where)
        return PREFIX + base64.b64encode(nonce + sealed).decode("ascii")

    def open(self, token: str, where: bytes) -> bytes:
        """The plaintext of `seal(plaintext, where)` under this key; `SealBroken` for
        anything else."""
        if not token.startswith(PREFIX):
            raise SealBroken("not a sealed value")
        try:
            raw = base64.b64decode(token[len(PREFIX) :], validate=True)
            if len(raw) < NONCE_BYTES + 16:
                raise SealBroken("too short")
            return self._aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], where)
        except (InvalidTag, ValueError) as exc:
            raise SealBroken(str(exc) or type(exc).__name__) from exc

    def tag(self, value: bytes, where: bytes) -> str:
        """A keyed hash of `value` for equality matching, bound to `where` (which holds no
        NUL: `place` escapes it). Its own key, derived from the sealing key."""
        mac = hmac.digest(self._tag_key, where + b"\x00" + value, hashlib.sha256)[:16]
        return TAG_PREFIX + base64.b64encode(mac).decode("ascii")

    def term(self, term_id: int, where: bytes) -> int:
        """A sparse vector's term id (31 bits, `app.core.terms.term_id`) keyed: 31 bits of
        a keyed hash with the top bit set, so a keyed id is never a plain one."""
        mac = hmac.digest(self._tag_key, where + b"\x00" + term_id.to_bytes(4, "big"), "sha256")
        return KEYED_TERM | (int.from_bytes(mac[:4], "big") & ~KEYED_TERM)


def seal(key: bytes, plaintext: bytes, where: bytes) -> str:
    return Sealer(key).seal(plaintext, where)


def open_sealed(key: bytes, token: str, where: bytes) -> bytes:
    return Sealer(key).open(token, where)


def tag(key: bytes, value: bytes, where: bytes) -> str:
    return Sealer(key).tag(value, where)
