"""The simulator's event loop on SimPy: the same calls, timers and processes as `EventLoop`
(sim.cluster.events), scheduled on a `simpy.Environment` through its public API only.

Why both (issue 31): the own loop is the fast default; this one lets a user's SimPy processes
(sim.extensions) run beside the model on the same clock, and checks the own loop (the same run
gives the same bytes on both: tests/simulator/test_native.py).

How the order stays the same. SimPy orders events by (time, priority, insertion), the own loop by
(time, insertion) with process starts first (SimPy's URGENT initialisation), so one SimPy event per
call, scheduled in the same sequence, keeps the order:
- a call is a `Timeout` carrying the call (its callback runs `fn(arg)`); SimPy schedules a timeout
  at `now + delay`, and the delay is an `At` (sim.cluster.simpy_time) for that sum to be the call's
  time exactly, as the own loop has it;
- a timer cannot be taken back out of SimPy's queue (no public cancel): a move schedules a new
  timeout and stamps the timer with it; the one it replaces still pops, sees a stale stamp and does
  nothing. A move takes a fresh insertion, as in the own loop, so the order is the same;
- `now_s` advances only when a live call runs, as the own loop's does (a stale wake-up later than
  the run's last call leaves it where the own loop would);
- a process is a SimPy process that turns each `Delay` the model's generator yields into a timeout;
- `run(until=signal)` steps the environment (`Environment.step`) until the signal's call has run;
  `run()` until no live call is left (the own loop's heap is empty then).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from typing import Any

import simpy
from mypy_extensions import i64

from sim.cluster.events import Delay, EventLoop, Signal, Timer
from sim.cluster.simpy_time import At


class _Due:
    """The callback of one call's timeout."""

    __slots__ = ("loop", "fn", "arg")

    def __init__(self, loop: SimPyLoop, fn: Callable[[Any], None], arg: Any) -> None:
        self.loop = loop
        self.fn = fn
        self.arg = arg

    def __call__(self, event: Any) -> None:
        loop = self.loop
        loop.live -= 1
        loop.now_s = loop.env.now
        self.fn(self.arg)


class _Wake:
    """The callback of one timeout of a timer: fires the timer unless it was moved since."""

    __slots__ = ("loop", "timer", "stamp")

    def __init__(self, loop: SimPyLoop, timer: Timer, stamp: i64) -> None:
        self.loop = loop
        self.timer = timer
        self.stamp = stamp

    def __call__(self, event: Any) -> None:
        timer = self.timer
        if timer.order != self.stamp or timer.pos < 0:
            return  # moved: a later timeout carries it
        loop = self.loop
        timer.pos = -1
        loop.live -= 1
        loop.now_s = loop.env.now
        timer.fn(None)


class SimPyLoop(EventLoop):
    """`EventLoop`'s interface on `env` (a `simpy.Environment`, made here if not given); user
    processes share `env` (sim.extensions)."""

    def __init__(self, env: Any = None, start_s: float = 0.0) -> None:
        super().__init__(start_s)
        self.env: Any = env if env is not None else simpy.Environment(initial_time=start_s)
        self.now_s = float(self.env.now)
        self.live: i64 = 0  # calls, timers and process wake-ups scheduled and not yet run

    def sync(self) -> None:
        """Catch `now_s` up with the environment (a user process acts between the model's calls)."""
        self.now_s = float(self.env.now)

    def _schedule(self, time_s: float, callback: Any) -> None:
        self.live += 1
        event = self.env.timeout(At(time_s, self.env.now))
        event.callbacks.append(callback)

    def call_at(self, time_s: float, fn: Callable[[Any], None], arg: Any = None) -> None:
        now = self.now_s
        self._schedule(time_s if time_s > now else now, _Due(self, fn, arg))

    def call_after(self, delay_s: float, fn: Callable[[Any], None], arg: Any = None) -> None:
        self._schedule(self.now_s + (delay_s if delay_s > 0.0 else 0.0), _Due(self, fn, arg))

    def set_timer(self, timer: Timer, time_s: float) -> None:
        now = self.now_s
        self._arm(timer, time_s if time_s > now else now)

    def set_timer_after(self, timer: Timer, delay_s: float) -> None:
        self._arm(timer, self.now_s + (delay_s if delay_s > 0.0 else 0.0))

    def _arm(self, timer: Timer, time_s: float) -> None:
        self._order += 1  # the timer's stamp: a wake-up carrying an older one is stale
        if timer.pos < 0:
            self.live += 1
        timer.pos = 0  # scheduled (there is no heap position here)
        timer.time_s = time_s
        timer.order = self._order
        event = self.env.timeout(At(time_s, self.env.now))
        event.callbacks.append(_Wake(self, timer, self._order))

    def process(self, gen: Generator[Delay, None, None]) -> None:
        self.live += 1
        self.env.process(self._drive(gen))

    def _drive(self, gen: Generator[Any, None, None]) -> Generator[Any, Any, None]:
        """The SimPy process of a model generator: its `Delay`s become timeouts (anything else it
        yields is refused here, with a clear message: hence `Any`, not the type the checker knows)."""
        env = self.env
        self.now_s = env.now
        # counted live (`process`) until it ends: a generator that fails keeps the run going until
        # SimPy raises its exception
        for delay in gen:
            if not isinstance(delay, Delay):
                raise TypeError(f"a process yields loop.timeout(delay_s), got {delay!r}")
            yield env.timeout(delay.delay_s)
            self.now_s = env.now
        self.live -= 1

    def pending(self) -> int:
        return int(self.live)

    def run(self, until: Signal | None = None) -> None:
        self._until = until
        self._stop = False
        if until is not None and until.processed:
            return
        env = self.env
        while not self._stop:
            if until is None and self.live == 0:
                return  # the own loop's heap is empty here (only stale timer wake-ups may be left)
            if env.peek() == math.inf:
                if until is not None:
                    raise RuntimeError("no events left, but the run's stop signal was never triggered")
                return
            env.step()
