"""Small real objects of the simulator core for unit tests (a request, a store, instances).

Real ones, not stand-ins: the core is compiled (sim/native.py), and its typed functions accept
only the classes they declare."""

from types import SimpleNamespace

import simpy

from sim.cluster.instance import Instance
from sim.cluster.link import FifoLink, SharedLink
from sim.cluster.request import Request
from sim.kvcache.policies import CachePolicy
from sim.kvcache.store import KVStore

GB = 1e9


def policy(family: str, **kw) -> CachePolicy:
    base = dict(
        family=family,
        global_kv_bytes_per_token=890.0 if family == "v41" else 3514.25,  # model.md §5.1
        swa_state_bytes=2_703_360.0 if family == "v41" else 3_214_336.0,  # model.md §5.2
        compressor_state_bytes=24_576.0 if family == "v41" else 12_206_080.0,
        swa_persisted_with_prefix=family == "v4",
        swa_pool=family == "v41",
        swa_pool_dram_frac=0.1,
        swa_ttl_s=300.0,
        swa_window_tokens=128,  # model.md §1
        swa_replay_tokens=128 if family == "v41" else 5_632,  # sim.model.swa_rebuild_tokens
        block_tokens=256,
        hbm_keep_s=30.0,
        demote_to_dram=True,
        dram_ttl_s=600.0,
        persist_to_ssd=True,
        ssd_retention_s=259_200.0 if family == "v41" else 0.0,
        ssd_ttl_s=259_200.0,
    )
    return CachePolicy(**{**base, **kw})


def store(pol: CachePolicy, hbm_bytes=(10 * GB, 10 * GB), dram_gb=100.0) -> KVStore:
    """Instance i on node i; fast links so writes are ready at once."""
    n = len(hbm_bytes)
    return KVStore(
        pol,
        hbm_capacity_bytes=list(hbm_bytes),
        instance_node=list(range(n)),
        kv_replication=[1] * n,
        d2h_links=[FifoLink(f"d2h{i}", 1e15) for i in range(n)],
        dram_capacity_bytes=[dram_gb * GB] * n,
        swa_pool_capacity_bytes=[10 * GB if pol.swa_pool else 0.0] * n,
        ssd_capacity_bytes=1000 * GB,
        ssd_write_links=[FifoLink(f"w{i}", 1e15) for i in range(n)],
    )


def request(prefix: int, inp: int, *, parent: int | None = 7, out: int = 1) -> Request:
    """A turn of lineage 7 that repeats `prefix` tokens of its parent's context."""
    return Request(1, 0, 1, 0, 7, parent, None, 0.0, inp, out, prefix, 0, 0, 0)


def instances(st: KVStore, nodes: list[int]) -> list[Instance]:
    """One prefill instance per entry of `nodes` over the store's HBM tiers (instance i: tier i)."""
    env = simpy.Environment()
    timing = SimpleNamespace(verified_tokens_per_step=1, accepted_tokens_per_step=1.0)
    link = SharedLink(env, "link", 1e12)
    return [
        Instance(env, i, "p", "prefill", node, 8, timing, st, budget_tokens=8192, chunk_tokens=8192,
                 max_decode_batch=64, kv_replication=1, h2d=link, ssd_read=link, max_queue_wait_s=None)
        for i, node in enumerate(nodes)
    ]  # fmt: skip
