"""The event loop (sim/cluster/events.py): exact (name, time) logs, as SimPy's own tests do; each
test runs on the own loop and on the SimPy one (sim/cluster/simpy_loop.py), which must agree."""

import pytest

from sim.cluster.events import EventLoop
from sim.cluster.simpy_loop import SimPyLoop
from sim.cluster.simpy_time import At


@pytest.fixture(params=["native", "simpy"])
def new_loop(request):
    return EventLoop if request.param == "native" else SimPyLoop


def test_calls_run_in_time_then_insertion_order(new_loop):
    loop, log = new_loop(), []
    for name, at in (("b", 2.0), ("a", 1.0), ("c", 2.0), ("d", 1.0)):
        loop.call_at(at, lambda n: log.append((n, loop.now_s)), name)
    loop.run()
    assert log == [("a", 1.0), ("d", 1.0), ("b", 2.0), ("c", 2.0)]


def test_a_call_in_the_past_runs_now_and_a_negative_delay_means_now(new_loop):
    loop, log = new_loop(), []

    def first(_):
        loop.call_at(0.5, lambda n: log.append((n, loop.now_s)), "past")
        loop.call_after(-1.0, lambda n: log.append((n, loop.now_s)), "negative")

    loop.call_at(1.0, first)
    loop.run()
    assert log == [("past", 1.0), ("negative", 1.0)]


def test_processes_start_before_ordinary_calls_due_at_the_same_time(new_loop):
    loop, log = new_loop(), []
    loop.call_at(0.0, lambda n: log.append((n, loop.now_s)), "call")

    def proc(name, gap_s):
        for _ in range(2):
            log.append((name, loop.now_s))
            yield loop.timeout(gap_s)
        log.append((name + " ends", loop.now_s))

    loop.process(proc("p", 1.5))
    loop.process(proc("q", 1.0))
    loop.run()
    assert log == [
        ("p", 0.0),
        ("q", 0.0),
        ("call", 0.0),
        ("q", 1.0),
        ("p", 1.5),
        ("q ends", 2.0),
        ("p ends", 3.0),
    ]


def test_run_until_a_signal_stops_after_the_calls_already_due_at_its_time(new_loop):
    loop, log = new_loop(), []
    done = loop.signal()

    def note(name):
        log.append((name, loop.now_s))

    def stop(_):
        note("stop")
        loop.call_at(1.0, note, "before the signal, second")
        done.succeed("drained")
        loop.call_at(1.0, note, "after the signal")  # same time, scheduled after it: never runs

    loop.call_at(1.0, stop)
    loop.call_at(1.0, note, "before the signal")
    loop.call_at(5.0, note, "later")
    loop.run(until=done)
    assert log == [("stop", 1.0), ("before the signal", 1.0), ("before the signal, second", 1.0)]
    assert done.processed and done.value == "drained" and loop.now_s == 1.0
    assert loop.pending() == 2


def test_a_run_whose_signal_never_comes_says_so(new_loop):
    loop = new_loop()
    loop.call_at(1.0, lambda _: None)
    with pytest.raises(RuntimeError, match="never triggered"):
        loop.run(until=loop.signal())


def test_an_exception_in_a_call_ends_the_run(new_loop):
    loop = new_loop()

    def boom(_):
        raise ValueError("boom")

    loop.call_at(1.0, boom)
    with pytest.raises(ValueError, match="boom"):
        loop.run()


def test_a_process_must_yield_timeouts_and_timeouts_are_not_negative(new_loop):
    loop = new_loop()

    def bad():
        yield 1.0

    loop.process(bad())
    with pytest.raises(TypeError, match="timeout"):
        loop.run()
    with pytest.raises(ValueError):
        loop.timeout(-1.0)


def test_a_timer_moves_instead_of_leaving_stale_calls(new_loop):
    loop, log = new_loop(), []
    timer = loop.timer(lambda _: log.append(("timer", loop.now_s)))
    loop.call_at(2.0, lambda n: log.append((n, loop.now_s)), "call")
    loop.set_timer(timer, 5.0)
    loop.set_timer(timer, 1.0)  # earlier
    loop.set_timer(timer, 3.0)  # later
    assert loop.pending() == 2 and timer.scheduled

    def move_to_now(_):
        loop.set_timer(timer, 0.0)  # in the past: now, after the calls already due now
        loop.call_at(2.0, lambda n: log.append((n, loop.now_s)), "same time, set earlier")

    loop.call_at(2.0, move_to_now)
    loop.run()
    assert log == [("call", 2.0), ("timer", 2.0), ("same time, set earlier", 2.0)]
    assert not timer.scheduled and loop.pending() == 0
    loop.set_timer_after(timer, 0.5)
    loop.run()
    assert log[-1] == ("timer", 2.5)


def test_the_heap_gives_the_order_of_a_sort_by_time_then_insertion(new_loop):
    import random

    rng, loop, log = random.Random(3), new_loop(), []
    timers = [loop.timer(lambda i: None) for _ in range(20)]
    expected = {}
    for n in range(500):
        t = float(rng.randint(0, 50))
        if rng.random() < 0.3:
            k = rng.randrange(len(timers))
            loop.set_timer(timers[k], t)
            expected[("timer", k)] = (t, n)
        else:
            loop.call_at(t, log.append, n)
            expected[("call", n)] = (t, n)
    for k, timer in enumerate(timers):
        timer.fn = lambda _a, k=k: log.append(("timer", k))
    loop.run()
    want = [key[1] if key[0] == "call" else key for key, _ in sorted(expected.items(), key=lambda kv: kv[1])]
    assert log == want


def test_a_simpy_delay_lands_on_the_time_asked_exactly():
    # SimPy schedules at now + delay: `time - now` alone lands next to some times (0.1 + 0.2 != 0.3), and
    # no float delay reaches some others (this pair: the sum rounds past it either way)
    import simpy

    for now, time_s in ((0.1, 0.3), (0.3186520197210421, 0.9632403815239937), (3.0, 3.0), (0.7, 1e6 + 0.1)):
        assert now + At(time_s, now) == At(time_s, now) + now == time_s and At(time_s, now) == time_s - now
        env = simpy.Environment(initial_time=now)
        env.timeout(At(time_s, now))
        assert env.peek() == time_s
    assert all(
        0.3186520197210421 + d != 0.9632403815239937
        for d in _neighbours(0.9632403815239937 - 0.3186520197210421)
    )


def _neighbours(x: float, n: int = 8) -> list[float]:
    import math

    out, lo, hi = [x], x, x
    for _ in range(n):
        lo, hi = math.nextafter(lo, -math.inf), math.nextafter(hi, math.inf)
        out += [lo, hi]
    return out


def test_the_simpy_loop_keeps_time_at_its_last_live_call():
    # a timer moved earlier leaves its first timeout in SimPy's queue (there is no public cancel): the
    # run ends with the last live call, as the own loop's does, and the stale wake-up never moves time
    loop = SimPyLoop()
    timer = loop.timer(lambda _: None)
    loop.set_timer(timer, 9.0)
    loop.set_timer(timer, 2.0)
    loop.run()
    assert loop.now_s == loop.env.now == 2.0 and loop.pending() == 0 and loop.env.peek() == 9.0
    loop.set_timer_after(timer, 0.5)
    loop.run()
    assert loop.now_s == 2.5


def test_the_simpy_side_touches_no_private_simpy_attribute():
    # SimPy's public API only (issue 31): no `env._queue`, `_now`, `event._value` and the like
    import re

    from sim.paths import project_root

    sim_dir = project_root() / "sim"
    files = [sim_dir / "cluster" / "simpy_loop.py", sim_dir / "cluster" / "simpy_time.py",
             *sorted((sim_dir / "extensions").glob("*.py"))]  # fmt: skip
    for path in files:
        assert not re.search(r"\.(_queue|_now|_value|_eid|_ok|_defused|_delay)\b", path.read_text()), path
