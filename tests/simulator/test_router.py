"""Routing policies on small real instances: the cache-aware router follows the prefix unless the
holder is overloaded; ties go to the lowest index; round robin cycles per role."""

from types import SimpleNamespace

from sim.kvcache.store import Entry
from sim.kvcache.tiers import Slot
from sim.sched.router import Router

from . import objects


def _setup(policy, loads, held=None, weights=(2.0, 1.0, 1.0)):
    """A router and instances 0.. with these queue depths (queued prompt tokens as front instances, the
    same number of sequences held as decode ones; 100 B of KV memory each, none reserved); `held` = tokens
    of lineage 7 cached in instance 1's HBM."""
    st = objects.store(objects.policy("v41"), hbm_bytes=[100.0] * len(loads))
    insts = objects.instances(st, [0] * len(loads))
    for inst, load in zip(insts, loads, strict=True):
        inst.queued_prompt_tokens, inst.held_sequences = load, int(load)
    if held is not None:
        entry = st.entries[7] = Entry(7, len(st.tiers))
        entry.hbm.append(Slot(7, 0.0, held, 0.0, 1))
    w = SimpleNamespace(prefix_hit=weights[0], queue_depth=weights[1], kv_usage=weights[2])
    return Router(policy, w, st), insts


def test_cache_aware_follows_the_instance_holding_the_prefix():
    router, insts = _setup("cache_aware", [0.0, 500.0, 0.0], held=900)
    # holder 1: 2 * 0.9 (prefix) + 1 * (1 - 500/500) + 1 = 2.8 beats idle instance 0: 0 + 1 + 1 = 2
    assert router.route(objects.request(900, 1000), insts, "front").index == 1


def test_cache_aware_leaves_an_overloaded_holder_when_the_prefix_is_small():
    router, insts = _setup("cache_aware", [0.0, 500.0], held=100)
    # holder: 2 * 0.1 + 0 + 1 = 1.2 < idle: 0 + 1 + 1 = 2
    assert router.route(objects.request(100, 1000), insts, "front").index == 0


def test_ties_go_to_the_lowest_index():
    for policy in ("cache_aware", "least_loaded"):
        router, insts = _setup(policy, [10.0, 10.0])
        assert router.route(objects.request(900, 1000), insts, "front").index == 0


def test_least_loaded_and_round_robin():
    router, insts = _setup("least_loaded", [5.0, 1.0, 3.0])
    assert router.route(objects.request(900, 1000), insts, "decode").index == 1
    rr, insts = _setup("round_robin", [5.0, 1.0, 3.0])
    req = objects.request(900, 1000)
    assert [rr.route(req, insts, "front").index for _ in range(4)] == [0, 1, 2, 0]
    assert rr.route(req, insts, "decode").index == 0  # its own turn counter per role
