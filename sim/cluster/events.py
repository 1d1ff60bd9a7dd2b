"""The simulator's event loop: a heap of timed calls, owned here rather than borrowed from SimPy.

Choice (issue 16 item 4): `sim` used SimPy 4.1 only as a clock and a heap, and reached both
through its private attributes (`env._queue`, `env._now`, `event._value`) from a copy of its
`run` loop that had drifted from SimPy's `step()`, under an unpinned `simpy>=4.1`. Pinning SimPy
would have kept that dependence on private internals; the loop below is the part we used, about
a hundred lines we can read, test and compile (sim/native.py), with no third-party internals.

What it keeps from SimPy (style.md §1):
- order by (time, insertion): same-time events run first-in first-out, so reruns are identical;
- a generator process starts before ordinary events of the same time (SimPy's URGENT
  initialisation) and waits with `yield loop.timeout(delay_s)`; long-lived loops only (the trace
  loader, the sampler, the run's watchdog), never a process per request or per token;
- `run(until=signal)` stops once the signal has been processed: events scheduled for the same
  time before the signal was triggered still run, later ones do not (SimPy's `run(until=event)`);
- an exception in a callback ends the run (nothing is swallowed).
What it drops: events with callback lists, conditions, interrupts, resources (state lives in
plain objects; SimPy's resources serve strictly in order, style.md §1).

An event is one heap entry `(time_s, order, fn, arg)`: calling `fn(arg)` at `time_s` is the whole
event, one tuple and one call. `order` is an insertion counter, so `fn` and `arg` are never
compared. A caller that may change its mind passes a token as `arg` and ignores stale calls.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from heapq import heappop, heappush
from typing import Any

# Process starts sort before every ordinary event of the same time (orders stay within mypyc's
# unboxed integer range, |order| < 2**62).
_URGENT_ORDER = -(1 << 61)

Event = tuple[float, int, Callable[[Any], None], Any]


class Delay:
    """What a process yields to wait: `delay_s` seconds (scheduled when the process yields it)."""

    __slots__ = ("delay_s",)

    def __init__(self, delay_s: float) -> None:
        if delay_s < 0.0:
            raise ValueError(f"negative delay {delay_s} s")
        self.delay_s = delay_s


class Signal:
    """A one-shot flag a run can stop on: `succeed(value)` triggers it, and it is processed (the
    run stops, if it runs until this signal) after the events already due at that time."""

    def __init__(self, loop: EventLoop) -> None:
        self.loop = loop
        self.triggered = False
        self.processed = False
        self.value: Any = None

    def succeed(self, value: Any = None) -> None:
        if self.triggered:
            raise RuntimeError("a signal succeeds only once")
        self.triggered = True
        self.value = value
        self.loop.call_at(self.loop.now_s, self._process, None)

    def _process(self, _arg: Any) -> None:
        self.processed = True
        if self.loop._until is self:
            self.loop._stop = True


class Process:
    """A generator run as a long-lived actor: each `yield loop.timeout(d)` resumes it `d` later."""

    def __init__(self, loop: EventLoop, gen: Generator[Delay, None, None]) -> None:
        self.loop = loop
        self.gen = gen

    def resume(self, _arg: Any) -> None:
        try:
            delay: object = self.gen.send(None)  # checked below, with a clear message
        except StopIteration:
            return
        if not isinstance(delay, Delay):
            raise TypeError(f"a process yields loop.timeout(delay_s), got {delay!r}")
        loop = self.loop
        loop.call_at(loop.now_s + delay.delay_s, self.resume, None)


class EventLoop:
    """Simulated time `now_s` (seconds) and the heap of calls due."""

    def __init__(self, start_s: float = 0.0) -> None:
        self.now_s = start_s
        self._queue: list[Event] = []
        self._order = 0
        self._until: Signal | None = None
        self._stop = False

    def call_at(self, time_s: float, fn: Callable[[Any], None], arg: Any = None) -> None:
        """Call `fn(arg)` at simulated time `time_s` (never earlier than now)."""
        now = self.now_s
        self._order += 1
        heappush(self._queue, (time_s if time_s > now else now, self._order, fn, arg))

    def call_after(self, delay_s: float, fn: Callable[[Any], None], arg: Any = None) -> None:
        """Call `fn(arg)` `delay_s` seconds from now (a negative delay means now)."""
        self._order += 1
        heappush(self._queue, (self.now_s + (delay_s if delay_s > 0.0 else 0.0), self._order, fn, arg))

    def timeout(self, delay_s: float) -> Delay:
        """What a process yields to wait `delay_s` seconds."""
        return Delay(delay_s)

    def process(self, gen: Generator[Delay, None, None]) -> Process:
        """Start generator `gen` as a process, now, before the ordinary events already due now."""
        proc = Process(self, gen)
        self._order += 1
        heappush(self._queue, (self.now_s, _URGENT_ORDER + self._order, proc.resume, None))
        return proc

    def signal(self) -> Signal:
        return Signal(self)

    def pending(self) -> int:
        """Calls in the heap (stale ones included: callers that changed their mind ignore those)."""
        return len(self._queue)

    def run(self, until: Signal | None = None) -> None:
        """Run the calls in (time, insertion) order until `until` has been processed, or, with no
        `until`, until none is left."""
        queue = self._queue
        self._until = until
        self._stop = False
        if until is not None and until.processed:
            return
        while queue:
            time_s, _order, fn, arg = heappop(queue)
            self.now_s = time_s
            fn(arg)
            if self._stop:
                return
        if until is not None:
            raise RuntimeError("no events left, but the run's stop signal was never triggered")
