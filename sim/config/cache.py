"""`cache:` of a scenario: KV tier policy (HBM -> host DRAM -> SSD) and per-family rules.

The family blocks encode what DeepSeek published about each model (hardware.md §4.1, model.md §10):
- V4-Flash (`v4`): sliding-window (SWA) KV is persisted with each cache-prefix unit, on the
  distributed disk array (SSD); a hit needs a full match of a persisted prefix unit.
- V4.1-Flash (`v41`): global KV retained 72 h on SSD; SWA KV no longer persisted but kept in a
  pool of 10 % of host DRAM with a TTL of minutes; an SWA miss replays the last 128 tokens.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sim.config.base import StrictModel
from sim.errors import InputError


class V4CachePolicy(StrictModel):
    swa_persisted_with_prefix: bool = Field(
        True, description="persist SWA KV together with each prefix unit"
    )  # hardware.md §4.1 [A], model.md §10 (V4.1 changed this)
    persist_to: Literal["ssd", "host_dram"] = Field("ssd", description="tier of persisted prefix units")
    # hardware.md §4.1 [A]: "distributed disk array"


class V41CachePolicy(StrictModel):
    global_retention_s: float = Field(259200.0, gt=0, description="guaranteed retention of global KV on SSD")
    # 72 h, model.md §10 [A]
    swa_pool_dram_frac: float = Field(0.10, gt=0, le=1, description="share of host DRAM for the SWA KV pool")
    # model.md §10 [A]
    swa_ttl_s: float = Field(300.0, gt=0, description="time-to-live of an SWA entry in the DRAM pool")
    # model.md §10 [A] says "minutes"; 5 min is our reading [D]
    swa_replay_tokens: int = Field(128, ge=0, description="tokens recomputed on an SWA miss (bounded replay)")
    # model.md §10 [A]


class Cache(StrictModel):
    hbm_keep_s: float = Field(
        30.0,
        ge=0,
        description="keep a finished turn's KV in HBM this long, while its session is likely to return",
    )  # a choice [D]; agent think gaps are seconds to tens of seconds
    dram_ttl_s: float = Field(600.0, ge=0, description="idle time after which host-DRAM KV is demoted to SSD")
    # a choice [D]
    ssd_ttl_s: float = Field(86400.0, gt=0, description="idle time after which SSD KV is dropped")
    # hardware.md §4.1 [A]: "usually within a few hours to a few days"; 24 h chosen [D]
    eviction: Literal["lru"] = Field("lru", description="eviction order inside a tier")
    block_tokens: int = Field(
        256, ge=1, description="KV block size: a partial prefix match is used in whole blocks"
    )  # model.md §5.2 [B]: SGLang 256-token pages for V4, vLLM --block-size 256 for V4.1
    v4: V4CachePolicy = Field(default_factory=V4CachePolicy, description="rules for DeepSeek-V4-Flash")
    v41: V41CachePolicy = Field(default_factory=V41CachePolicy, description="rules for DeepSeek-V4.1-Flash")

    def policy_for(self, family: str) -> V4CachePolicy | V41CachePolicy:
        """The per-family block (`ModelRef.family` gives the family of a model)."""
        if family not in ("v4", "v41"):
            raise InputError("unknown model family", value=family, allowed=["v4", "v41"])
        return getattr(self, family)
