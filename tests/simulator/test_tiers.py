"""Byte tiers: exact LRU eviction order, TTL expiry, reservations, refusal without mutation."""

import pytest

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
