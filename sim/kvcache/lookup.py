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
at the hit's end. Each kept window is kept the way paged engines keep it, as the KV blocks that overlap
it (SGLang's SWA radix cache, vLLM's sliding-window manager [B]), so it also serves a hit that ends a
little earlier, at a block boundary whose window lies inside those blocks (`window_restorable`). Where
windows are kept, and what a hit without one does, is the engine's (`swa_checkpoints`,
sim.config.engine_rules; V4's family; V4.1 keeps DeepSeek's own pool, below):
- `sequence_ends` (SGLang's main; no engine: DeepSeek's two "cache prefix units" per request, at the
  end of its input and of its output, hardware.md §4.1 [A]): windows where the last request's prompt
  ended, at its prefill's chunk ends and where its sequence ended (the HBM copy's end, or what a lower
  tier holds), each with the page before, and the one an earlier turn's hit read (a node of the same
  tree); a hit elsewhere ends at the deepest of them at or before it, or misses. That is the common case on real sessions: a
  turn repeats its parent's input up to the last block boundary, not its output (Weka dev trace: every
  hit ends inside the parent's input, 95 % in its last 64-token block).
- `every_block` (vLLM 0.23-0.26, SGLang 0.5.15-0.5.16): a window at every block boundary while the blocks
  are in HBM, so a hit served from HBM is whole; below HBM as `sequence_ends`.
- `prompt_ends` (vLLM 0.28): windows at each request's prompt checkpoint, (prompt - 1) rounded down to a
  block, and where an earlier turn's hit ended; a hit elsewhere ends at the deepest of them or misses, and
  the engine keeps a window where it would have ended for the next turn (#47782).
- `rebuild` (a what-if; no engine's default): as `sequence_ends`, but a hit elsewhere re-runs the
  window's receptive field, `swa_replay_tokens` (SGLang #31713, opt-in and unmerged).
V4.1's windows are in a host-DRAM pool; a hit whose window is gone from it replays the last 128 tokens
(bounded replay, vLLM #56227). An HBM copy whose tail was evicted (sim.kvcache.store: runs of blocks
cut from the tail) keeps what is left of those blocks: its window is judged at where its sequence
ended. Assumptions [D]: an engine's kept windows cost no HBM beyond the per-sequence state (vLLM's sit
among its evictable free blocks; SGLang's SWA pool, a tenth of the full pool's tokens for V4, and its
own eviction are not modelled) and live as long as the copy's own blocks; SGLang's chunk ends fall every
pool chunk from where the last prefill began (a step's budget can end a chunk earlier); the saved bytes stay one state (`swa_state_bytes`, + compressor state for V4), not two,
nor the up to block_tokens - 1 extra slots of their blocks. The block size decides a lot: with 256-token
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
        junction_tokens: int = 0,  # the window this request keeps for its lineage (`_at_checkpoint`)
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


def window_restorable(
    end_tokens: int, hit_tokens: int, window_tokens: int, block_tokens: int, keep_tokens: int = 0
) -> bool:
    """Whether the window state saved at position `end_tokens` serves a hit ending at `hit_tokens`:
    the hit's window [hit - window, hit) lies inside the blocks kept over the last `keep_tokens` before
    `end` (the saved window's, `window_tokens`, unless more is kept), [(end - keep) rounded down to a
    block, end)."""
    if hit_tokens == end_tokens:
        return True
    if hit_tokens > end_tokens:
        return False
    keep = keep_tokens if keep_tokens > window_tokens else window_tokens
    kept_from = max(end_tokens - keep, 0) // block_tokens * block_tokens
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
    # V4 on an engine that keeps its windows and never re-runs one (every mode but `rebuild`)
    kept_only = p.swa_checkpoints != "rebuild" and p.swa_replay_tokens > 0 and not p.swa_pool
    if kept_only and not shared:
        return _at_checkpoint(store, best, inst, now_s, tokens, cached)
    tier = _fastest(store, best, inst, now_s, tokens)
    slot = hbm_slot(best, inst)
    hbm_tokens = min(slot.tokens, tokens) if slot is not None else 0
    load_bytes = 0.0
    if tier:
        load_bytes = (tokens - hbm_tokens) * p.global_kv_bytes_per_token + p.persisted_state_bytes
    # where the window comes from: HBM (the live sequence), the persisted prefix, the pool, or replay
    window, block = p.swa_window_tokens, p.block_tokens
    keep = (
        block if kept_only else window
    )  # an engine keeps the page before a kept window (`window_at_or_before`)
    if slot is not None and tier == 0:
        restorable = window_restorable(slot.whole_tokens, tokens, window, block, keep)
    else:
        prompt = best.prompt_tokens
        restorable = window_restorable(cached, tokens, window, block, keep) or (
            prompt > 0 and window_restorable(prompt, tokens, window, block, keep)
        )
    if kept_only:
        # a shared prompt: its window is at its cached end (sim.kvcache.store.retain_shared), or in HBM
        restorable = restorable or (tier == 0 and p.swa_checkpoints == "every_block")
        if not restorable:
            return None
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


def window_at_or_before(end_tokens: int, hit_tokens: int, window_tokens: int, block_tokens: int) -> int:
    """The deepest block boundary at or before `hit_tokens` whose window an engine keeping the last pages of a
    prompt or sequence ending at `end_tokens` has, or 0. It keeps the pages covering the last max(window,
    block) tokens (SGLang frees the window slots below the length less max(window, page), page-floored:
    common.free_swa_out_of_window_slots), so the last block boundary before `end` always has its window."""
    m = min(hit_tokens, end_tokens)
    m -= m % block_tokens
    return m if m > 0 and window_restorable(end_tokens, m, window_tokens, block_tokens, block_tokens) else 0


def _chunk_end_window(e: Entry, tokens: int, window: int, block: int) -> int:
    """sequence_ends: the deepest window at or before `tokens` kept at a chunk end of the lineage's last prefill
    (SGLang keeps the window before each extend's end, from where its hit ended every chunk), or 0."""
    c, start = e.chunk_tokens, e.chunk_from_tokens
    if c <= 0 or tokens <= start:
        return 0
    k = (tokens - start) // c
    best = window_at_or_before(start + k * c, tokens, window, block) if k > 0 else 0
    after = start + (k + 1) * c  # the next chunk's end, if the hit lies in its kept pages
    if after < e.prompt_tokens:
        best = max(best, window_at_or_before(after, tokens, window, block))
    return best


def _at_checkpoint(
    store: KVStore, e: Entry, inst: int, now_s: float, tokens: int, cached: int
) -> Plan | None:
    """A hit of `tokens` of `e` on an engine that reads V4's windows where it kept them and never rebuilds one
    (`swa_checkpoints`, module doc): served from HBM under every_block it is whole; otherwise it ends at the
    deepest kept window at or before `tokens`, or there is none. Kept windows: the one an earlier turn of the
    lineage read or pinned (`junction_tokens`), and under prompt_ends the last prompt checkpoint, else where
    that prompt ended, its prefill's chunk ends and where the sequence ended (the HBM copy's end, `cached`
    below HBM). The plan carries the
    window this request keeps for its lineage: the one it read, or under prompt_ends the full hit it pinned (a
    plan of 0 tokens where only that is left)."""
    p = store.policy
    mode = p.swa_checkpoints
    slot = hbm_slot(e, inst)
    in_hbm = slot is not None and slot.tokens >= tokens
    # prompt_ends: after this request the window at the full hit is kept either way, read or pinned where the
    # hit was cut short (#47782); its blocks are the same for every later turn repeating that far
    pinned = tokens if mode == "prompt_ends" else 0
    if not (in_hbm and mode == "every_block"):
        # the window an earlier turn of the lineage read or pinned stays too, in the same blocks
        kept = e.junction_tokens if e.junction_tokens <= tokens else 0
        if pinned:
            checkpoint = prompt_checkpoint(e.prompt_tokens, p.block_tokens)
            kept = max(kept, checkpoint if checkpoint <= tokens else 0)
        else:
            window, block = p.swa_window_tokens, p.block_tokens
            end = slot.whole_tokens if in_hbm and slot is not None else cached
            kept = max(
                kept,
                window_at_or_before(e.prompt_tokens, tokens, window, block),
                window_at_or_before(end, tokens, window, block),
                _chunk_end_window(e, tokens, window, block),
            )
        tokens = kept
        if tokens <= 0:
            return Plan(e.key, 0, 0, 0, 0.0, -1, 0, False, pinned) if pinned else None
    tier = _fastest(store, e, inst, now_s, tokens)
    hbm_tokens = min(slot.tokens, tokens) if slot is not None else 0
    load_bytes = (
        (tokens - hbm_tokens) * p.global_kv_bytes_per_token + p.persisted_state_bytes if tier else 0.0
    )
    return Plan(e.key, tokens, tier, hbm_tokens, load_bytes, -1, 0, False, max(pinned, tokens))
