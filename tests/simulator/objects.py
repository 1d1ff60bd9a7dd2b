"""Small real objects of the simulator core for unit tests (a request, a store, instances).

Real ones, not stand-ins: the core is compiled (sim/native.py), and its typed functions accept
only the classes they declare."""

from types import SimpleNamespace

from sim.cluster.cluster import Cluster
from sim.cluster.events import EventLoop
from sim.cluster.instance import Instance
from sim.cluster.link import FifoLink, SharedLink
from sim.core.request import Request
from sim.kvcache.paths import PathCost
from sim.kvcache.policies import CachePolicy
from sim.kvcache.store import KVStore, StoreTier
from sim.metrics.recorder import Recorder
from sim.sched.router import Router

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
        persist_prefixes=True,
        retention_s=259_200.0 if family == "v41" else 0.0,
    )
    return CachePolicy(**{**base, **kw})


def tier(
    name: str,
    n: int,
    caps: list[float],
    ttl_s: float,
    *,
    scope: str = "node",
    demote: bool = True,
    unit_of_node: list[int] | None = None,
    retention_s: float = 0.0,
) -> StoreTier:
    """A tier below HBM over `n` instances, instance i on node i, with instant writes."""
    of_node = unit_of_node if unit_of_node is not None else (list(range(n)) if scope == "node" else [0] * n)
    links = [FifoLink(f"{name}{i}", 1e15) for i in range(n)]
    return StoreTier(name, scope=scope, capacity_bytes=caps, ttl_s=ttl_s, unit_of_instance=of_node,
                     unit_of_node=of_node, demote=demote, retention_s=retention_s, read=PathCost(),
                     write=PathCost(), write_links_instance=links, write_links_node=links)  # fmt: skip


def store(
    pol: CachePolicy,
    hbm_bytes=(10 * GB, 10 * GB),
    dram_gb=100.0,
    *,
    dram_ttl_s=600.0,
    pool: StoreTier | None = None,
) -> KVStore:
    """Instance i on node i: host DRAM per node, an optional pool, a cluster SSD tier; fast links so writes
    are ready at once."""
    n = len(hbm_bytes)
    ssd = tier("ssd", n, [1000 * GB], 259_200.0, scope="cluster", demote=False, retention_s=pol.retention_s)
    return KVStore(
        pol,
        hbm_capacity_bytes=list(hbm_bytes),
        instance_node=list(range(n)),
        kv_replication=[1] * n,
        tiers=[tier("dram", n, [dram_gb * GB] * n, dram_ttl_s), *([pool] if pool else []), ssd],
        swa_pool_capacity_bytes=[10 * GB if pol.swa_pool else 0.0] * n,
        swa_write_links=[FifoLink(f"d2h{i}", 1e15) for i in range(n)],
    )  # fmt: skip


def request(prefix: int, inp: int, *, parent: int | None = 7, out: int = 1) -> Request:
    """A turn of lineage 7 that repeats `prefix` tokens of its parent's context."""
    return Request(1, 0, 1, 0, 7, parent, None, 0.0, inp, out, prefix, 0, 0, 0)


def cluster(env, st: KVStore, make, *, net_out: list[SharedLink], recorder=None) -> Cluster:
    """A cluster over `st` whose instances `make(cluster)` makes (sim.cluster.cluster): cache-aware routing,
    no queue limit, contexts up to 1M tokens; a recorder that writes nothing unless one is given."""
    weights = SimpleNamespace(prefix_hit=2.0, queue_depth=1.0, kv_usage=1.0)
    if recorder is None:
        recorder = Recorder(None, slo_ttft_s=10.0, slo_tpot_s=1.0, tiers=["dram", "ssd"])
    return Cluster(env, instances=make, net_out=net_out, store=st, router=Router("cache_aware", weights, st),
                   recorder=recorder, max_context_tokens=1_000_000, max_queue_per_instance=None)  # fmt: skip


def instances(st: KVStore, nodes: list[int]) -> list[Instance]:
    """One prefill instance per entry of `nodes` over the store's HBM tiers (instance i: tier i)."""
    env = EventLoop()
    # a step of any batch takes 1 ms (admission tests start steps; nothing here depends on their length)
    timing = SimpleNamespace(
        verified_tokens_per_step=1, accepted_tokens_per_step=1.0, step_s=lambda *_: 1e-3, power_limit=None
    )
    link = SharedLink(env, "link", 1e12)
    return cluster(env, st, lambda c: [
        Instance(env, i, "p", "prefill", node, 8, timing, st, cluster=c, budget_tokens=8192, chunk_tokens=8192,
                 max_decode_batch=64, kv_replication=1, read_links=[None, *[link] * len(st.tiers)],
                 max_queue_wait_s=None)
        for i, node in enumerate(nodes)
    ], net_out=[link]).instances  # fmt: skip
