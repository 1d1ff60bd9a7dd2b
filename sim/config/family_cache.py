"""The per-family blocks of `cache:` (`cache.v4`, `cache.v41`): what DeepSeek published about how each model
keeps its KV (hardware.md §4.1, model.md §10), and the store rules each block turns into.

- V4-Flash (`v4`): sliding-window (SWA) KV is persisted with each cache-prefix unit, on the
  distributed disk array (SSD); a hit needs a full match of a persisted prefix unit.
- V4.1-Flash (`v41`): global KV retained 72 h on SSD; SWA KV no longer persisted but kept in a
  pool of 10 % of host DRAM with a TTL of minutes; an SWA miss replays the last 128 tokens.

A new family whose cache works like one of these reuses its block (sim.config.families); one that
works differently adds a block here with its own `store_rules`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from pydantic import Field

from sim.config.base import StrictModel


@dataclass(frozen=True)
class StoreRules:
    """The family-specific numbers of `sim.kvcache.policies.CachePolicy` (same names)."""

    swa_persisted_with_prefix: bool
    swa_pool: bool
    swa_pool_dram_frac: float
    swa_ttl_s: float
    swa_replay_tokens: int
    persist_prefixes: bool  # completions are written through to the chain's write-through tiers (SSD)
    retention_s: float  # guaranteed retention there (the tiers' TTL is at least this long)

    def with_window_in_blocks(self) -> StoreRules:
        """The rules of an engine keeping every token's raw window rows in its KV blocks
        (`cache.swa_prefix_rows: every_token`, sim.model.kv): the window travels with the blocks, so no
        separate SWA pool, and a hit never replays."""
        return replace(self, swa_persisted_with_prefix=True, swa_pool=False, swa_replay_tokens=0)


class FamilyCacheBlock(StrictModel):
    """A family's block of `cache:`; `store_rules` says what the KV store does with it."""

    def store_rules(self, *, window_rebuild_tokens: int, eps_s: float) -> StoreRules:
        """`window_rebuild_tokens`: tokens that rebuild the sliding window's receptive field (sim.model.kv);
        `eps_s`: the shortest time the engine distinguishes."""
        raise NotImplementedError


class V4CachePolicy(FamilyCacheBlock):
    swa_persisted_with_prefix: bool = Field(
        True, description="persist SWA KV together with each prefix unit"
    )  # hardware.md §4.1 [A], model.md §10 (V4.1 changed this)
    persist_to: Literal["ssd", "host_dram"] = Field("ssd", description="tier of persisted prefix units")
    # hardware.md §4.1 [A]: "distributed disk array"

    def store_rules(self, *, window_rebuild_tokens: int, eps_s: float) -> StoreRules:
        return StoreRules(
            swa_persisted_with_prefix=self.swa_persisted_with_prefix,
            swa_pool=False,
            swa_pool_dram_frac=0.0,
            swa_ttl_s=eps_s,
            swa_replay_tokens=window_rebuild_tokens,  # no bounded replay in V4
            persist_prefixes=self.persist_to == "ssd",
            retention_s=0.0,  # hardware.md §4.1 [A]: best effort, no guarantee
        )


class V41CachePolicy(FamilyCacheBlock):
    global_retention_s: float = Field(259200.0, gt=0, description="guaranteed retention of global KV on SSD")
    # 72 h, model.md §10 [A]
    swa_pool_dram_frac: float = Field(0.10, gt=0, le=1, description="share of host DRAM for the SWA KV pool")
    # model.md §10 [A]
    swa_ttl_s: float = Field(300.0, gt=0, description="time-to-live of an SWA entry in the DRAM pool")
    # model.md §10 [A] says "minutes"; 5 min is our reading [D]
    swa_replay_tokens: int = Field(128, ge=0, description="tokens recomputed on an SWA miss (bounded replay)")
    # model.md §10 [A]

    def store_rules(self, *, window_rebuild_tokens: int, eps_s: float) -> StoreRules:
        return StoreRules(
            swa_persisted_with_prefix=False,  # model.md §10 [A]: SWA no longer persisted
            swa_pool=True,
            swa_pool_dram_frac=self.swa_pool_dram_frac,
            swa_ttl_s=self.swa_ttl_s,
            swa_replay_tokens=self.swa_replay_tokens,
            persist_prefixes=True,
            retention_s=self.global_retention_s,
        )
