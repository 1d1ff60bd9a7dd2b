"""Prefix lookup across the tiers for one request on one instance -> a load plan.

Order: the instance's own HBM, its node's host DRAM, the SSD tier, else recompute. The hit is
the longest usable prefix over all tiers (each tier holds a prefix of the same lineage); the
part already in HBM is used in place, the rest is loaded from the fastest tier that covers it.
The last prompt token is always computed (its logits start the output). A cross-session shared
prompt prefix is used when it covers more than the lineage's own hit.

V4.1's SWA ring is needed whenever the hit is not a full in-HBM match: from the SWA pool if it
is still there (local node over PCIe, another node over RDMA), else the last
`swa_replay_tokens` tokens are recomputed (SWA bounded replay). V4 restores its ring with the
prefix (persisted with it), so it never replays.

The plan is a tuple (the lookup runs once per request):
    (key, tokens, tier, hbm_tokens, load_bytes, swa_node, replay_tokens, shared)
"""

from __future__ import annotations

from sim.cluster.request import Request
from sim.kvcache.store import KVStore

# (key, tokens, tier, hbm_tokens, load_bytes, swa_node, replay_tokens, shared)
Plan = tuple[int, int, str, int, float, int, int, bool]

TIER_OF = ("hbm", "dram", "ssd")


def _hit(store: KVStore, key: int, inst: int, node: int, now_s: float) -> tuple[int, int, int] | None:
    """(hbm, dram, ssd) tokens of `key` usable from instance `inst` on `node`, or None."""
    e = store.entries.get(key)
    if e is None:
        return None
    hbm = e.hbm.get(inst, 0)
    dram = e.dram_tokens if e.dram_node == node and e.dram_ready_s <= now_s else 0
    ssd = e.ssd_tokens if e.ssd_ready_s <= now_s else 0
    return hbm, dram, ssd


def plan_prefix(store: KVStore, req: Request, inst: int, node: int, now_s: float) -> Plan | None:
    """The load plan of `req` on instance `inst` (node `node`), or None when nothing is cached."""
    limit = req.input_tokens - 1
    best: tuple[int, int, int, int, int, bool] | None = (
        None  # (key, tokens, tier index, hbm tokens, cached tokens, shared)
    )
    key = req.parent_lineage
    if key is not None and req.prefix_tokens > 0:
        hit = _hit(store, key, inst, node, now_s)
        if hit is not None:
            hbm, dram, ssd = hit
            cached = max(hbm, dram, ssd)
            prefix = req.prefix_tokens
            if prefix >= cached:
                tokens = cached
            else:  # chained block hashes stop at the first partial block
                tokens = prefix - prefix % store.policy.block_tokens
            if tokens > limit:
                tokens = limit
            if tokens > 0:
                tier = 0 if hbm >= tokens else 1 if dram >= tokens else 2
                best = (key, tokens, tier, min(hbm, tokens), cached, False)
    skey = req.shared_key
    if skey is not None and req.shared_tokens > (best[1] if best else 0):
        hit = _hit(store, skey, inst, node, now_s)
        if hit is not None:
            hbm, dram, ssd = hit
            cached = max(hbm, dram, ssd)
            tokens = min(req.shared_tokens, limit)
            if cached >= req.shared_tokens and tokens > (best[1] if best else 0):
                tier = 0 if hbm >= tokens else 1 if dram >= tokens else 2
                best = (skey, tokens, tier, min(hbm, tokens), cached, True)
    if best is None:
        return None
    key, tokens, tier, hbm_tokens, cached, shared = best
    p = store.policy
    load_bytes = 0.0
    if tier:
        load_bytes = (tokens - hbm_tokens) * p.global_kv_bytes_per_token + p.persisted_state_bytes
    swa_node = -1
    replay = 0
    if p.swa_pool and not (tier == 0 and tokens == cached):
        node_ = store.swa_node_of(key, now_s) if tokens == cached else -1
        if node_ >= 0:
            swa_node = node_
        else:
            replay = min(p.swa_replay_tokens, tokens)
    return key, tokens, TIER_OF[tier], hbm_tokens, load_bytes, swa_node, replay, shared
