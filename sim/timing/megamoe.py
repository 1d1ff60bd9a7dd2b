"""DeepGEMM's Mega MoE on Blackwell, timed from its published measurement (issue 29, seventh sitting).

A pool with `moe_a2a: megamoe` (SGLang `--moe-a2a-backend megamoe`) runs each MoE layer's dispatch, both expert
GEMMs (FP8 activations x MXFP4 weights), the SwiGLU and the combine as one kernel over NVLink symmetric memory
(`deep_gemm.fp8_fp4_mega_moe`; DeepGEMM README, "Mega MoE"; SGLang 0.5.15 `layers/moe/mega_moe.py`). The kernel
splits its SMs between the exchange and the tensor cores, so it reaches less of the GPU than the grouped GEMMs
the carry times alone (sim.timing.carry): DeepGEMM's own benchmark of it on V4-Flash at EP 8 (PR #316, merged
2026-04-24; the GPU is not named there, the kernel is SM100-only) puts its compute at 1.93-2.04 PFLOP/s at
8,192-32,768 tokens a rank, 43-45 % of a B200's FP8 peak, where the carried grouped GEMMs ran at 2.6 PFLOP/s.

So a megamoe pool on NVIDIA Blackwell times its routed experts as the kernel measured:
`t = floor + sqrt((F / R)^2 + (W / B)^2)` per layer on the busiest EP rank, F its expert FLOPs (2 x the expert's
weights x rows), W its touched experts' MXFP4 weight bytes (sim.timing.experts `busiest_rank`): the fused kernel
overlaps its weight stream with its math only in part, which the root of squares stands for (a plain max leaves
the 512-token point 2x off at any weight rate). `fit` takes (floor, R, B) by least squares on the relative error
over the published points (`hwprofiles/engine_modules/megamoe_published.csv`): 34 us, 2.02 PFLOP/s, 5.2 TB/s,
each point within 2 %. Cross-check, not fitted: AIConfigurator's measured B200 Mega MoE module (SGLang 0.5.16,
hidden 3,584, intermediate 3,072, top-16 of 896 experts, EP 8, 1-32,768 tokens a rank) comes within -16 % to +5 %
at the same constants (docs/engines_and_validation.md section 13). Assumptions [D]: the published GPU stands for
every NVIDIA Blackwell profile (B200, B300, GB200: the same FP8 MMA rate and HBM per GPU, B300 / GB200 with more
SMs or a faster clock are not credited); V4.1's larger experts run at V4-Flash's fractions (DeepGEMM's V4-Pro
table reaches 2.30-2.44 PFLOP/s: V4.1 may run faster than this says); the EP size enters through the busiest
rank's experts and rows only; the kernel's exchange needs no time apart.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import NamedTuple

from sim.paths import project_root
from sim.timing.carry import MXFP4_BYTES_PER_WEIGHT
from sim.timing.experts import busiest_rank
from sim.timing.tables import read_table

POINTS_FILE = ("hwprofiles", "engine_modules", "megamoe_published.csv")


class MegaMoe(NamedTuple):
    """Mega MoE's fitted cost: a floor per call, the compute rate and the weight-stream rate it reaches."""

    floor_s: float
    flops_per_s: float
    weight_bytes_per_s: float
    rms_error: float  # over the points it was fitted to, relative
    points: int


class MegaMoePoint(NamedTuple):
    """One published measurement: one MoE layer's Mega MoE call at `tokens_per_rank` tokens on each of `ep`
    ranks, for experts of `expert_weights` weights each, `experts` of them, `top_k` a token."""

    experts: int
    top_k: int
    expert_weights: int
    ep: int
    tokens_per_rank: int
    seconds: float


def layer_s(m: MegaMoe, flops: float, weight_bytes: float) -> float:
    """Seconds of one Mega MoE call whose busiest rank does `flops` of expert math over `weight_bytes` of weights."""
    return m.floor_s + math.hypot(flops / m.flops_per_s, weight_bytes / m.weight_bytes_per_s)


def rank_work(experts: int, top_k: int, expert_weights: int, rows: float, ep: int) -> tuple[float, float]:
    """(FLOPs, MXFP4 weight bytes) of the busiest of `ep` ranks for `rows` token rows of the whole EP group."""
    rank = busiest_rank(experts, top_k, rows, ep)
    flops = 2.0 * expert_weights * rank.experts * rank.rows_per_expert
    return flops, rank.experts * expert_weights * MXFP4_BYTES_PER_WEIGHT


def _relative_errors(m: MegaMoe, work: list[tuple[float, float, float]]) -> list[float]:
    return [layer_s(m, f, w) / t - 1.0 for f, w, t in work]


def fit(points: list[MegaMoePoint]) -> MegaMoe:
    """(floor, compute rate, weight rate) by least squares on the relative error: a 25-point grid over each
    (the floor in seconds, the rates in log10), refined four times around the best cell."""
    work = [
        (*rank_work(p.experts, p.top_k, p.expert_weights, float(p.tokens_per_rank * p.ep), p.ep), p.seconds)
        for p in points
    ]
    centre, half = [100e-6, 15.25, 12.4], [100e-6, 1.25, 0.9]  # floor 0-200 us, 18-3,000 TFLOP/s, 3-200 TB/s
    best = (math.inf, 0.0, 0.0, 0.0)
    for _ in range(5):
        axes = [[max(0.0, c - h + 2.0 * h * i / 24) if k == 0 else c - h + 2.0 * h * i / 24 for i in range(25)]
                for k, (c, h) in enumerate(zip(centre, half, strict=True))]  # fmt: skip
        for floor in axes[0]:
            for lr in axes[1]:
                for lb in axes[2]:
                    m = MegaMoe(floor, 10.0**lr, 10.0**lb, 0.0, 0)
                    s = sum(e * e for e in _relative_errors(m, work))
                    if s < best[0]:
                        best = (s, floor, lr, lb)
        centre, half = list(best[1:]), [h / 6.0 for h in half]
    s, floor, lr, lb = best
    return MegaMoe(floor, 10.0**lr, 10.0**lb, math.sqrt(s / len(work)), len(work))


def load_points(path: Path | None = None) -> list[MegaMoePoint]:
    """The published Mega MoE measurements (the CSV's header names their source)."""
    path = path or project_root().joinpath(*POINTS_FILE)
    rows = list(read_table(path, "the published Mega MoE points")[2])
    return [
        MegaMoePoint(
            experts=int(r["experts"]),
            top_k=int(r["top_k"]),
            expert_weights=3 * int(r["hidden"]) * int(r["intermediate"]),
            ep=int(r["ep"]),
            tokens_per_rank=int(r["tokens_per_rank"]),
            seconds=float(r["time_us"]) * 1e-6,
        )
        for r in rows
    ]


@functools.lru_cache(maxsize=1)
def published() -> MegaMoe:
    """The fit to the committed published points (module doc)."""
    return fit(load_points())
