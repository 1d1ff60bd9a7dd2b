"""Whether a published point's throughput and its own medians tell the same story, set beside sim's run of it.

A closed loop of N clients with no think time completes requests at N / E[E2E], so its output throughput is
N x E[output tokens] / E[E2E] (renewal-reward), with E2E = TTFT + (output tokens - 1) x TPOT. Benchmarks publish
medians, not means, so `implied` puts the TTFT and TPOT medians in place of the means. The ratio published /
implied is then not 1: it carries the shape of the latency distributions (a tail the medians do not see, the
ramp at the start and the drain at the end). sim's run of the case has the same client, the same request lengths
and the same start and end, so its own ratio carries the same length and ramp terms; where the two ratios part
(`gap_frac`), the published throughput holds time that neither published median shows and sim's run does not
have in the same proportion: a one-off stall, a heavier tail, gaps between requests. No steady simulation can
match such a point's throughput and its medians at once, so a case with a large gap says more about the
published point than about sim (docs/validation.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


def implied_output_tokens_per_s_per_gpu(
    concurrency: float, gpus: int, mean_output_tokens: float, ttft_p50_s: float, tokens_per_s_per_user: float
) -> float | None:
    """Output tokens/s per GPU of a closed loop of `concurrency` clients whose requests take the median TTFT and
    then (mean output tokens - 1) tokens at the median per-user speed; None where an input is missing or not
    positive."""
    if min(concurrency, gpus, mean_output_tokens, tokens_per_s_per_user) <= 0 or ttft_p50_s < 0:
        return None
    e2e_s = ttft_p50_s + max(mean_output_tokens - 1.0, 0.0) / tokens_per_s_per_user
    return concurrency * mean_output_tokens / e2e_s / gpus if e2e_s > 0 else None


@dataclass(frozen=True)
class Consistency:
    """Published and simulated output tokens/s per GPU each over what its own medians imply (`implied_...`), and
    how far the published ratio sits from sim's (published / simulated - 1)."""

    published_ratio: float
    simulated_ratio: float
    gap_frac: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def consistency(
    concurrency: float | None,
    gpus: int | None,
    mean_output_tokens: float | None,
    published: dict[str, float],
    simulated: dict[str, Any],
) -> Consistency | None:
    """The check for one case read at `concurrency` on `gpus` GPUs, whose run completed requests of
    `mean_output_tokens` on average; None unless both sides give output tokens/s per GPU, tokens/s per user and
    TTFT p50 (the case publishes all three and sim read them)."""
    keys = ("output_tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft_p50_s")
    if concurrency is None or not gpus or not mean_output_tokens:
        return None
    ratios = []
    for side in (published, simulated):
        values = [side.get(k) for k in keys]
        if any(v is None for v in values):
            return None
        throughput, user, ttft = (float(v) for v in values)
        implied = implied_output_tokens_per_s_per_gpu(concurrency, gpus, mean_output_tokens, ttft, user)
        if implied is None:
            return None
        ratios.append(throughput / implied)
    return Consistency(ratios[0], ratios[1], ratios[0] / ratios[1] - 1.0)
