"""Byte tiers: exact LRU eviction order, TTL expiry, reservations, refusal without mutation."""

import pytest

from sim.kvcache.tiers import ByteTier, TierFull


def test_lru_evicts_least_recently_used_first_in_order():
    t = ByteTier("t", 100.0)
    t.put("a", 30, 0.0)
    t.put("b", 30, 1.0)
    t.put("c", 30, 2.0)
    t.touch("a", 3.0)  # order now b, c, a
    evicted = t.put("d", 50, 4.0)
    assert evicted == [("b", 30), ("c", 30)]
    assert t.keys_lru_order() == ["a", "d"]
    assert t.used_bytes == 80


def test_ttl_expires_from_the_oldest_last_use():
    t = ByteTier("t", 100.0, ttl_s=10.0)
    t.put("a", 10, 0.0)
    t.put("b", 10, 5.0)
    t.put("c", 10, 8.0)
    t.touch("a", 9.0)  # a's clock restarts
    assert t.expire(15.0) == [("b", 10)]  # b last used at 5: expired at 15; c (8) and a (9) alive
    assert t.expire(19.0) == [("c", 10), ("a", 10)]
    assert len(t) == 0 and t.used_bytes == 0


def test_reservations_are_never_evicted_and_push_out_cached_entries():
    t = ByteTier("t", 100.0)
    t.put("a", 40, 0.0)
    t.put("b", 40, 1.0)
    assert t.can_reserve(90)
    assert t.reserve(70) == [("a", 40), ("b", 40)]
    assert t.reserved_bytes == 70 and t.cached_bytes == 0
    assert not t.can_reserve(31)
    with pytest.raises(TierFull):
        t.reserve(31)
    t.release(70)
    assert t.used_bytes == 0


def test_put_larger_than_free_room_refuses_without_mutating():
    t = ByteTier("t", 100.0)
    t.reserve(60)
    t.put("a", 30, 0.0)
    with pytest.raises(TierFull):
        t.put("a", 50, 1.0)  # 50 > 100 - 60: refused, 'a' keeps its 30 bytes
    assert t.cached("a") == 30 and t.used_bytes == 90


def test_pin_moves_a_cached_entry_into_reserved_bytes():
    t = ByteTier("t", 100.0)
    t.put("a", 25, 0.0)
    assert t.pin("a") == 25
    assert "a" not in t and t.reserved_bytes == 25 and t.cached_bytes == 0


def test_peak_tracks_the_highest_occupancy():
    t = ByteTier("t", 100.0)
    t.put("a", 60, 0.0)
    t.remove("a")
    t.put("b", 20, 1.0)
    assert t.peak_bytes == 60 and t.used_bytes == 20
