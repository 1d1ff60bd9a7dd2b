"""`scheduler:` of a scenario: routing (weighted scorers, as BLIS does it), batching, admission."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from sim.config.base import StrictModel


class RouterWeights(StrictModel):
    """Weights of the cache-aware router's scorers (each scorer maps an instance to [0, 1])."""

    prefix_hit: float = Field(2.0, ge=0, description="share of the prompt already cached on the instance")
    queue_depth: float = Field(1.0, ge=0, description="fewer queued tokens scores higher")
    kv_usage: float = Field(
        1.0, ge=0, description="more HBM KV bytes not reserved by running sequences scores higher"
    )

    @model_validator(mode="after")
    def _not_all_zero(self) -> RouterWeights:
        if self.prefix_hit + self.queue_depth + self.kv_usage == 0:
            raise ValueError("at least one router weight must be positive")
        return self


class Router(StrictModel):
    policy: Literal["cache_aware", "least_loaded", "round_robin"] = Field(
        "cache_aware", description="cache_aware: weighted scorers below; least_loaded: fewest queued tokens"
    )
    weights: RouterWeights = Field(default_factory=RouterWeights, description="used by cache_aware only")


class Admission(StrictModel):
    """Requests over these limits are rejected with reason `queue_full` or `queue_timeout`."""

    max_queue_per_instance: int | None = Field(
        None, ge=1, description="queued requests per instance; null = no limit"
    )
    max_queue_wait_s: float | None = Field(
        None, gt=0, description="reject after waiting this long; null = never"
    )


class Scheduler(StrictModel):
    router: Router = Field(default_factory=Router)
    prefill_budget_tokens: int = Field(
        16384,
        ge=1,
        description="prefill tokens per engine step; with DP attention (dp > 1) see dp_prefill_budget",
    )
    dp_prefill_budget: Literal["divided", "per_rank"] | None = Field(
        None,
        description="with DP attention (dp > 1), the budget each rank prefills its own requests under "
        "(null = the pool's engine rule, sim.config.engine_rules; divided without an engine): "
        "divided = prefill_budget_tokens / dp (SGLang divides --chunked-prefill-size by the DP size); "
        "per_rank = prefill_budget_tokens on every rank (vLLM: each DP rank is an engine with its own "
        "--max-num-batched-tokens)",
    )
    step_composition: Literal["mixed", "prefill_first", "rank_prefill_first"] | None = Field(
        None,
        description="how a colocated instance's step combines prefill chunks with its running decodes "
        "(sim.sched.batcher; null = the pool's engine rule, sim.config.engine_rules; mixed without an engine): "
        "mixed = every step decodes the running sequences and fills the rest of "
        "prefill_budget_tokens with chunks (vLLM's scheduler); prefill_first = a step with chunks runs them "
        "alone under the whole budget and the running decodes wait for it (SGLang, --enable-mixed-chunk off, "
        "its default; with DP attention and spec_decode on, where SGLang syncs the ranks' step mode); "
        "rank_prefill_first = the same per DP rank: the ranks holding chunks wait, the others decode in that "
        "step (SGLang with DP attention, spec_decode off); prefill-only and decode-only pools never hold both",
    )
    chunk_tokens: int = Field(8192, ge=1, description="chunked-prefill chunk size")
    max_decode_batch: int = Field(
        256,
        ge=1,
        description="requests running per instance (vLLM --max-num-seqs, SGLang --max-running-requests): decoded "
        "together, and a colocated instance admits no new request to prefill while this many are in it",
    )
    dp_running_cap: Literal["per_rank", "instance"] | None = Field(
        None,
        description="with DP attention (dp > 1) on a colocated or decode pool, where max_decode_batch applies "
        "(null = the pool's engine rule, sim.config.engine_rules; instance without an engine): per_rank = "
        "max_decode_batch / dp on each rank, requests placed on ranks round-robin as they arrive (are handed "
        "over, on a decode pool) and a full rank's requests waiting for it while the others admit theirs "
        "(SGLang: --max-running-requests per DP worker, round-robin dispatch); instance = one cap over the "
        "instance's requests",
    )
    admission: Admission = Field(default_factory=Admission)

    @model_validator(mode="after")
    def _chunk_fits(self) -> Scheduler:
        if self.chunk_tokens > self.prefill_budget_tokens:
            raise ValueError(
                f"chunk_tokens ({self.chunk_tokens}) must not exceed prefill_budget_tokens ({self.prefill_budget_tokens})"
            )
        return self
