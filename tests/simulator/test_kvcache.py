"""The cache semantics of each model family, on a hand-built store: what a lookup finds, what it
loads, when V4.1 replays its SWA tail, and where evicted copies go."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.core.request import Request
from sim.kvcache.lookup import plan_prefix, window_restorable

from . import objects
from .objects import GB, request


def _store(pol, hbm_gb=10.0, dram_gb=100.0):
    # two instances on two nodes
    return objects.store(pol, (hbm_gb * GB, hbm_gb * GB), dram_gb)


def test_v41_hit_in_another_node_ssd_uses_the_swa_pool_then_replays_after_its_ttl():
    store = _store(objects.policy("v41"))
    store.finish(
        7, 0, tokens=10_240, reserved_bytes=0.0, unpin_key=None, now_s=0.0, persist=True
    )  # a turn ended on instance 0 (node 0)
    store.hbm[0].reserved_bytes = 0.0
    # the next turn lands on instance 1 (node 1): HBM and DRAM miss there, SSD has all 10,240 (40 blocks)
    plan = plan_prefix(store, request(10_240, 12_000), 1, 10.0)
    assert plan is not None and store.tier_names[plan.tier] == "ssd"
    assert (plan.key, plan.tokens, plan.hbm_tokens, plan.replay_tokens, plan.shared) == (
        7,
        10_240,
        0,
        0,
        False,
    )
    assert plan.load_bytes == pytest.approx(10_240 * 890.0)  # global KV only: V4.1 persists no SWA
    assert plan.swa_node == 0  # ring still in node 0's pool
    # after the pool's 300 s TTL the ring is gone: replay the last 128 tokens
    plan = plan_prefix(store, request(10_240, 12_000), 1, 400.0)
    assert plan.swa_node == -1 and plan.replay_tokens == 128


def test_v41_full_match_in_own_hbm_needs_no_swa_work():
    store = _store(objects.policy("v41"))
    store.finish(7, 0, tokens=10_240, reserved_bytes=0.0, unpin_key=None, now_s=0.0, persist=True)
    plan = plan_prefix(store, request(10_240, 12_000), 0, 1.0)
    assert plan.tier == 0 and plan.hbm_tokens == 10_240 and plan.load_bytes == 0.0
    assert plan.swa_node == -1 and plan.replay_tokens == 0


def test_deep_partial_prefix_is_whole_blocks_and_both_models_rebuild_the_window():
    """V4 under `rebuild` (a what-if mode: the engines' own rules are in test_swa_checkpoints.py)."""
    # 5,000 of 10,000 cached: the hit's window (at 4,864) left the kept blocks long ago
    # (V4's receptive field, 5,632, is longer than the hit: it recomputes all of it)
    for family, replay in (("v41", 128), ("v4", 4_864)):
        store = _store(objects.policy(family, swa_checkpoints="rebuild"))
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
    store = _store(objects.policy(family, swa_checkpoints="rebuild"))
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
    # an engine keeping the page before too (256 back): the last boundary 216 tokens into the page serves
    assert not window_restorable(10_200, 9_984, 128, 256) and window_restorable(10_200, 9_984, 128, 256, 256)


def test_hbm_copy_expires_to_host_dram_then_hits_there():
    store = _store(objects.policy("v41"))
    store.finish(7, 0, tokens=10_000, reserved_bytes=0.0, unpin_key=None, now_s=0.0, persist=True)
    store.sweep(31.0)  # past hbm_keep_s: demoted to node 0's DRAM
    dram = store.entries[7].copies[0]
    assert store.hbm_tokens(7, 0) == 0 and dram is not None and dram.unit == 0
    plan = plan_prefix(store, request(10_000, 12_000), 0, 32.0)
    assert store.tier_names[plan.tier] == "dram" and plan.hbm_tokens == 0


def test_capacity_pressure_cuts_the_least_recently_used_session_from_its_tail():
    pol = objects.policy("v4", swa_checkpoints="rebuild")  # the hit below rebuilds its window
    store = _store(pol, hbm_gb=1.0)  # ~0.37 GB per 100K-token session: room for two and a bit
    for key, now in ((1, 0.0), (2, 1.0), (3, 2.0)):
        store.finish(key, 0, tokens=100_000, reserved_bytes=0.0, unpin_key=None, now_s=now, persist=False)
    # the third pushes out the oldest session's tail only: its state and the whole blocks that must go
    whole = pol.hbm_bytes(100_000, 1)
    over = 3 * whole - 1e9
    keep = int((whole - over) // (256 * pol.global_kv_bytes_per_token)) * 256
    assert store.hbm_tokens(1, 0) == keep == 75_776
    assert store.hbm[0].keys_lru_order() == [1, 2, 3]
    assert store.hbm_tokens(2, 0) == store.hbm_tokens(3, 0) == 100_000
    assert store.counters.evicted_bytes["hbm"] == pytest.approx(whole - keep * pol.global_kv_bytes_per_token)
    assert store.entries[1].copies[0].tokens == 100_000  # the whole context went to node 0's DRAM
    # the next turn of session 1 uses the head in place and loads the rest from DRAM
    plan = plan_prefix(store, request(90_000, 95_000, parent=1), 0, 3.0)
    assert (plan.tokens, plan.hbm_tokens, store.tier_names[plan.tier]) == (89_856, 75_776, "dram")
    assert plan.load_bytes == pytest.approx(
        (89_856 - 75_776) * pol.global_kv_bytes_per_token + pol.persisted_state_bytes
    )


@pytest.mark.parametrize("family, replay", [("v41", 128), ("v4", 5_632)])
def test_a_hit_on_the_head_of_a_cut_copy_finds_its_window_only_in_blocks_left(family, replay):
    """No lower tier: the head left in HBM serves the hit alone. The window of a hit at the last
    block boundary lies in the blocks that overlapped the sequence's last window, and cutting took
    those (the copy ended at 10,000: kept from 9,728); a hit deeper than the window's blocks
    recomputes it (sim.kvcache.lookup), an engine keeping every token's window rows never does."""
    pol = objects.policy(family, swa_checkpoints="rebuild")
    store = objects.store(pol, hbm_bytes=(pol.hbm_bytes(20_000, 1),), dram_gb=0.0)
    store.finish(7, 0, tokens=10_000, reserved_bytes=0.0, unpin_key=None, now_s=0.0, persist=False)
    store.reserve_hbm(0, pol.hbm_bytes(12_000, 1), 1.0)  # another request pushes 2,000+ tokens out
    left = store.hbm_tokens(7, 0)
    assert left == 7_936 and store.hbm_window_end(7, 0) == 10_000
    plan = plan_prefix(store, request(9_984, 12_000), 0, 2.0)
    assert (plan.tokens, plan.tier, plan.replay_tokens) == (7_936, 0, min(replay, 7_936))
    every = objects.policy(family, swa_replay_tokens=0, swa_pool=False, swa_persisted_with_prefix=True)
    store = objects.store(every, hbm_bytes=(every.hbm_bytes(20_000, 1),), dram_gb=0.0)
    store.finish(7, 0, tokens=10_000, reserved_bytes=0.0, unpin_key=None, now_s=0.0, persist=False)
    store.reserve_hbm(0, every.hbm_bytes(12_000, 1), 1.0)
    plan = plan_prefix(store, request(9_984, 12_000), 0, 2.0)
    assert (plan.tokens, plan.replay_tokens) == (7_936, 0)


def test_a_cut_that_leaves_the_window_blocks_keeps_the_window():
    pol = objects.policy("v41")
    store = objects.store(pol, hbm_bytes=(pol.hbm_bytes(20_000, 1),), dram_gb=0.0)
    store.finish(7, 0, tokens=10_100, reserved_bytes=0.0, unpin_key=None, now_s=0.0, persist=False)
    store.reserve_hbm(0, pol.hbm_bytes(9_800, 1), 1.0)  # only the partial last block [9,984, 10,100) goes
    assert store.hbm_tokens(7, 0) == 9_984
    plan = plan_prefix(store, request(9_984, 12_000), 0, 2.0)  # its window [9,856, 9,984) is in [9,728, ...)
    assert (plan.tokens, plan.tier, plan.replay_tokens) == (9_984, 0, 0)


def test_a_shared_prompt_hits_the_whole_blocks_of_a_shorter_or_cut_copy():
    pol = objects.policy("v41")
    store = _store(pol)
    store.retain_shared(99, 0, 956, 0.0)  # one session's system prompt: 956 tokens
    req = Request(2, 1, 0, 0, 8, None, 99, 0.0, 2_000, 10, 0, 984, 0, 0)  # another's: 984 of the same
    plan = plan_prefix(store, req, 0, 1.0)
    assert (plan.key, plan.tokens, plan.shared) == (99, 768, True)  # 3 whole blocks in common
    req = Request(3, 2, 0, 0, 9, None, 99, 0.0, 2_000, 10, 0, 900, 0, 0)
    assert plan_prefix(store, req, 0, 1.0).tokens == 768  # a part the copy covers: its whole blocks


def test_a_copy_leaving_host_dram_goes_to_the_rdma_pool_and_serves_another_node():
    pol = objects.policy("v4")
    pool = objects.tier("rdma_pool", 2, [50 * GB], 1000.0, scope="cluster")  # one unit shared by both nodes
    store = objects.store(pol, dram_ttl_s=100.0, pool=pool)
    store.finish(7, 0, tokens=10_240, reserved_bytes=0.0, unpin_key=None, now_s=0.0, persist=False)
    store.sweep(31.0)  # HBM keep over: to node 0's DRAM
    assert plan_prefix(store, request(10_240, 12_000), 1, 32.0) is None  # node 1 cannot reach it
    store.sweep(200.0)  # DRAM TTL over: to the pool
    dram, in_pool, _ssd = store.entries[7].copies
    assert dram is None and in_pool is not None and in_pool.unit == 0 and in_pool.tokens == 10_240
    assert store.counters.written_bytes["rdma_pool"] == pol.persist_bytes(10_240)
    plan = plan_prefix(store, request(10_240, 12_000), 1, 201.0)  # instance 1 on node 1
    assert plan is not None and store.tier_names[plan.tier] == "rdma_pool" and plan.tokens == 10_240
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


def test_requests_sharing_a_prompt_use_its_cached_blocks_in_place_and_reserve_them_once():
    """Two sessions beginning with the same 956-token system prompt on one instance: the first computes
    it and leaves its 3 whole blocks cached; the second (and any other) uses those blocks in place,
    reserving only the rest of its context, and they stay cached, most recent, after it."""
    pol = objects.policy("v41")
    store = objects.store(pol, hbm_bytes=(10 * GB,))
    (inst,) = objects.instances(store, [0])
    first = Request(1, 0, 0, 0, 8, None, 99, 0.0, 2_000, 1, 0, 956, 0, 0)
    inst.submit(first)
    assert not first.shared_held and first.reserved_p_bytes == inst.need_bytes(2_000)
    store.retain_shared(99, 0, 956, 0.0)  # its prefill is done
    assert store.hbm_tokens(99, 0) == 768 and store.hbm[0].cached(99) == 768 * 890.0
    others = [Request(2 + i, 1 + i, 0, 0, 9 + i, None, 99, 1.0, 3_000, 1, 0, 984, 0, 0) for i in range(2)]
    for req in others:
        inst.submit(req)
        assert req.shared_held and req.reserved_p_bytes == inst.need_bytes(3_000) - 768 * 890.0
    hbm = store.hbm[0]
    assert hbm.reserved_bytes == pytest.approx(
        inst.need_bytes(2_000) + 2 * (inst.need_bytes(3_000) - 768 * 890.0) + 768 * 890.0
    )
    assert 99 not in hbm.keys_lru_order()  # in use: cannot be evicted
    for req in others:
        store.finish(req.lineage, 0, tokens=3_001, reserved_bytes=req.reserved_p_bytes, unpin_key=None,
                     now_s=5.0, persist=False, shared_key=99, shared_held=True)  # fmt: skip
    assert hbm.keys_lru_order()[-1] == 99  # released by the last user: the most recently used
    assert hbm.reserved_bytes == pytest.approx(inst.need_bytes(2_000))


@settings(max_examples=80, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["finish", "reserve", "release", "lookup"]), st.integers(1, 4), st.integers(1, 40)
        ),
        max_size=30,
    )
)
def test_hits_are_whole_blocks_of_what_hbm_holds_and_hbm_never_overflows(ops):
    """HBM alone (no room below it): sessions finish, running requests reserve and release, turns look
    their prefix up. A cut run is whole blocks of its context; a hit never exceeds the run, the
    repeated part or the prompt less one token, and is whole blocks."""
    pol = objects.policy("v41")
    store = objects.store(pol, hbm_bytes=(pol.hbm_bytes(30_000, 1),), dram_gb=0.0)
    hbm = store.hbm[0]
    reserved: list[float] = []
    for t, (op, key, n) in enumerate(ops):
        tokens = n * 997  # not block multiples
        if op == "finish" and pol.hbm_bytes(tokens, 1) <= hbm.capacity_bytes - hbm.reserved_bytes:
            store.finish(
                key, 0, tokens=tokens, reserved_bytes=0.0, unpin_key=None, now_s=float(t), persist=False
            )
        elif op == "reserve" and hbm.can_reserve(pol.hbm_bytes(tokens, 1)):
            reserved.append(pol.hbm_bytes(tokens, 1))
            store.reserve_hbm(0, reserved[-1], float(t))
        elif op == "release" and reserved:
            store.reserve_hbm(0, -reserved.pop(), float(t))
        elif op == "lookup":
            held = store.hbm_tokens(key, 0)
            plan = plan_prefix(store, request(tokens, tokens + 500, parent=key), 0, float(t))
            if plan is not None:
                assert plan.tokens <= min(held, tokens, tokens + 499) and plan.tokens % 256 == 0
                assert plan.tier == 0 and plan.hbm_tokens == plan.tokens
        store.check_capacities()
        for k in hbm.keys_lru_order():
            left, whole = store.hbm_tokens(k, 0), store.hbm_window_end(k, 0)
            assert left == hbm.tokens(k) and (left == whole or (left < whole and left % 256 == 0))
