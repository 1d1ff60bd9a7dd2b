"""Stable integer ids from names (never Python's salted `hash()`): the same name gives the same id in
every process, so files written from the same input are byte-identical."""

from __future__ import annotations

import hashlib

# Block-hash namespaces (see traces/README.md): the top bit marks a prefix shared across sessions,
# otherwise the high 31 bits hold the session's namespace and the low 32 bits the source's id.
SHARED_BLOCK_BIT = 1 << 63
NAMESPACE_SHIFT = 32
LOCAL_ID_LIMIT = 1 << 32
NAMESPACE_LIMIT = 1 << 31


def stable_id(*parts: object, bits: int = 63) -> int:
    """A non-negative integer below 2**bits, a pure function of the parts' text."""
    text = "\x1f".join(str(p) for p in parts).encode()
    value = int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")
    return value >> (64 - bits)
