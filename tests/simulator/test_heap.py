"""sim.cluster.heap: items come off in (key, seq) order, as from heapq over tuples, pushes and pops mixed."""

from __future__ import annotations

import heapq

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cluster.heap import Keyed, pop, push

ops = st.lists(st.one_of(st.integers(min_value=0, max_value=20), st.none()), max_size=200)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_pop_order_equals_heapq_over_tuples(steps):
    """An int pushes an item with that key (ties frequent), None pops one (when any)."""
    heap: list[Keyed] = []
    ref: list[tuple[float, int]] = []
    for seq, key in enumerate(steps):
        if key is None:
            if ref:
                item = pop(heap)
                assert (item.key, item.seq) == heapq.heappop(ref)
            continue
        push(heap, Keyed(float(key), seq))
        heapq.heappush(ref, (float(key), seq))
        assert (heap[0].key, heap[0].seq) == ref[0]
    while ref:
        item = pop(heap)
        assert (item.key, item.seq) == heapq.heappop(ref)
    assert heap == []
