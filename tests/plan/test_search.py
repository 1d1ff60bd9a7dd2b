"""Bisection on the node scale, and the node counts per pool at each scale."""

import math

from hypothesis import given
from hypothesis import strategies as st

from sim.plan.search import Bisection, pool_nodes


def _run(bisection, feasible_from):
    probes = []
    while (k := bisection.next_k()) is not None:
        probes.append(k)
        bisection.record(k, k >= feasible_from)
    return probes


@given(lo=st.integers(1, 20), width=st.integers(0, 40), data=st.data())
def test_bisection_finds_the_smallest_feasible_k_in_logarithmic_probes(lo, width, data):
    hi = lo + width
    threshold = data.draw(st.integers(lo, hi + 3))  # may lie above hi: nothing feasible
    b = Bisection(lo, hi)
    probes = _run(b, threshold)
    assert b.best == (threshold if threshold <= hi else None)
    assert len(probes) == len(set(probes))
    assert len(probes) <= math.ceil(math.log2(width + 1)) + 1
    # search-level early stop: after a pass only smaller k are tried, after a failure only larger
    for i, k in enumerate(probes):
        later = probes[i + 1 :]
        assert all(j < k for j in later) if k >= threshold else all(j > k for j in later)


def test_bisection_exact_probe_sequence():
    b = Bisection(1, 8)
    assert _run(b, 3) == [4, 2, 3]
    b = Bisection(1, 8)
    assert _run(b, 99) == [4, 6, 7, 8]
    assert b.best is None


def test_steps_left_bounds_the_probes_still_needed():
    for threshold in range(1, 12):
        b = Bisection(1, 10)
        bound = b.steps_left_at_most()
        assert len(_run(b, threshold)) <= bound
        assert b.steps_left_at_most() == 0


def test_cap_limits_the_search_and_probes_the_capped_top_last():
    b = Bisection(1, 16)
    assert b.next_k() == 8
    b.cap(7)  # 8 and above cost more than a known answer
    assert _run(b, 99) == [4, 6, 7]
    assert b.best is None
    b = Bisection(1, 16)
    b.cap(0)
    assert b.next_k() is None and b.best is None


def test_pool_nodes_exact():
    assert [pool_nodes({"prefill": 1, "decode": 2}, k) for k in (1, 2, 3, 4)] == [
        {"prefill": 1, "decode": 1},
        {"prefill": 1, "decode": 2},
        {"prefill": 2, "decode": 3},
        {"prefill": 2, "decode": 4},
    ]
    assert pool_nodes({"prefill": 1, "decode": 3}, 3) == {"prefill": 1, "decode": 3}


@given(
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.floats(0.01, 10), min_size=1), st.integers(1, 200)
)
def test_pool_nodes_are_monotone_in_k(ratio, k):
    now, nxt = pool_nodes(ratio, k), pool_nodes(ratio, k + 1)
    assert all(1 <= now[p] <= nxt[p] for p in ratio)
    assert max(now.values()) == k


def test_pool_nodes_round_up_to_whole_instances():
    steps = {"decode": 2}  # a 16-GPU decode instance spans two 8-GPU nodes
    assert [pool_nodes({"prefill": 1, "decode": 1}, k, steps)["decode"] for k in (1, 2, 3, 4, 5)] == [
        2,
        2,
        4,
        4,
        6,
    ]
