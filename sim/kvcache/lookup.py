"""Prefix lookup across the tiers for one request on one instance -> a load plan.

Order: the chain, fastest first (sim.kvcache.store): the instance's own HBM, then every tier below
it whose unit the instance reaches (default: its node's host DRAM, the RDMA pool unit its node
reaches when the chain has one, the SSD tier), else recompute. The hit is the longest usable prefix
over all tiers (each tier holds a prefix of the same lineage); the part already in HBM is used in
place, the rest is loaded from the fastest tier that covers it. A hit is whole blocks
(`CachePolicy.hit_tokens`: engines hash full blocks only) and leaves the last prompt token to compute
(its logits start the output). A cross-session shared prompt prefix is used when it covers more than
the lineage's own hit.

Every layer's sliding window (SWA, the last `swa_window_tokens` = 128 positions) must be restored
at the hit's end. Window states exist where a sequence ended: in HBM, the live one at the end of
the copy there; saved at completion - with the persisted prefix (V4) or in the host-DRAM SWA
pool (V4.1) - at the end of the request's input and of its output, DeepSeek's two "cache prefix
units" per request (hardware.md §4.1 [A]). Each is kept the way paged engines keep it, as the KV
blocks that overlap the window (SGLang's SWA radix cache, vLLM's sliding-window manager [B]), so
it also serves a hit that ends a little earlier, at a block boundary whose window lies inside
those blocks (`window_restorable`). An HBM copy whose tail was evicted (sim.kvcache.store: runs of
blocks cut from the tail) keeps what is left of those blocks: its window is judged at where its
sequence ended, so a hit on the head left finds a window only while the blocks overlapping it remain;
deeper, the window is recomputed like any other miss (what an engine keeping the last window only
must do: SGLang falls back to a shorter match or recomputes, vLLM's hybrid manager needs the window's
blocks; sim.model.kv). That is the common case on real sessions: a turn repeats its
parent's input up to the last block boundary, not its output (Weka dev trace: every hit ends
inside the parent's input, 95 % in its last 64-token block). A hit elsewhere needs a window the
engine no longer holds, so it is recomputed: `swa_replay_tokens` cached tokens re-run - V4.1's
bounded replay of 128 (vLLM #56227), V4's exact rebuild of the window's receptive field (SGLang
#31713). That is V4's `swa_checkpoints: sequence_ends`, SGLang's rule; an engine that keeps V4's windows
elsewhere reads them there and never replays (sim.config.engine_rules, `_at_checkpoint`): `every_block`
(vLLM 0.23-0.26: the window blocks before every block boundary keep their hash until reused, so a hit
served from HBM is whole; below HBM it ends at the last prompt checkpoint) and `prompt_ends` (vLLM 0.28:
windows only at each request's prompt end, (prompt - 1) rounded down to a block, and where a request's hit
ended; a hit elsewhere ends at the deepest such checkpoint or misses, and the engine then keeps a window
there, #47782). Assumptions [D]: under sequence_ends, blocks that slid out of the window are freed at once
(SGLang's SWA radix cache); under every_block the kept window blocks cost no HBM (they sit among the
evictable free blocks, and are taken to live as long as the copy's own blocks); the saved bytes stay one state (`swa_state_bytes`, + compressor state for V4), not two, nor
the up to block_tokens - 1 extra slots of their blocks. The block size decides a lot: with 256-token
blocks a hit rounded down from the 64-token blocks of real traces finds its window about half the
time (the prompt's last 256-block boundary is more than 128 tokens back otherwise); with 64, always.

The lookup runs once per request; its answer is a `Plan`.
"""

from __future__ import annotations

from sim.core.request import Request
from sim.kvcache.store import Entry, KVStore, hbm_slot


class Plan:
    """Where a request's cached prefix comes from (a plain class: one is made per request, and
    compiled code builds it natively, where a dataclass would run its generated `__init__`)."""

    __slots__ = (
        "key", "tokens", "tier", "hbm_tokens", "load_bytes", "swa_node", "replay_tokens", "shared", "junction_tokens",
    )  # fmt: skip

    def __init__(
        self,
        key: int,  # the entry used (the lineage's parent, or a shared prompt prefix)
        tokens: int,  # prompt tokens served from cache
        tier: int,  # chain index of the tier that serves the part not in HBM (0: all in HBM)
        hbm_tokens: int,  # the part already in this instance's HBM, used in place
        load_bytes: float,  # bytes loaded from `tier` (0 when all in HBM)
        swa_node: int,  # V4.1: the node whose SWA pool restores the window (-1: none)
        replay_tokens: int,  # cached tokens recomputed to rebuild the window
        shared: bool,  # a shared prompt prefix, not the lineage's own context
        junction_tokens: int = 0,  # prompt_ends: the longer hit the window cut short, kept as a checkpoint
    ) -> None:
        self.key = key
        self.tokens = tokens
        self.tier = tier
        self.hbm_tokens = hbm_tokens
        self.load_bytes = load_bytes
        self.swa_node = swa_node
        self.replay_tokens = replay_tokens
        self.shared = shared
        self.junction_tokens = junction_tokens

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"Plan({fields})"


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


def _cached(store: KVStore, e: Entry, inst: int, now_s: float) -> int:
    """The most tokens of `e` any tier holds for instance `inst` now (HBM, or a unit it reaches)."""
    slot = hbm_slot(e, inst)
    best = slot.tokens if slot is not None else 0
    for t in store.tiers:
        c = e.copies[t.pos]
        if c is not None and c.tokens > best and c.unit == t.unit_of_instance[inst] and c.ready_s <= now_s:
            best = c.tokens
    return best


def _fastest(store: KVStore, e: Entry, inst: int, now_s: float, tokens: int) -> int:
    """Chain index of the fastest tier holding `tokens` of `e` for instance `inst` (0: its HBM)."""
    slot = hbm_slot(e, inst)
    if slot is not None and slot.tokens >= tokens:
        return 0
    for t in store.tiers:
        c = e.copies[t.pos]
        if c is not None and c.tokens >= tokens and c.unit == t.unit_of_instance[inst] and c.ready_s <= now_s:
            return t.pos + 1
    raise AssertionError("no tier holds the hit")  # `tokens` never exceeds what _cached found


def plan_prefix(store: KVStore, req: Request, inst: int, now_s: float) -> Plan | None:
    """The load plan of `req` on instance `inst`, or None when nothing is cached."""
    p = store.policy
    best: Entry | None = None
    best_tokens = 0
    best_cached = 0
    shared = False
    key = req.parent_lineage
    if key is not None and req.prefix_tokens > 0:
        e = store.entry(key)
        if e is not None:
            cached = _cached(store, e, inst, now_s)
            tokens = p.hit_tokens(cached, req.prefix_tokens, req.input_tokens)
            if tokens > 0:
                best, best_tokens, best_cached = e, tokens, cached
    skey = req.shared_key
    if skey is not None and req.shared_tokens > best_tokens:
        e = store.entry(skey)
        if e is not None:
            cached = _cached(store, e, inst, now_s)
            # whole blocks of the shared prompt: the copy may be another request's shorter shared part,
            # or cut short in HBM
            tokens = p.hit_tokens(cached, req.shared_tokens, req.input_tokens)
            if tokens > best_tokens:
                best, best_tokens, best_cached, shared = e, tokens, cached, True
    if best is None:
        return None
    tokens, cached = best_tokens, best_cached
    if p.swa_checkpoints != "sequence_ends" and p.swa_replay_tokens and not p.swa_pool and not shared:
        return _at_checkpoint(store, best, inst, now_s, tokens)
    tier = _fastest(store, best, inst, now_s, tokens)
    slot = hbm_slot(best, inst)
    hbm_tokens = min(slot.tokens, tokens) if slot is not None else 0
    load_bytes = 0.0
    if tier:
        load_bytes = (tokens - hbm_tokens) * p.global_kv_bytes_per_token + p.persisted_state_bytes
    # where the window comes from: HBM (the live sequence), the persisted prefix, the pool, or replay
    window, block = p.swa_window_tokens, p.block_tokens
    if slot is not None and tier == 0:
        restorable = window_restorable(slot.whole_tokens, tokens, window, block)
    else:
        prompt = best.prompt_tokens
        restorable = window_restorable(cached, tokens, window, block) or (
            prompt > 0 and window_restorable(prompt, tokens, window, block)
        )
    swa_node = -1
    replay = 0
    if tier and p.swa_pool and restorable:
        swa_node = store.swa_node_of(best.key, now_s)
    if not restorable or (tier and not p.swa_persisted_with_prefix and swa_node < 0):
        replay = min(p.swa_replay_tokens, tokens)
    return Plan(best.key, tokens, tier, hbm_tokens, load_bytes, swa_node, replay, shared)


def prompt_checkpoint(prompt_tokens: int, block_tokens: int) -> int:
    """Where an engine keeping windows at prompt ends keeps one for a prompt of `prompt_tokens`: the last
    block boundary a hit can reach, short of the last prompt token (vLLM's replay boundary,
    (num_prompt_tokens - 1) rounded down to a block); 0 for no prompt."""
    return (prompt_tokens - 1) // block_tokens * block_tokens if prompt_tokens > 0 else 0


def _at_checkpoint(store: KVStore, e: Entry, inst: int, now_s: float, tokens: int) -> Plan | None:
    """A hit of `tokens` of `e` on an engine that reads V4's windows where it kept them and never replays
    (`swa_checkpoints` every_block or prompt_ends, module doc): served from HBM under every_block it is
    whole; otherwise it ends at the deepest checkpoint at or before `tokens` (the lineage's last prompt
    end, or under prompt_ends the junction an earlier turn kept), or there is none. Under prompt_ends the
    plan carries the junction this request keeps (a plan of 0 tokens where only that is left)."""
    p = store.policy
    slot = hbm_slot(e, inst)
    in_hbm = slot is not None and slot.tokens >= tokens
    # prompt_ends: after this request the window at the full hit is kept either way, read or pinned where the
    # hit was cut short (#47782); its blocks are the same for every later turn repeating that far
    junction = tokens if p.swa_checkpoints == "prompt_ends" else 0
    if not (in_hbm and p.swa_checkpoints == "every_block"):
        kept = prompt_checkpoint(e.prompt_tokens, p.block_tokens)
        if kept > tokens:
            kept = 0
        if junction and kept < e.junction_tokens <= tokens:
            kept = e.junction_tokens
        tokens = kept
        if tokens <= 0:
            return Plan(e.key, 0, 0, 0, 0.0, -1, 0, False, junction) if junction else None
    tier = _fastest(store, e, inst, now_s, tokens)
    hbm_tokens = min(slot.tokens, tokens) if slot is not None else 0
    load_bytes = (
        (tokens - hbm_tokens) * p.global_kv_bytes_per_token + p.persisted_state_bytes if tier else 0.0
    )
    return Plan(e.key, tokens, tier, hbm_tokens, load_bytes, -1, 0, False, junction)
