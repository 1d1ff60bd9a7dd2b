"""A binary min-heap of native items ordered by (`key`, `seq`), the queues of the event loop's actors
(a link's transfers by finish point, an engine's decode batch by finish step).

It is `heapq`'s algorithm on objects compiled code can compare field by field (sim/native.py):
`heapq` over tuples goes through a module lookup, a generic call and generic tuple comparisons for
each push and pop. `seq` is unique within a heap, so the order is total and the items come off in
the same order as from `heapq` over (key, seq, ...) tuples.
"""

from __future__ import annotations

from mypy_extensions import i64


class Keyed:
    """An item of a heap: first by `key`, ties by `seq` (unique in its heap)."""

    __slots__ = ("key", "seq")

    def __init__(self, key: float, seq: int) -> None:
        self.key = key
        self.seq: i64 = seq  # a machine integer: compared without tagged-integer checks


def _before(a: Keyed, b: Keyed) -> bool:
    return a.key < b.key or (a.key == b.key and a.seq < b.seq)


def push(heap: list[Keyed], item: Keyed) -> None:
    pos: i64 = len(heap)
    heap.append(item)
    while pos > 0:
        parent_pos: i64 = (pos - 1) >> 1
        parent = heap[parent_pos]
        if not _before(item, parent):
            break
        heap[pos] = parent
        pos = parent_pos
    heap[pos] = item


def pop(heap: list[Keyed]) -> Keyed:
    """Take the first item off the heap (there is one)."""
    first = heap[0]
    last = heap.pop()
    n: i64 = len(heap)
    if n:
        pos: i64 = 0
        while True:
            child_pos: i64 = 2 * pos + 1
            if child_pos >= n:
                break
            child = heap[child_pos]
            right_pos = child_pos + 1
            if right_pos < n and _before(heap[right_pos], child):
                child, child_pos = heap[right_pos], right_pos
            if not _before(child, last):
                break
            heap[pos] = child
            pos = child_pos
        heap[pos] = last
    return first
