"""Byte tiers: exact LRU eviction order, TTL expiry, reservations, refusal without mutation."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.kvcache.tiers import ByteTier, TierFull

A, B, C, D = 1, 2, 3, 4  # cache keys are ints (lineage and shared-prefix keys)


def test_lru_evicts_least_recently_used_first_in_order():
    t = ByteTier("t", 100.0)
    t.put(A, 30, 0.0)
    t.put(B, 30, 1.0)
    t.put(C, 30, 2.0)
    t.touch(A, 3.0)  # order now b, c, a
    evicted = t.put(D, 50, 4.0)
    assert evicted == [(B, 30), (C, 30)]
    assert t.keys_lru_order() == [A, D]
    assert t.used_bytes == 80


def test_ttl_expires_from_the_oldest_last_use():
    t = ByteTier("t", 100.0, ttl_s=10.0)
    t.put(A, 10, 0.0)
    t.put(B, 10, 5.0)
    t.put(C, 10, 8.0)
    t.touch(A, 9.0)  # a's clock restarts
    assert t.expire(15.0) == [(B, 10)]  # b last used at 5: expired at 15; c (8) and a (9) alive
    assert t.expire(19.0) == [(C, 10), (A, 10)]
    assert len(t) == 0 and t.used_bytes == 0


def test_reservations_are_never_evicted_and_push_out_cached_entries():
    t = ByteTier("t", 100.0)
    t.put(A, 40, 0.0)
    t.put(B, 40, 1.0)
    assert t.can_reserve(90)
    assert t.reserve(70) == [(A, 40), (B, 40)]
    assert t.reserved_bytes == 70 and t.cached_bytes == 0
    assert not t.can_reserve(31)
    with pytest.raises(TierFull):
        t.reserve(31)
    t.release(70)
    assert t.used_bytes == 0


def test_put_larger_than_free_room_refuses_without_mutating():
    t = ByteTier("t", 100.0)
    t.reserve(60)
    t.put(A, 30, 0.0)
    with pytest.raises(TierFull):
        t.put(A, 50, 1.0)  # 50 > 100 - 60: refused, 'a' keeps its 30 bytes
    assert t.cached(A) == 30 and t.used_bytes == 90


def test_pin_moves_a_cached_entry_into_reserved_bytes():
    t = ByteTier("t", 100.0)
    t.put(A, 25, 0.0)
    assert t.pin(A) == 25
    assert A not in t and t.reserved_bytes == 25 and t.cached_bytes == 0


def test_peak_tracks_the_highest_occupancy():
    t = ByteTier("t", 100.0)
    t.put(A, 60, 0.0)
    t.remove(A)
    t.put(B, 20, 1.0)
    assert t.peak_bytes == 60 and t.used_bytes == 20


# --- a tier of blocks (HBM): runs cut from the tail -------------------------------------------------


def _blocks_tier(capacity_bytes: float, block_tokens: int = 4, token_bytes: float = 1.0) -> ByteTier:
    return ByteTier("hbm", capacity_bytes, block_tokens=block_tokens, token_bytes=token_bytes)


def test_pressure_cuts_the_least_recently_used_run_from_its_tail_only_as_far_as_needed():
    t = _blocks_tier(100.0)
    t.put(A, 42.0, 0.0, tokens=40)  # 10 blocks of 4 tokens at 1 B/token, plus 2 B of sequence state
    t.put(B, 40.0, 1.0, tokens=40)
    evicted = t.put(C, 30.0, 2.0, tokens=30)  # 12 B short: A loses its state and 3 blocks (12 tokens)
    assert evicted == [(A, 14.0)]
    assert (t.tokens(A), t.whole_tokens(A), t.cached(A)) == (28, 40, 28.0)
    assert t.keys_lru_order() == [A, B, C]  # the cut run keeps its place: it goes on losing blocks first
    assert t.reserve(20.0) == [(A, 20.0)]  # 18 B short: 5 blocks
    assert t.tokens(A) == 8 and t.used_bytes == 98.0


def test_a_cut_frees_the_partial_last_block_first_and_a_run_with_no_block_left_goes_whole():
    t = _blocks_tier(50.0)
    t.put(A, 10.0, 0.0, tokens=10)  # blocks [0,4) [4,8) [8,10)
    t.put(B, 38.0, 1.0, tokens=38)
    assert t.put(C, 3.0, 2.0, tokens=3) == [(A, 2.0)]  # 1 B short: the partial block [8, 10) goes
    assert t.tokens(A) == 8
    assert t.reserve(6.0) == [(A, 8.0)]  # 5 B short: 4 B of head would be left, not enough: all of A
    assert A not in t and t.keys_lru_order() == [B, C]


def test_a_run_put_again_is_whole_and_most_recent():
    t = _blocks_tier(60.0)
    t.put(A, 40.0, 0.0, tokens=40)
    t.reserve(30.0)  # A cut to 28
    t.release(30.0)
    t.put(A, 44.0, 5.0, tokens=44)  # the session's next turn finished: its whole context again
    assert (t.tokens(A), t.whole_tokens(A), t.keys_lru_order()) == (44, 44, [A])


def test_a_tier_of_blocks_needs_bytes_per_token():
    with pytest.raises(ValueError, match="token_bytes"):
        ByteTier("hbm", 100.0, block_tokens=256)


# The reference: vLLM's block pool in miniature (kernels_bench/serve/blocks.py): one entry per block in a
# free queue, a run's blocks appended tail first when it is cached, blocks taken from the front. With
# whole blocks and no state the tier's runs must hold exactly the blocks the reference still holds.
class _BlockQueue:
    def __init__(self, blocks: int) -> None:
        self.free = blocks  # never-used blocks
        self.queue: list[tuple[int, int]] = []  # (key, block index) in eviction order
        self.reserved = 0

    def _take(self, n: int) -> None:
        while self.free < n:
            self.queue.pop(0)
            self.free += 1
        self.free -= n

    def put(self, key: int, blocks: int) -> None:
        self.free += sum(1 for k, _ in self.queue if k == key)
        self.queue = [(k, b) for k, b in self.queue if k != key]
        self._take(blocks)
        self.queue += [(key, b) for b in reversed(range(blocks))]

    def reserve(self, blocks: int) -> None:
        self._take(blocks)
        self.reserved += blocks

    def release(self, blocks: int) -> None:
        self.free += blocks
        self.reserved -= blocks

    def touch(self, key: int) -> None:
        mine = [(k, b) for k, b in self.queue if k == key]
        self.queue = [(k, b) for k, b in self.queue if k != key] + mine

    def held(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for k, b in self.queue:
            out[k] = max(out.get(k, 0), b + 1)
        return out


@settings(max_examples=150, deadline=None)
@given(
    capacity_blocks=st.integers(4, 24),
    ops=st.lists(
        st.tuples(st.sampled_from(["put", "touch", "reserve", "release"]), st.integers(1, 4), st.integers(1, 12)),
        max_size=40,
    ),
)
def test_runs_cut_from_the_tail_hold_exactly_what_a_per_block_lru_queue_holds(capacity_blocks, ops):
    block = 4
    t = _blocks_tier(capacity_blocks * block, block_tokens=block)
    ref = _BlockQueue(capacity_blocks)
    now = 0.0
    for op, key, n in ops:
        now += 1.0
        if op == "put" and n <= capacity_blocks - ref.reserved:
            evicted = t.put(key, float(n * block), now, tokens=n * block)
            ref.put(key, n)
            assert all(k != key for k, _ in evicted)
        elif op == "touch" and key in t:
            t.touch(key, now)
            ref.touch(key)
        elif op == "reserve" and n <= capacity_blocks - ref.reserved:
            t.reserve(float(n * block))
            ref.reserve(n)
        elif op == "release" and ref.reserved >= n:
            t.release(float(n * block))
            ref.release(n)
        assert t.used_bytes <= t.capacity_bytes
        held = {k: t.tokens(k) // block for k in t.keys_lru_order()}
        assert held == ref.held()
        for k in held:
            assert t.tokens(k) <= t.whole_tokens(k) and t.cached(k) == t.tokens(k)


def test_a_held_entry_is_reserved_once_out_of_the_lru_order_and_most_recent_when_released():
    t = ByteTier("t", 100.0)
    t.put(A, 30.0, 0.0)
    t.put(B, 30.0, 1.0)
    assert t.holdable_bytes(A) == 30.0
    t.hold(A)  # two running sequences use A in place: its bytes count once, as reserved
    t.hold(A)
    assert (t.holdable_bytes(A), t.reserved_bytes, t.cached_bytes) == (0.0, 30.0, 30.0)
    t.touch(A, 2.0)  # in use: stays out of the LRU order
    assert t.reserve(60.0) == [(B, 30.0)]  # only B could go
    assert A in t and t.keys_lru_order() == []
    with pytest.raises(TierFull):
        t.put(A, 10.0, 3.0)  # in use: not replaced
    t.unhold(A, 4.0)
    assert t.keys_lru_order() == [] and t.reserved_bytes == 90.0
    t.release(60.0)
    t.put(C, 10.0, 5.0)
    t.unhold(A, 6.0)  # the last user: cached again, the most recently used
    assert t.keys_lru_order() == [C, A] and (t.reserved_bytes, t.cached_bytes) == (0.0, 40.0)
