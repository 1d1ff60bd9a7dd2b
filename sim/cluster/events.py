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

An event is a `Call`: `fn(arg)` at `time_s`, ordered by (time, `order`), `order` counting
insertions. A one-shot call (`call_at`, `call_after`) is made, run and dropped. An actor that
re-plans its next wake-up (an engine cutting a decode span, a link whose transfers changed) owns
a `Timer` and moves it (`set_timer`): the heap is indexed (each call knows its position), so the
move is one sift and no stale wake-up is left behind to be popped and ignored later. A move takes
a fresh `order`, exactly as a new call would, so the order of events is the one-shot order.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, Final

from mypy_extensions import i64

# Process starts sort before every ordinary event of the same time (orders and heap positions are
# machine integers, i64: compiled code compares and stores them without tagged-integer checks).
_URGENT_ORDER: Final = -(1 << 61)


class Call:
    """`fn(arg)` at `time_s`; `pos` is its index in the loop's heap (-1: not scheduled)."""

    __slots__ = ("time_s", "order", "pos", "fn", "arg")

    def __init__(self, fn: Callable[[Any], None], arg: Any) -> None:
        self.time_s = 0.0
        self.order: i64 = 0
        self.pos: i64 = -1
        self.fn = fn
        self.arg = arg


class Timer(Call):
    """A wake-up an actor moves instead of scheduling a new one each time its plan changes."""

    __slots__ = ()

    def __init__(self, fn: Callable[[Any], None]) -> None:
        super().__init__(fn, None)

    @property
    def scheduled(self) -> bool:
        return self.pos >= 0


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

    def __init__(self, loop: EventLoop, gen: Generator[Any, None, None]) -> None:
        self.loop = loop
        self.gen = gen

    def resume(self, _arg: Any) -> None:
        try:
            delay = self.gen.send(None)  # any object: checked below, with a clear message
        except StopIteration:
            return
        if not isinstance(delay, Delay):
            raise TypeError(f"a process yields loop.timeout(delay_s), got {delay!r}")
        loop = self.loop
        loop.call_at(loop.now_s + delay.delay_s, self.resume, None)


class EventLoop:
    """Simulated time `now_s` (seconds) and the heap of calls due (a binary heap of `Call`s, each
    knowing its index, so a `Timer` moves in place)."""

    def __init__(self, start_s: float = 0.0) -> None:
        self.now_s = start_s
        self._heap: list[Call] = []
        self._order: i64 = 0
        self._until: Signal | None = None
        self._stop = False

    def call_at(self, time_s: float, fn: Callable[[Any], None], arg: Any = None) -> None:
        """Call `fn(arg)` at simulated time `time_s` (never earlier than now)."""
        call = Call(fn, arg)
        now = self.now_s
        call.time_s = time_s if time_s > now else now
        self._order += 1
        call.order = self._order
        self._push(call)

    def call_after(self, delay_s: float, fn: Callable[[Any], None], arg: Any = None) -> None:
        """Call `fn(arg)` `delay_s` seconds from now (a negative delay means now)."""
        call = Call(fn, arg)
        call.time_s = self.now_s + (delay_s if delay_s > 0.0 else 0.0)
        self._order += 1
        call.order = self._order
        self._push(call)

    def timer(self, fn: Callable[[Any], None]) -> Timer:
        """A timer calling `fn(None)`, not yet set."""
        return Timer(fn)

    def set_timer(self, timer: Timer, time_s: float) -> None:
        """(Re)set `timer` to fire at `time_s` (never earlier than now), replacing its earlier time."""
        now = self.now_s
        self._move(timer, time_s if time_s > now else now)

    def set_timer_after(self, timer: Timer, delay_s: float) -> None:
        """(Re)set `timer` to fire `delay_s` seconds from now (a negative delay means now)."""
        self._move(timer, self.now_s + (delay_s if delay_s > 0.0 else 0.0))

    def timeout(self, delay_s: float) -> Delay:
        """What a process yields to wait `delay_s` seconds."""
        return Delay(delay_s)

    def process(self, gen: Generator[Delay, None, None]) -> None:
        """Start generator `gen` as a process, now, before the ordinary events already due now."""
        proc = Process(self, gen)
        call = Call(proc.resume, None)
        call.time_s = self.now_s
        self._order += 1
        call.order = _URGENT_ORDER + self._order
        self._push(call)

    def signal(self) -> Signal:
        return Signal(self)

    def pending(self) -> int:
        """Calls in the heap."""
        return len(self._heap)

    def run(self, until: Signal | None = None) -> None:
        """Run the calls in (time, insertion) order until `until` has been processed, or, with no
        `until`, until none is left."""
        heap = self._heap
        self._until = until
        self._stop = False
        if until is not None and until.processed:
            return
        while heap:
            call = heap[0]
            last = heap.pop()
            if heap:
                last.pos = 0
                heap[0] = last
                self._sift_down(last)
            call.pos = -1
            self.now_s = call.time_s
            call.fn(call.arg)
            if self._stop:
                return
        if until is not None:
            raise RuntimeError("no events left, but the run's stop signal was never triggered")

    # --- the indexed binary heap ---

    def _push(self, call: Call) -> None:
        heap = self._heap
        call.pos = len(heap)
        heap.append(call)
        self._sift_up(call)

    def _move(self, timer: Timer, time_s: float) -> None:
        self._order += 1
        if timer.pos < 0:
            timer.time_s = time_s
            timer.order = self._order
            self._push(timer)
            return
        earlier = time_s < timer.time_s  # the fresh order is the largest: equal times sort later
        timer.time_s = time_s
        timer.order = self._order
        if earlier:
            self._sift_up(timer)
        else:
            self._sift_down(timer)

    def _sift_up(self, call: Call) -> None:
        heap = self._heap
        pos = call.pos
        time_s, order = call.time_s, call.order
        while pos > 0:
            parent_pos: i64 = (pos - 1) >> 1
            parent = heap[parent_pos]
            if parent.time_s < time_s or (parent.time_s == time_s and parent.order < order):
                break
            heap[pos] = parent
            parent.pos = pos
            pos = parent_pos
        heap[pos] = call
        call.pos = pos

    def _sift_down(self, call: Call) -> None:
        heap = self._heap
        n: i64 = len(heap)
        pos = call.pos
        time_s, order = call.time_s, call.order
        while True:
            child_pos: i64 = 2 * pos + 1
            if child_pos >= n:
                break
            child = heap[child_pos]
            right_pos = child_pos + 1
            if right_pos < n:
                right = heap[right_pos]
                if right.time_s < child.time_s or (
                    right.time_s == child.time_s and right.order < child.order
                ):
                    child, child_pos = right, right_pos
            if time_s < child.time_s or (time_s == child.time_s and order < child.order):
                break
            heap[pos] = child
            child.pos = pos
            pos = child_pos
        heap[pos] = call
        call.pos = pos
