"""The transfer links: processor sharing with exact completion times, FIFO writes."""

import pytest

from sim.cluster.events import EventLoop
from sim.cluster.link import FifoLink, SharedLink


def _run(jobs, bw=100.0, latency=0.0):
    """jobs: (start_s, bytes, name); returns {name: finish_s}."""
    env = EventLoop()
    link = SharedLink(env, "l", bw, latency)
    done = {}

    def start(at, nbytes, name):
        yield env.timeout(at)
        link.submit(nbytes, lambda n: done.__setitem__(n, env.now_s), name)

    for at, nbytes, name in jobs:
        env.process(start(at, nbytes, name))
    env.run()
    return done, link


def test_single_job_takes_bytes_over_bandwidth():
    done, link = _run([(0.0, 250.0, "a")])
    assert done == {"a": pytest.approx(2.5, abs=1e-12)}
    assert link.bytes_done == 250.0


def test_two_jobs_share_equally_then_the_survivor_speeds_up():
    # a alone for 0.5 s (50 B), then both at 50 B/s: a's last 50 B end at 1.5 s; b then has
    # 50 B left alone at 100 B/s -> 2.0 s
    done, _ = _run([(0.0, 100.0, "a"), (0.5, 100.0, "b")])
    assert done["a"] == pytest.approx(1.5, abs=1e-12)
    assert done["b"] == pytest.approx(2.0, abs=1e-12)


def test_equal_jobs_finish_together_in_submission_order():
    order = []
    env = EventLoop()
    link = SharedLink(env, "l", 10.0)
    for name in ("x", "y", "z"):
        link.submit(10.0, lambda n: order.append((n, env.now_s)), name)
    env.run()
    assert [n for n, _ in order] == ["x", "y", "z"]
    assert all(t == pytest.approx(3.0) for _, t in order)


def test_latency_is_charged_as_bytes_at_link_rate():
    done, _ = _run([(0.0, 100.0, "a")], bw=100.0, latency=0.25)
    assert done["a"] == pytest.approx(1.25)


def test_three_staggered_jobs_exact():
    # a: 300 B at 0; b: 100 B at 1; c: 100 B at 1 (bw 100 B/s)
    # 0..1: a alone -> 100 B. 1..: three share 33.3 B/s: b and c (100 B) end at 4.0, a has 200 B
    # left at 1 and gets 100 B by 4 -> 100 B left alone -> ends at 5.0
    done, _ = _run([(0.0, 300.0, "a"), (1.0, 100.0, "b"), (1.0, 100.0, "c")])
    assert done["b"] == pytest.approx(4.0)
    assert done["c"] == pytest.approx(4.0)
    assert done["a"] == pytest.approx(5.0)


def test_fifo_link_queues_writes_without_events():
    link = FifoLink("w", 10.0)
    assert link.submit(0.0, 20.0) == 2.0
    assert link.submit(1.0, 10.0) == 3.0  # waits for the first write
    assert link.submit(5.0, 10.0) == 6.0  # link idle again
    assert link.backlog_s(5.5) == pytest.approx(0.5)
    assert link.bytes_done == 40.0


def test_bad_link_parameters_are_rejected():
    env = EventLoop()
    with pytest.raises(ValueError):
        SharedLink(env, "l", 0.0)
    with pytest.raises(ValueError):
        FifoLink("w", -1.0)


def test_finish_times_equal_a_tuple_heap_reference():
    """Many overlapping jobs (ties included) finish at exactly the times, and in exactly the order,
    of the processor-sharing reference with `heapq` over (finish point, submission) tuples."""
    import heapq
    import random

    rng = random.Random(5)
    jobs = sorted(
        (round(rng.uniform(0.0, 20.0), 1), float(rng.choice([1, 50, 100, 100, 400])), i) for i in range(300)
    )
    bw = 100.0
    # the reference: advance the virtual clock between arrivals and finishes
    ref, heap, v, t, seq = [], [], 0.0, 0.0, 0
    pending = list(jobs)
    while pending or heap:
        finish_t = t + (heap[0][0] - v) * len(heap) / bw if heap else float("inf")
        if pending and pending[0][0] < finish_t:
            at, nbytes, name = pending.pop(0)
            v = v + (at - t) * bw / len(heap) if heap else 0.0
            t = at
            seq += 1
            heapq.heappush(heap, (v + nbytes, seq, name))
            continue
        v = v + (finish_t - t) * bw / len(heap)
        t = finish_t
        done = [heapq.heappop(heap)]
        tol = 1e-12 * (v if v > 1.0 else 1.0)
        while heap and heap[0][0] <= v + tol:
            done.append(heapq.heappop(heap))
        ref.extend((item[2], t) for item in done)

    env = EventLoop()
    link = SharedLink(env, "l", bw)
    order = []

    def start(at, nbytes, name):
        yield env.timeout(at)
        link.submit(nbytes, lambda n: order.append((n, env.now_s)), name)

    for at, nbytes, name in jobs:
        env.process(start(at, nbytes, name))
    env.run()
    assert [n for n, _ in order] == [n for n, _ in ref]
    assert [x for _, x in order] == pytest.approx([x for _, x in ref], rel=1e-12, abs=1e-12)
    assert link.in_flight() == 0 and link.jobs_done == len(jobs)
