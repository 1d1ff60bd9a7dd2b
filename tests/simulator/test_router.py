"""Routing policies on stand-in instances: the cache-aware router follows the prefix unless the
holder is overloaded; ties go to the lowest index; round robin cycles per role."""

from types import SimpleNamespace

from sim.sched.router import Router


def _inst(index, load, node=0, reserved=0.0):
    return SimpleNamespace(index=index, node=node, load=load, inv_kv_capacity=1.0 / 100.0,
                           hbm=SimpleNamespace(reserved_bytes=reserved))  # fmt: skip


def _router(policy, store_entries=None, weights=(2.0, 1.0, 1.0)):
    w = SimpleNamespace(prefix_hit=weights[0], queue_depth=weights[1], kv_usage=weights[2])
    return Router(policy, w, SimpleNamespace(entries=store_entries or {}))


def _req(prefix=900, inp=1000):
    return SimpleNamespace(parent_lineage=5, prefix_tokens=prefix, input_tokens=inp)


def test_cache_aware_follows_the_instance_holding_the_prefix():
    entries = {5: SimpleNamespace(hbm={1: 900}, dram_node=-1)}
    insts = [_inst(0, 0.0), _inst(1, 500.0), _inst(2, 0.0)]
    # holder 1: 2 * 0.9 (prefix) + 1 * (1 - 500/500) + 1 = 2.8 beats idle instance 0: 0 + 1 + 1 = 2
    assert _router("cache_aware", entries).route(_req(), insts, "front").index == 1


def test_cache_aware_leaves_an_overloaded_holder_when_the_prefix_is_small():
    entries = {5: SimpleNamespace(hbm={1: 100}, dram_node=-1)}
    insts = [_inst(0, 0.0), _inst(1, 500.0)]
    # holder: 2 * 0.1 + 0 + 1 = 1.2 < idle: 0 + 1 + 1 = 2
    assert _router("cache_aware", entries).route(_req(prefix=100), insts, "front").index == 0


def test_ties_go_to_the_lowest_index():
    insts = [_inst(3, 10.0), _inst(4, 10.0)]
    assert _router("cache_aware").route(_req(), insts, "front").index == 3
    assert _router("least_loaded").route(_req(), insts, "front").index == 3


def test_least_loaded_and_round_robin():
    insts = [_inst(0, 5.0), _inst(1, 1.0), _inst(2, 3.0)]
    assert _router("least_loaded").route(_req(), insts, "decode").index == 1
    rr = _router("round_robin")
    assert [rr.route(_req(), insts, "front").index for _ in range(4)] == [0, 1, 2, 0]
    assert rr.route(_req(), insts, "decode").index == 0  # its own turn counter per role
