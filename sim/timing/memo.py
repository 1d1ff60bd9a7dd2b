"""`IndexMemo`: floats memoised by a small non-negative integer (token rows, a batch size), for the
timing models' building blocks that the event loop asks for at every step (compiled: sim/native.py).

A list indexed by the integer, NaN where nothing is stored yet: in compiled code a lookup is a bounds
check and an unboxing, where a dict keyed by the same int boxes it, hashes it and compares it on
every call. Keys are bounded by what a step can hold (its token budget, the largest decode batch),
so the list stays small; it grows to the largest key stored.
"""

from __future__ import annotations

import math
from typing import Final

NOT_STORED: Final = math.nan


class IndexMemo:
    """Values by int key; `get` answers NaN (test with `v != v`) for a key not stored (a negative key
    is never stored: the caller computes it each time)."""

    __slots__ = ("_values",)

    def __init__(self) -> None:
        self._values: list[float] = []

    def get(self, key: int) -> float:
        values = self._values
        if 0 <= key < len(values):
            return values[key]
        return NOT_STORED

    def put(self, key: int, value: float) -> None:
        if key < 0:
            return
        values = self._values
        if key >= len(values):
            values.extend([NOT_STORED] * (key + 1 - len(values)))
        values[key] = value

    def __len__(self) -> int:
        """Keys stored."""
        return sum(1 for v in self._values if v == v)
