"""The one way the simulator schedules a wake-up: a SimPy event carrying a plain callback,
pushed straight onto the environment's queue.

Plain callbacks (not a process per request) keep the cost of an event to one heap push and one
function call; state lives in the objects whose methods are called back (style.md §6). The
event is a `simpy.events.Event` processed by SimPy's own `step()` (same ordering: time, then
priority, then insertion), created without `Timeout.__init__`'s bookkeeping because millions
are made per run. A caller that may change its mind passes a token as `value` and ignores stale
wake-ups. Hot paths read the clock as `env._now` (the `now` property costs a call each time).
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappush
from typing import Any

from simpy import Environment
from simpy.events import NORMAL, Event

_new = Event.__new__


def call_at(env: Environment, time_s: float, fn: Callable[[Any], None], value: Any = None) -> Event:
    """Call `fn(event)` at simulated time `time_s` (never earlier than now); `event.value` is `value`."""
    ev = _new(Event)
    ev.env = env
    ev.callbacks = [fn]
    ev._value = value
    ev._ok = True
    now = env._now
    heappush(env._queue, (time_s if time_s > now else now, NORMAL, next(env._eid), ev))
    return ev


def call_after(env: Environment, delay_s: float, fn: Callable[[Any], None], value: Any = None) -> Event:
    """Call `fn(event)` `delay_s` seconds from now."""
    ev = _new(Event)
    ev.env = env
    ev.callbacks = [fn]
    ev._value = value
    ev._ok = True
    heappush(env._queue, (env._now + (delay_s if delay_s > 0.0 else 0.0), NORMAL, next(env._eid), ev))
    return ev
