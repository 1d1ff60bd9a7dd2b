"""`At`: a SimPy timeout's delay that lands on an absolute time exactly (sim.cluster.simpy_loop).

SimPy schedules a timeout at `now + delay`, so a call due at `time_s` would be scheduled at
`now + (time_s - now)`, which in floating point is not always `time_s` (0.1 + (0.3 - 0.1) !=
0.3), and some times cannot be reached by any float delay (the sum rounds past them). The own
loop schedules at `time_s` itself; to keep the same times, and so the same order and the same
bytes, the delay is a float (its value the difference, for SimPy's `delay < 0` check) whose
reflected addition returns the time asked: Python calls a right operand's `__radd__` first when its
type is a subclass of the left operand's (float), so SimPy's `now + delay` gives `time_s`.
No SimPy internals are touched: the timeout is an ordinary one, made through `env.timeout`.
Not compiled (sim/native.py): a compiled class cannot subclass float.
"""

from __future__ import annotations


class At(float):
    """The delay from `now_s` to `time_s` (>= now_s); `now_s + At(...)` is `time_s` exactly."""

    def __new__(cls, time_s: float, now_s: float) -> At:
        self = super().__new__(cls, time_s - now_s)
        self.time_s = time_s
        return self

    def __radd__(self, now_s: float) -> float:
        return self.time_s

    __add__ = __radd__  # `delay + now` too, whichever order SimPy adds them in
