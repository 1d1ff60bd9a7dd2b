"""When imported sessions start. Public agent traces record each session's timeline relative to its
own first request, not wall-clock starts, so the start of each session is a choice made on import:

- `zero` (default): every session at 0 s, as the source's timelines are written. A replay then sends
  every session at once (a burst, then a long tail): right for per-session questions, wrong for load.
- `poisson:RATE_PER_H`: sessions arrive as a Poisson process of RATE_PER_H sessions an hour, in file
  order (the first at 0 s).
- `spread:HOURS`: starts drawn uniformly over [0, HOURS h), sorted, given in file order.

Draws come from `seed`, so the same choice and seed give the same file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sim.errors import InputError
from sim.units import HOUR_S

KINDS = ("zero", "poisson:RATE_PER_H", "spread:HOURS")


@dataclass
class SessionStarts:
    kind: str = "zero"
    value: float = 0.0
    seed: int = 0
    _next_s: float = field(default=0.0, init=False)
    _spread_s: np.ndarray | None = field(default=None, init=False)
    _rng: np.random.Generator = field(init=False)

    def __post_init__(self) -> None:
        self._rng = np.random.default_rng(self.seed)

    @classmethod
    def parse(cls, text: str, seed: int = 0) -> SessionStarts:
        """From `zero`, `poisson:RATE_PER_H` or `spread:HOURS` (InputError naming the option otherwise)."""
        kind, _, arg = text.strip().partition(":")
        if kind == "zero" and not arg:
            return cls("zero", 0.0, seed)
        if kind in ("poisson", "spread"):
            try:
                value = float(arg)
            except ValueError:
                value = float("nan")
            if np.isfinite(value) and value > 0:
                return cls(kind, value, seed)
        raise InputError("bad session start rule", where="--session-start", value=text,
                         allowed=", ".join(KINDS) + " (a positive number after the colon)")  # fmt: skip

    @property
    def needs_count(self) -> bool:
        """Whether the number of sessions must be known first (`spread`)."""
        return self.kind == "spread"

    def set_count(self, sessions: int) -> None:
        """For `spread`: draw the sorted starts of `sessions` sessions."""
        self._spread_s = np.sort(self._rng.uniform(0.0, self.value * HOUR_S, sessions))

    def next_s(self) -> float:
        """The start of the next session in file order (to the microsecond)."""
        return round(self._next(), 6)

    def _next(self) -> float:
        if self.kind == "poisson":
            start = self._next_s
            self._next_s += float(self._rng.exponential(HOUR_S / self.value))
            return start
        if self.kind == "spread":
            if self._spread_s is None or not len(self._spread_s):
                raise RuntimeError("spread starts need set_count() with the number of sessions")
            start, self._spread_s = float(self._spread_s[0]), self._spread_s[1:]
            return start
        return 0.0
