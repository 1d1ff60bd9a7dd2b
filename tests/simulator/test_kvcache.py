"""The cache semantics of each model family, on a hand-built store: what a lookup finds, what it
loads, when V4.1 replays its SWA tail, and where evicted copies go."""

import pytest

from sim.kvcache.lookup import plan_prefix, window_restorable

from . import objects
from .objects import GB, request


def _store(pol, hbm_gb=10.0, dram_gb=100.0):
    # two instances on two nodes
    return objects.store(pol, (hbm_gb * GB, hbm_gb * GB), dram_gb)


def test_v41_hit_in_another_node_ssd_uses_the_swa_pool_then_replays_after_its_ttl():
    store = _store(objects.policy("v41"))
    store.finish(
        7, 0, tokens=10_000, reserved_bytes=0.0, unpin_key=None, now_s=0.0, persist=True
    )  # a turn ended on instance 0 (node 0)
    store.hbm[0].reserved_bytes = 0.0
    # the next turn lands on instance 1 (node 1): HBM and DRAM miss there, SSD has all 10,000
    plan = plan_prefix(store, request(10_000, 12_000), 1, 10.0)
    assert plan is not None and store.tier_names[plan.tier] == "ssd"
    assert (plan.key, plan.tokens, plan.hbm_tokens, plan.replay_tokens, plan.shared) == (
        7,
        10_000,
        0,
        0,
        False,
    )
    assert plan.load_bytes == pytest.approx(10_000 * 890.0)  # global KV only: V4.1 persists no SWA
    assert plan.swa_node == 0  # ring still in node 0's pool
    # after the pool's 300 s TTL the ring is gone: replay the last 128 tokens
    plan = plan_prefix(store, request(10_000, 12_000), 1, 400.0)
    assert plan.swa_node == -1 and plan.replay_tokens == 128


def test_v41_full_match_in_own_hbm_needs_no_swa_work():
    store = _store(objects.policy("v41"))
    store.finish(7, 0, tokens=10_000, reserved_bytes=0.0, unpin_key=None, now_s=0.0, persist=True)
    plan = plan_prefix(store, request(10_000, 12_000), 0, 1.0)
    assert plan.tier == 0 and plan.hbm_tokens == 10_000 and plan.load_bytes == 0.0
    assert plan.swa_node == -1 and plan.replay_tokens == 0


def test_deep_partial_prefix_is_whole_blocks_and_both_models_rebuild_the_window():
    # 5,000 of 10,000 cached: the hit's window (at 4,864) left the kept blocks long ago
    # (V4's receptive field, 5,632, is longer than the hit: it recomputes all of it)
    for family, replay in (("v41", 128), ("v4", 4_864)):
        store = _store(objects.policy(family))
        store.finish(7, 0, tokens=10_000, reserved_bytes=0.0, unpin_key=None, now_s=0.0, persist=True)
        plan = plan_prefix(store, request(5_000, 9_000), 0, 1.0)
        assert (
            plan.tokens == 4_864 and plan.swa_node == -1 and plan.replay_tokens == replay
        )  # 19 blocks of 256


@pytest.mark.parametrize("family", ["v41", "v4"])
@pytest.mark.parametrize("inst, tier", [(0, "hbm"), (1, "ssd")])
def test_block_aligned_hit_at_the_last_block_restores_the_saved_window(family, inst, tier):
    """Imported traces hash whole blocks, so a turn repeats its parent's context up to the last
    block boundary, not to the token. The window there lies in the blocks kept with the window at
    the end (10,000 - 128 -> from 9,728): V4.1 takes it from the pool, V4 with its persisted prefix,
    and in HBM it is in place; neither replays."""
    store = _store(objects.policy(family))
    store.finish(7, 0, tokens=10_000, reserved_bytes=0.0, unpin_key=None, now_s=0.0, persist=True)
    store.hbm[0].reserved_bytes = 0.0
    plan = plan_prefix(store, request(9_984, 12_000), inst, 10.0)  # 156 blocks of 64, as the Weka hashes
    assert (plan.tokens, store.tier_names[plan.tier], plan.replay_tokens) == (9_984, tier, 0)  # 39 of 256
    assert plan.swa_node == (0 if family == "v41" and tier == "ssd" else -1)


@pytest.mark.parametrize("family, replay", [("v41", 128), ("v4", 5_632)])
def test_block_aligned_hit_whose_window_left_the_kept_blocks_replays(family, replay):
    # cached 10,200: kept from 9,984 (10,072 rounded down), so a hit at 9,984 needs [9,856, ...): gone
    store = _store(objects.policy(family))
    store.finish(7, 0, tokens=10_200, reserved_bytes=0.0, unpin_key=None, now_s=0.0, persist=True)
    store.hbm[0].reserved_bytes = 0.0
    plan = plan_prefix(store, request(10_150, 12_000), 1, 10.0)
    assert plan.swa_node == -1 and plan.replay_tokens == replay


@pytest.mark.parametrize("family", ["v41", "v4"])
def test_hit_at_the_parents_input_end_uses_the_window_saved_there(family):
    """Real turns repeat their parent's input, not its output (hardware.md §4.1: a prefix unit is
    saved at the end of the input and of the output): input 10,000 + output 200 cached; the next
    turn repeats the input's whole 64-token blocks, 9,984 tokens, a hit of 39 blocks of 256."""
    store = _store(objects.policy(family))
    store.finish(
        7, 0, tokens=10_200, reserved_bytes=0.0, unpin_key=None, now_s=0.0, persist=True, prompt_tokens=10_000
    )
    store.hbm[0].reserved_bytes = 0.0
    plan = plan_prefix(store, request(9_984, 12_000), 1, 10.0)
    assert plan.replay_tokens == 0 and plan.swa_node == (0 if family == "v41" else -1)
    store.sweep(400.0)  # past the pool's TTL V4.1 replays; V4's state is on SSD with the prefix
    plan = plan_prefix(store, request(9_984, 12_000), 1, 400.0)
    assert plan.swa_node == -1 and plan.replay_tokens == (128 if family == "v41" else 0)


def test_window_restorable_rule():
    assert window_restorable(10_000, 10_000, 128, 256)  # the very end
    assert window_restorable(10_000, 9_984, 128, 256)
    assert not window_restorable(10_000, 9_728, 128, 256)  # needs [9,600, 9,728)
    assert not window_restorable(10_000, 10_240, 128, 256)  # past the end
    assert window_restorable(150, 64, 128, 64)  # a short sequence keeps all its blocks
    assert window_restorable(10_000, 9_984, 128, 64)  # 64-token blocks: the last boundary only
    assert not window_restorable(10_000, 9_920, 128, 64)


def test_hbm_copy_expires_to_host_dram_then_hits_there():
    store = _store(objects.policy("v41"))
    store.finish(7, 0, tokens=10_000, reserved_bytes=0.0, unpin_key=None, now_s=0.0, persist=True)
    store.sweep(31.0)  # past hbm_keep_s: demoted to node 0's DRAM
    dram = store.entries[7].copies[0]
    assert 0 not in store.entries[7].hbm and dram is not None and dram.unit == 0
    plan = plan_prefix(store, request(10_000, 12_000), 0, 32.0)
    assert store.tier_names[plan.tier] == "dram" and plan.hbm_tokens == 0


def test_capacity_pressure_evicts_the_least_recently_used_session_first():
    store = _store(objects.policy("v4"), hbm_gb=1.0)  # ~0.35 GB per 100K-token session: room for two
    store.finish(
        1, 0, tokens=100_000, reserved_bytes=0.0, unpin_key=None, now_s=0.0, persist=False
    )  # 0.35 GB
    store.finish(2, 0, tokens=100_000, reserved_bytes=0.0, unpin_key=None, now_s=1.0, persist=False)
    store.finish(
        3, 0, tokens=100_000, reserved_bytes=0.0, unpin_key=None, now_s=2.0, persist=False
    )  # pushes out session 1 (oldest)
    assert 1 not in store.entries or 0 not in store.entries[1].hbm
    assert 0 in store.entries[2].hbm and 0 in store.entries[3].hbm
    assert store.entries[1].copies[0].unit == 0  # demoted to node 0's DRAM, not lost


def test_a_copy_leaving_host_dram_goes_to_the_rdma_pool_and_serves_another_node():
    pol = objects.policy("v4")
    pool = objects.tier("rdma_pool", 2, [50 * GB], 1000.0, scope="cluster")  # one unit shared by both nodes
    store = objects.store(pol, dram_ttl_s=100.0, pool=pool)
    store.finish(7, 0, tokens=10_000, reserved_bytes=0.0, unpin_key=None, now_s=0.0, persist=False)
    store.sweep(31.0)  # HBM keep over: to node 0's DRAM
    assert plan_prefix(store, request(10_000, 12_000), 1, 32.0) is None  # node 1 cannot reach it
    store.sweep(200.0)  # DRAM TTL over: to the pool
    dram, in_pool, _ssd = store.entries[7].copies
    assert dram is None and in_pool is not None and in_pool.unit == 0 and in_pool.tokens == 10_000
    assert store.counters.written_bytes["rdma_pool"] == pol.persist_bytes(10_000)
    plan = plan_prefix(store, request(10_000, 12_000), 1, 201.0)  # instance 1 on node 1
    assert plan is not None and store.tier_names[plan.tier] == "rdma_pool" and plan.tokens == 10_000
    store.sweep(1300.0)  # pool TTL over: gone
    assert 7 not in store.entries


def test_a_write_through_tier_evicted_before_its_retention_counts_a_violation():
    pol = objects.policy("v41")
    store = objects.store(pol)
    store.write_through[0].units[0].capacity_bytes = pol.persist_bytes(15_000)  # room for one session
    for key, now in ((1, 0.0), (2, 10.0)):
        store.finish(key, 0, tokens=10_000, reserved_bytes=0.0, unpin_key=None, now_s=now, persist=True)
    assert store.counters.evicted_bytes["ssd"] == pol.persist_bytes(10_000)
    assert store.counters.retention_violation_bytes == pol.persist_bytes(10_000)  # 72 h guaranteed
