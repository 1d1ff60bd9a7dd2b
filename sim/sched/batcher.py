"""vLLM-style token budget for one engine step (pure function).

Running decodes come first: each decoding sequence takes `verified_tokens_per_step` rows of the
budget. The rest goes to prefill chunks in arrival order, each at most `chunk_tokens`, so a long
prompt is split over several steps and several short ones share a step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.cluster.request import Request


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
