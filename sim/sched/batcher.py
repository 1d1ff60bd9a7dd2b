"""vLLM-style token budget for one engine step (pure function).

Running decodes come first: each decoding sequence takes `verified_tokens_per_step` rows of the
budget. The rest goes to prefill chunks in arrival order, each at most `chunk_tokens`, so a long
prompt is split over several steps and several short ones share a step.

On an instance with DP attention each request lives on one DP rank (`Request.dp_rank`) and each
rank schedules its own requests under its own budget (`prefill_chunks_dp`, `rank_prefill_budget`),
by the engine's rule (`scheduler.dp_prefill_budget`): SGLang divides `--chunked-prefill-size` by the
DP size (server_args.py, `enable_dp_attention`) and each DP rank's scheduler fills its batch from its
own queue (`divided`); in vLLM each DP rank is an engine core with its own scheduler and its own
`--max-num-batched-tokens` (`per_rank`).

How a step combines prefill chunks with the running decodes is the engine's rule too
(`scheduler.step_composition`, `decoding_with_prefill`):
- `mixed` (vLLM): every step schedules the running requests first, one decode step each, and fills
  the rest of `--max-num-batched-tokens` with prefill chunks (vllm/v1/core/sched/scheduler.py,
  `Scheduler.schedule`: "First, schedule the RUNNING requests", then the WAITING ones under what is
  left of `token_budget`), so decodes advance in every step and the chunks get the budget less the
  decode rows.
- `prefill_first` (SGLang): `Scheduler.get_next_batch_to_run` (python/sglang/srt/managers/
  scheduler.py) runs a new prefill (extend) batch whenever `get_new_batch_prefill` can form one
  ("Run prefill first if possible") and the running decode batch waits for that step; the chunks
  get the whole `--chunked-prefill-size` (its `PrefillAdder` subtracts the running batch only with
  `--enable-mixed-chunk`, default False in server_args.py, and forced False with EAGLE-style
  speculative decoding). With DP attention and speculative decoding on, the ranks agree on the
  step's mode before it runs (`prepare_mlp_sync_batch` on the new batch: a rank with no prefill
  gets an idle batch when any rank has one, "makes sure prefill and decode batches will not be
  mixed when spec and dp-attn is enabled"), so a chunk on any rank stalls every rank's decodes;
  `is_extend_in_batch` gathered by `MLPSyncBatchInfo.all_gather` (managers/scheduler_components/
  dp_attn.py in v0.5.15; scheduler_dp_attn_mixin.py later) then runs the MoE all-to-all in DeepEP's
  normal mode for that step.
- `rank_prefill_first` (SGLang with DP attention, no speculative decoding): each DP rank runs its
  own scheduler and picks its own batch by the same rule, so a rank holding a prefill chunk runs it
  and its own running requests wait, while a rank without one decodes its running requests in the
  same step; `prepare_mlp_sync_batch` only gathers the ranks' batch sizes and modes for the MoE
  layers, where they all meet, so the step lasts as long as its slowest rank. The engine keeps each
  rank's own count of decode steps (sim.cluster.instance); with dp 1 it is `prefill_first`.
Decode-only and prefill-only pools never hold both kinds of work, so the rule changes nothing there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from sim.core.request import Request

# `scheduler.step_composition`'s values (module doc)
STEP_COMPOSITIONS: Final = ("mixed", "prefill_first", "rank_prefill_first")


def prefill_chunks(ready: list[Request], budget_tokens: int, chunk_tokens: int) -> list[tuple[Request, int]]:
    """(request, tokens) for this step: requests in `ready` order while budget remains."""
    out: list[tuple[Request, int]] = []
    for req in ready:
        if budget_tokens <= 0:
            break
        left = req.new_tokens - req.computed_tokens
        take = left if left < chunk_tokens else chunk_tokens
        if take > budget_tokens:
            take = budget_tokens
        out.append((req, take))
        budget_tokens -= take
    return out


def rank_prefill_budget(budget_tokens: int, decode_rows: int, dp_ranks: int, divided: bool) -> int:
    """Prefill tokens one DP rank may schedule in a step whose decode batch takes `decode_rows` rows of
    the instance (spread evenly over its `dp_ranks` ranks): `divided`, the instance budget less every
    decode row, split over the ranks (at least 1 while any is left); else the whole budget less the
    rank's own decode rows. 0: no prefill this step."""
    if divided:
        left = budget_tokens - decode_rows
        return max(1, left // dp_ranks) if left > 0 else 0
    left = budget_tokens - -(-decode_rows // dp_ranks)
    return left if left > 0 else 0


def prefill_chunks_dp(
    ready: list[Request], rank_budget_tokens: int, chunk_tokens: int, dp_ranks: int
) -> list[tuple[Request, int]]:
    """(request, tokens) for this step on an instance of `dp_ranks` DP-attention ranks: each rank
    takes its own requests of `ready`, in order, while its `rank_budget_tokens` remain."""
    left = [rank_budget_tokens] * dp_ranks
    open_ranks = dp_ranks if rank_budget_tokens > 0 else 0
    out: list[tuple[Request, int]] = []
    for req in ready:
        if open_ranks <= 0:
            break
        r = req.dp_rank
        budget = left[r]
        if budget <= 0:
            continue
        take = req.new_tokens - req.computed_tokens
        if take > chunk_tokens:
            take = chunk_tokens
        if take > budget:
            take = budget
        out.append((req, take))
        left[r] = budget - take
        if budget - take <= 0:
            open_ranks -= 1
    return out


def decoding_with_prefill(batch_size: int, prefill_first: bool) -> int:
    """Sequences of a `batch_size` decode batch that take a decode step in a step carrying prefill
    chunks (module doc): all of them when steps are mixed, none when prefill goes first."""
    return 0 if prefill_first else batch_size
