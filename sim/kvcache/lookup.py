"""Prefix lookup across the tiers for one request on one instance -> a load plan.

Order: the instance's own HBM, its node's host DRAM, the RDMA pool unit its node reaches (when the
chain has one), the SSD tier, else recompute. The hit is
the longest usable prefix over all tiers (each tier holds a prefix of the same lineage); the
part already in HBM is used in place, the rest is loaded from the fastest tier that covers it.
The last prompt token is always computed (its logits start the output). A cross-session shared
prompt prefix is used when it covers more than the lineage's own hit.

Every layer's sliding window (SWA, the last `swa_window_tokens` = 128 positions) must be restored
at the hit's end. Window states exist where a sequence ended: in HBM, the live one at the end of
the copy there; saved at completion - with the persisted prefix (V4) or in the host-DRAM SWA
pool (V4.1) - at the end of the request's input and of its output, DeepSeek's two "cache prefix
units" per request (hardware.md §4.1 [A]). Each is kept the way paged engines keep it, as the KV
blocks that overlap the window (SGLang's SWA radix cache, vLLM's sliding-window manager [B]), so
it also serves a hit that ends a little earlier, at a block boundary whose window lies inside
those blocks (`window_restorable`). That is the common case on real sessions: a turn repeats its
parent's input up to the last block boundary, not its output (Weka dev trace: every hit ends
inside the parent's input, 95 % in its last 64-token block). A hit elsewhere needs a window the
engine no longer holds, so it is recomputed: `swa_replay_tokens` cached tokens re-run - V4.1's
bounded replay of 128 (vLLM #56227), V4's exact rebuild of the window's receptive field (SGLang
#31713). Assumptions [D]: blocks that slid out of the window are freed at once (SGLang's SWA radix
cache; an engine leaving them cached until evicted, like vLLM's free queue, would serve deeper
hits); the saved bytes stay one state (`swa_state_bytes`, + compressor state for V4), not two, nor
the up to block_tokens - 1 extra slots of their blocks. The block size decides a lot: with 256-token
blocks a hit rounded down from the 64-token blocks of real traces finds its window about half the
time (the prompt's last 256-block boundary is more than 128 tokens back otherwise); with 64, always.

The plan is a tuple (the lookup runs once per request):
    (key, tokens, tier, hbm_tokens, load_bytes, swa_node, replay_tokens, shared)
"""

from __future__ import annotations

from sim.cluster.request import Request
from sim.kvcache.store import KVStore

# (key, tokens, tier, hbm_tokens, load_bytes, swa_node, replay_tokens, shared)
Plan = tuple[int, int, str, int, float, int, int, bool]

TIER_OF = ("hbm", "dram", "rdma_pool", "ssd")


def window_restorable(end_tokens: int, hit_tokens: int, window_tokens: int, block_tokens: int) -> bool:
    """Whether the window state saved at position `end_tokens` serves a hit ending at `hit_tokens`:
    the hit's window [hit - window, hit) lies inside the blocks that overlapped the saved window,
    [(end - window) rounded down to a block, end)."""
    if hit_tokens == end_tokens:
        return True
    if hit_tokens > end_tokens:
        return False
    kept_from = max(end_tokens - window_tokens, 0) // block_tokens * block_tokens
    return max(hit_tokens - window_tokens, 0) >= kept_from


def _hit(store: KVStore, key: int, inst: int, node: int, now_s: float) -> tuple[int, int, int, int] | None:
    """(hbm, dram, rdma pool, ssd) tokens of `key` usable from instance `inst` on `node`, or None."""
    e = store.entries.get(key)
    if e is None:
        return None
    hbm = e.hbm.get(inst, 0)
    dram = e.dram_tokens if e.dram_node == node and e.dram_ready_s <= now_s else 0
    pool = 0
    if e.pool_unit >= 0 and e.pool_unit == store.pool_unit_of_node[node] and e.pool_ready_s <= now_s:
        pool = e.pool_tokens
    ssd = e.ssd_tokens if e.ssd_ready_s <= now_s else 0
    return hbm, dram, pool, ssd


def _fastest(hbm: int, dram: int, pool: int, tokens: int) -> int:
    """Index in TIER_OF of the fastest tier holding `tokens`."""
    return 0 if hbm >= tokens else 1 if dram >= tokens else 2 if pool >= tokens else 3


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
            hbm, dram, pool, ssd = hit
            cached = max(hbm, dram, pool, ssd)
            prefix = req.prefix_tokens
            if prefix >= cached:
                tokens = cached
            else:  # chained block hashes stop at the first partial block
                tokens = prefix - prefix % store.policy.block_tokens
            if tokens > limit:
                tokens = limit
            if tokens > 0:
                best = (key, tokens, _fastest(hbm, dram, pool, tokens), hbm, cached, False)
    skey = req.shared_key
    if skey is not None and req.shared_tokens > (best[1] if best else 0):
        hit = _hit(store, skey, inst, node, now_s)
        if hit is not None:
            hbm, dram, pool, ssd = hit
            cached = max(hbm, dram, pool, ssd)
            tokens = min(req.shared_tokens, limit)
            if cached >= req.shared_tokens and tokens > (best[1] if best else 0):
                best = (skey, tokens, _fastest(hbm, dram, pool, tokens), hbm, cached, True)
    if best is None:
        return None
    key, tokens, tier, hbm, cached, shared = best
    hbm_tokens = min(hbm, tokens)
    p = store.policy
    load_bytes = 0.0
    if tier:
        load_bytes = (tokens - hbm_tokens) * p.global_kv_bytes_per_token + p.persisted_state_bytes
    # where the window comes from: HBM (the live sequence), the persisted prefix, the pool, or replay
    window, block = p.swa_window_tokens, p.block_tokens
    if tier == 0:
        restorable = window_restorable(hbm, tokens, window, block)
    else:
        prompt = store.entries[key].prompt_tokens
        restorable = window_restorable(cached, tokens, window, block) or (
            prompt > 0 and window_restorable(prompt, tokens, window, block)
        )
    swa_node = -1
    replay = 0
    if tier and p.swa_pool and restorable:
        swa_node = store.swa_node_of(key, now_s)
    if not restorable or (tier and not p.swa_persisted_with_prefix and swa_node < 0):
        replay = min(p.swa_replay_tokens, tokens)
    return key, tokens, TIER_OF[tier], hbm_tokens, load_bytes, swa_node, replay, shared
