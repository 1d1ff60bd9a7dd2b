"""Each model family's cache semantics as numbers (every one a scenario field), and the byte
arithmetic the store and the engines share.

- V4-Flash: global KV (3,514 B/token, FP8 main rows, model.md §5.1) plus the sliding-window
  ring and compressor state, persisted with the prefix (DeepSeek's on-disk context cache,
  hardware.md §4.1): a hit where the saved window serves restores everything; a hit deeper
  inside the sequence ends at the deepest window the engine kept (`swa_checkpoints`, sim.kvcache.lookup), or
  under `rebuild` re-runs the window's receptive field (`swa_replay_tokens`).
- V4.1-Flash: global KV only (890 B/token, FP4) is persisted, with a retention guarantee on SSD
  (72 h, model.md §10); the SWA ring lives in a host-DRAM pool (10 % of DRAM, TTL of minutes);
  on a pool miss the last `swa_replay_tokens` (128) tokens are recomputed (SWA bounded replay).

In HBM the latent KV is replicated on every attention-TP rank (model.md §9), so an instance
holds `kv_replication` copies of each byte.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CachePolicy:
    family: str  # a key of the family registry (sim.config.families)
    global_kv_bytes_per_token: float
    swa_state_bytes: float  # per sequence
    compressor_state_bytes: float  # per sequence
    swa_persisted_with_prefix: bool  # V4: SWA (+ compressor) saved with the prefix
    swa_pool: bool  # V4.1: SWA in a host-DRAM pool
    swa_pool_dram_frac: float
    swa_ttl_s: float
    swa_window_tokens: int  # every layer's sliding window (model.md §1: 128)
    swa_replay_tokens: int  # recomputed when the window at a hit's end is gone
    block_tokens: int  # the engine's KV block: prefix hits are whole blocks
    hbm_keep_s: float  # a finished session's KV stays in HBM this long after last use
    persist_prefixes: bool  # completions are written through to the chain's write-through tiers (SSD)
    retention_s: float  # guaranteed retention there; evicting earlier is counted as a violation
    kv_regions_per_block: int = 1  # contiguous KV regions per block, all layers (sim.kvcache.paths)
    # where the engine keeps V4's windows: sequence_ends | every_block | prompt_ends | rebuild (sim.kvcache.lookup)
    swa_checkpoints: str = "sequence_ends"

    @property
    def seq_state_bytes(self) -> float:
        """Fixed per-sequence state beside the global KV (SWA ring + compressor partial groups)."""
        return self.swa_state_bytes + self.compressor_state_bytes

    @property
    def persisted_state_bytes(self) -> float:
        """State bytes saved with a persisted prefix (V4: all of it; V4.1: none, SWA is pooled)."""
        return self.seq_state_bytes if self.swa_persisted_with_prefix else 0.0

    def hbm_bytes(self, tokens: float, kv_replication: int) -> float:
        """HBM an instance needs for a sequence of `tokens` (global KV + state, replicated)."""
        return kv_replication * (tokens * self.global_kv_bytes_per_token + self.seq_state_bytes)

    def persist_bytes(self, tokens: float) -> float:
        """Bytes of a session's prefix in a tier below HBM (host DRAM, a pool, SSD)."""
        return tokens * self.global_kv_bytes_per_token + self.persisted_state_bytes

    def hit_tokens(self, cached_tokens: int, repeated_tokens: int, input_tokens: int) -> int:
        """Usable prefix of a request of `input_tokens` that repeats `repeated_tokens` of a cached
        context of `cached_tokens`: whole blocks of the part both cover, short of the last input
        token (computed for its logits). Engines hash full blocks only (vLLM's chained block hashes,
        SGLang's page-aligned radix keys, the served engine's BlockPool), so a context's partial
        last block is never hit, even by a request repeating all of it."""
        usable = input_tokens - 1  # the least of the three (a three-way min() is a generic call compiled)
        if cached_tokens < usable:
            usable = cached_tokens
        if repeated_tokens < usable:
            usable = repeated_tokens
        if usable <= 0:
            return 0
        return usable - usable % self.block_tokens
