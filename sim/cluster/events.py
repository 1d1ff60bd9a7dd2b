"""The one way the simulator schedules a wake-up, and the loop that runs them.

Plain callbacks (not a process per request) keep the cost of an event to one heap push and one
function call; state lives in the objects whose methods are called back (style.md §6). A
wake-up goes straight onto the SimPy environment's queue, so it is ordered with SimPy's own
events (the sampler's and the loader's timeouts) by time, then priority, then insertion. It is a
`Wakeup`, not a `simpy.events.Event`: a callback and a value, no more, because millions are
made per run. A caller that may change its mind passes a token as `value` and ignores stale
wake-ups. Hot paths read the clock as `env._now` (the `now` property costs a call each time).

`run_until` is SimPy's `Environment.run(until=event)` with its loop in this (compiled) module:
the same steps in the same order for SimPy's events, wake-ups called directly, without a
Python-level `step()` call per event.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any

from simpy.events import NORMAL


class Wakeup:
    """A scheduled call of `fn(self)`; `_value` is the caller's token or argument. Only
    `run_until` processes these (SimPy's own `step()` does not know them)."""

    def __init__(self, fn: Callable[[Any], None], value: Any) -> None:
        self.fn = fn
        self._value = value


def call_at(env: Any, time_s: float, fn: Callable[[Any], None], value: Any = None) -> Wakeup:
    """Call `fn(wakeup)` at simulated time `time_s` (never earlier than now); `wakeup._value` is `value`."""
    ev = Wakeup(fn, value)
    now: float = env._now
    heappush(env._queue, (time_s if time_s > now else now, NORMAL, next(env._eid), ev))
    return ev


def call_after(env: Any, delay_s: float, fn: Callable[[Any], None], value: Any = None) -> Wakeup:
    """Call `fn(wakeup)` `delay_s` seconds from now."""
    ev = Wakeup(fn, value)
    now: float = env._now
    heappush(env._queue, (now + (delay_s if delay_s > 0.0 else 0.0), NORMAL, next(env._eid), ev))
    return ev


def run_until(env: Any, until: Any = None) -> None:
    """Process events until `until` (a SimPy event) has been processed, as
    `env.run(until=until)` does, or with no `until` until none is left, as `env.run()` does;
    an event that failed unhandled is raised, as SimPy does."""
    queue = env._queue
    while until is None or until.callbacks is not None:
        if not queue:
            if until is None:
                return
            raise RuntimeError(f'No scheduled events left but "until" event was not triggered: {until}')
        env._now, _prio, _eid, event = heappop(queue)
        if isinstance(event, Wakeup):  # ours: one callback, never fails; called natively
            event.fn(event)
            continue
        callbacks = event.callbacks
        event.callbacks = None
        for callback in callbacks:
            callback(event)
        if not event._ok and not hasattr(event, "_defused"):
            raise event._value
