"""Random streams: one numpy Generator per named subsystem, derived from (seed, name).

Extra draws in one subsystem never shift another (BLIS's partitioned RNG); nothing global.
The name is hashed with a stable hash (not Python's salted `hash()`), so runs are identical
across processes.
"""

from __future__ import annotations

import hashlib

import numpy as np


def stream_seed(seed: int, name: str) -> int:
    digest = hashlib.blake2b(f"{seed}:{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


class RngStreams:
    """Lazily created named streams; create once per run and pass it down."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._streams: dict[str, np.random.Generator] = {}

    def get(self, name: str) -> np.random.Generator:
        if name not in self._streams:
            self._streams[name] = np.random.default_rng(stream_seed(self.seed, name))
        return self._streams[name]
