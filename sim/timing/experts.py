"""The routed experts of one MoE layer on the GPU a step waits for (issue 28): which experts its EP rank runs,
and what its grouped GEMM costs when that is fewer experts than the tables measure.

- **The busiest EP rank.** With uniform routing (kernels.md §6.2 [C]) each of the E experts is touched by
  `rows` token rows with probability p = 1 - (1 - k / E)^rows. An EP rank holds n = E / ep experts, so the
  experts it runs are Binomial(n, p); the step waits for the rank that runs the most (the MoE layer ends with a
  combine every rank joins). Its expected count is E[max of ep such draws] = sum_j (1 - F(j)^ep), F the binomial
  CDF. Before, each rank was charged the mean n p: at EP 32 and 8 rows that is 1.4 experts where the busiest
  rank runs 3.8, and at EP 256 and one row 0.02 experts (a grouped GEMM of 0.2 us) where six ranks run one
  each. With many rows every expert is touched and the two agree (EP 4, 256 rows: 63.9 and 64). Each touched
  expert gets rows x k / touched rows.
- **A grouped GEMM over few experts.** The tables time the grouped GEMMs from 6 experts up. The time per expert
  is the weights it reads; what is left at zero experts is the kernel's own cost (launch, scheduling, the
  combine of its tiles). Below the fewest measured experts the time is the line through the two fewest measured
  group counts, at the same rows per expert (never below the share of the fewest: a line with a negative
  intercept falls back to proportional). The AIConfigurator comparison (docs/carry/aic) found a 35-45 us floor
  per rank in AIC's EP MoE kernels on the H200 where sim had charged a fraction of a microsecond; DeepGEMM's
  masked grouped GEMM on the H200 gives about 21 us for one expert's gate_up + down by this line.
- **Aligned segments.** Where the engine hands the experts their rows in DeepGEMM's contiguous layout (SGLang's
  DeepEP normal mode: `expert_alignment=128`, sim.config.engine_rules `deepep_expert_alignment_rows`), each
  touched expert's rows are padded up to a multiple of the alignment and every padded block is computed. An
  expert's rows are Poisson under uniform routing; `contiguous_rows_per_expert` is the expected padded segment
  of a touched one (docs/engines_and_validation.md section 29).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from sim.timing.interp import Grid


class RankExperts(NamedTuple):
    """The experts the busiest EP rank runs in one MoE layer, and the token rows each of them gets."""

    experts: float
    rows_per_expert: float


def touched_experts(experts: int, top_k: int, rows: float) -> float:
    """Expected experts of `experts` that `rows` token rows touch, each choosing `top_k` uniformly."""
    # math.pow: the C pow() of float ** int (the int as a double), as the compiled caller computes it
    return experts * (1.0 - math.pow(1.0 - top_k / experts, rows))


def busiest_rank(experts: int, top_k: int, rows: float, ep: int) -> RankExperts:
    """The expected experts the busiest of `ep` EP ranks runs for `rows` token rows (module doc)."""
    touched = touched_experts(experts, top_k, rows)
    per_expert = rows * top_k / touched
    n = max(1, experts // ep)
    p = touched / experts
    if ep == 1 or p >= 1.0 - 1e-12:
        return RankExperts(n * p, per_expert)
    q = 1.0 - p
    pmf = math.pow(q, n)  # P(X = 0)
    cdf, expected_max = 0.0, 0.0
    for j in range(n):  # E[max] = sum over j < n of P(max > j) = 1 - F(j)^ep
        cdf += pmf
        expected_max += 1.0 - math.pow(min(cdf, 1.0), ep)
        pmf *= (n - j) / (j + 1) * p / q
    return RankExperts(expected_max, per_expert)


# above this mean an expert's rows are taken as normal (Poisson's own skew is under 0.06 there) [D]
_POISSON_EXACT_BELOW = 300.0


def contiguous_rows_per_expert(mean_rows: float, alignment: int) -> float:
    """The rows a touched expert's segment holds when each expert's rows, Poisson with mean `mean_rows` (rows x
    top-k / experts under uniform routing), are padded up to a multiple of `alignment`: E[ceil(X / a) a | X >= 1]
    (module doc). `alignment` <= 1: the mean rows of a touched expert, unpadded."""
    if mean_rows <= 0.0:
        return float(max(alignment, 1))
    touched = -math.expm1(-mean_rows)  # P(X >= 1)
    if alignment <= 1:
        return mean_rows / touched
    a = float(alignment)
    # E[ceil(X / a) | X >= 1] = 1 + sum over j >= 1 of P(X > j a) / P(X >= 1)
    tail = 0.0
    if mean_rows < _POISSON_EXACT_BELOW:
        pmf = math.exp(-mean_rows)
        cdf = pmf
        x, j = 0, 1
        # past 12 standard deviations above the mean P(X > j a) is below 1e-30: no more terms
        last = mean_rows + 12.0 * math.sqrt(mean_rows) + 1.0
        while j * alignment <= last:
            while x < j * alignment:  # advance the CDF to X = j a
                x += 1
                pmf *= mean_rows / x
                cdf += pmf
            tail += max(0.0, 1.0 - cdf)
            j += 1
    else:
        sd = math.sqrt(mean_rows)
        j = 1
        while j * a <= mean_rows + 12.0 * sd + 1.0:
            # P(X > j a) with the continuity correction
            tail += 0.5 * math.erfc((j * a + 0.5 - mean_rows) / (sd * math.sqrt(2.0)))
            j += 1
    return a * (1.0 + tail / touched)


def grouped_s(grid: Grid, groups: float, rows_per_expert: float) -> float:
    """A grouped GEMM of `groups` experts at `rows_per_expert` rows each from its measured grid (groups x rows),
    extrapolated below the fewest measured groups along the line through the two fewest (module doc)."""
    g0 = grid.outer[0]
    if groups >= g0:
        return grid.at(groups, rows_per_expert)
    t0 = grid.at(g0, rows_per_expert)
    if len(grid.outer) < 2:
        return t0 * groups / g0
    g1 = grid.outer[1]
    t1 = grid.at(g1, rows_per_expert)
    return max(t0 + (groups - g0) * (t1 - t0) / (g1 - g0), t0 * groups / g0)
