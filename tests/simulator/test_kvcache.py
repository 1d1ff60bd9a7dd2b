"""The cache semantics of each model family, on a hand-built store: what a lookup finds, what it
loads, when V4.1 replays its SWA tail, and where evicted copies go."""

import pytest

from sim.kvcache.lookup import plan_prefix

from . import objects
from .objects import GB, request


def _store(pol, hbm_gb=10.0, dram_gb=100.0):
    # two instances on two nodes
    return objects.store(pol, (hbm_gb * GB, hbm_gb * GB), dram_gb)


def test_v41_hit_in_another_node_ssd_uses_the_swa_pool_then_replays_after_its_ttl():
    store = _store(objects.policy("v41"))
    store.finish(7, 0, 10_000, 0.0, None, 0.0, True)  # a turn ended on instance 0 (node 0)
    store.hbm[0].reserved_bytes = 0.0
    # the next turn lands on instance 1 (node 1): HBM and DRAM miss there, SSD has all 10,000
    key, tokens, tier, hbm, load, swa_node, replay, shared = plan_prefix(
        store, request(10_000, 12_000), 1, 1, 10.0
    )
    assert (key, tokens, tier, hbm, replay, shared) == (7, 10_000, "ssd", 0, 0, False)
    assert load == pytest.approx(10_000 * 890.0)  # global KV only: V4.1 persists no SWA
    assert swa_node == 0  # ring still in node 0's pool
    # after the pool's 300 s TTL the ring is gone: replay the last 128 tokens
    *_, swa_node, replay, _ = plan_prefix(store, request(10_000, 12_000), 1, 1, 400.0)
    assert swa_node == -1 and replay == 128


def test_v41_full_match_in_own_hbm_needs_no_swa_work():
    store = _store(objects.policy("v41"))
    store.finish(7, 0, 10_000, 0.0, None, 0.0, True)
    plan = plan_prefix(store, request(10_000, 12_000), 0, 0, 1.0)
    assert plan[2] == "hbm" and plan[3] == 10_000 and plan[4] == 0.0 and plan[5] == -1 and plan[6] == 0


def test_partial_prefix_is_whole_blocks_and_v41_replays_its_tail():
    store = _store(objects.policy("v41"))
    store.finish(7, 0, 10_000, 0.0, None, 0.0, True)
    plan = plan_prefix(store, request(5_000, 9_000), 0, 0, 1.0)  # repeats 5,000 of the 10,000 cached
    assert plan[1] == 4_864 and plan[6] == 128  # 19 blocks of 256; the ring is at 10,000, not 4,864


def test_v4_loads_its_state_with_the_prefix_and_never_replays():
    store = _store(objects.policy("v4"))
    store.finish(7, 0, 10_000, 0.0, None, 0.0, True)
    _key, tokens, tier, _hbm, load, swa_node, replay, _ = plan_prefix(
        store, request(10_000, 12_000), 1, 1, 10.0
    )
    assert (tokens, tier, swa_node, replay) == (10_000, "ssd", -1, 0)
    assert load == pytest.approx(10_000 * 3514.25 + 3_214_336.0 + 12_206_080.0)


def test_hbm_copy_expires_to_host_dram_then_hits_there():
    store = _store(objects.policy("v41"))
    store.finish(7, 0, 10_000, 0.0, None, 0.0, True)
    store.sweep(31.0)  # past hbm_keep_s: demoted to node 0's DRAM
    assert 0 not in store.entries[7].hbm and store.entries[7].dram_node == 0
    plan = plan_prefix(store, request(10_000, 12_000), 0, 0, 32.0)
    assert plan[2] == "dram" and plan[3] == 0


def test_capacity_pressure_evicts_the_least_recently_used_session_first():
    store = _store(objects.policy("v4"), hbm_gb=1.0)  # ~0.35 GB per 100K-token session: room for two
    store.finish(1, 0, 100_000, 0.0, None, 0.0, False)  # 0.35 GB
    store.finish(2, 0, 100_000, 0.0, None, 1.0, False)
    store.finish(3, 0, 100_000, 0.0, None, 2.0, False)  # pushes out session 1 (oldest)
    assert 1 not in store.entries or 0 not in store.entries[1].hbm
    assert 0 in store.entries[2].hbm and 0 in store.entries[3].hbm
    assert store.entries[1].dram_node == 0  # demoted, not lost
