"""Marlin MoE (W4A16) on the H200 and the H100, timed from AIConfigurator's measured module (issue 29, thirteenth
and fifteenth sittings).

A model with `expert_activations: bf16` runs its MXFP4 routed experts as W4A16: the weights dequantised inside the
kernel, BF16 MMAs. On Hopper that is vLLM's `--moe-backend marlin` (Dynamo's H200 recipes for V4-Flash), which
sim would otherwise time as the H200's measured DeepGEMM FP8 rows. Marlin behaves differently from those: it reads
half the weight bytes (faster with one row an expert over many experts), and it reaches 150-230 TFLOP/s where
DeepGEMM reaches about 1,000 (several times slower at prefill sizes).

**Measured** (hwprofiles/engine_modules/marlin_mxfp4_h200.csv, written by `kernels_bench.aic_marlin`):
AIConfigurator 0.12.0's rows of vLLM 0.24.0's MoE module on the H200, MXFP4 on Marlin, one shape (hidden 3,584,
intermediate 3,072, 896 experts, top-16), EP 1-128, balanced routing, 1-16,384 tokens of the EP group.

**Carried to another model's experts.** vLLM picks Marlin's block size by the rows each expert gets, so at equal
rows per expert the kernel runs the same configuration and streams each local expert's weights the same number of
times: its time above the module's floor scales with the weights of the experts it runs. Per measured EP size,
`(t - floor) / (local experts x weights an expert)` is a cost per weight at each rows-per-expert (the measured
tokens from one row an expert up, the first point interpolated at exactly one row); between the measured local
expert counts (7 to 896) that cost is interpolated geometrically in the experts, because fewer experts fill fewer
SMs (at 16,384 tokens the module reaches 30 TFLOP/s over 7 local experts and 232 over 896); below 7 or above 896
the nearest count's. Beyond the most rows an expert measured (293) the time grows linearly with the rows, as the
last segment (compute-bound there). The floor is the least time measured, 80 us: the module with almost nothing to
do, i.e. vLLM's MoE glue (the routing's block alignment, the activation, the launches). sim charges every expert
kernel's glue in the forward-pass term (sim.timing.forward: our production pass runs its own routing around
DeepGEMM, 55 us a layer at decode, hwprofiles/h200/forward_pass_results.csv), so the module is charged above its
floor: `experts x weights x cost(experts, rows per expert)` a layer, the busiest EP rank's touched experts and their
rows (sim.timing.experts). Charging the floor as well counts the glue twice (docs/engines_and_validation.md
section 19 gives both).

Checks, not fitted (`python3 -m kernels_bench.aic_marlin --cross-shapes`): across shapes within one format, the same
carry built on AIConfigurator's vLLM 0.19.0 int4 Marlin module at DeepSeek-V3's shape (7,168 x 2,048, 256 experts,
top-8) gives that module's measured time at eight other fine-grained shapes at a median 0.93-1.12 (at 4,096 x 1,536,
128 experts top-8, the nearest to V4-Flash, 0.94, 10th-90th percentile 0.79-1.04); it fails on 8-expert shapes
(0.45-0.55), far from any served here. Across formats, vLLM 0.24.0's int4 module at Kimi-K2's shape (7,168 x 2,048,
384 experts, top-8) runs at 0.5-0.8x what this MXFP4 module carries to it: int4's per-128 scales against MXFP4's
per-32 move Marlin's time by that much, which is why the MXFP4 module is the one taken [D]. Each measured GPU stands
for itself only. AIConfigurator measured the same module on the H100 (hwprofiles/engine_modules/marlin_mxfp4_h100.csv,
fifteenth sitting): within 1-6 % of the H200 at every point, where its 0.7x HBM bandwidth would have made a
weight-bound kernel 1.43x slower, so Marlin here is bound by its in-kernel dequantisation, not by HBM, and a carry
by bandwidth would have been wrong; other GPUs without native FP4 (H20, AMD) are refused.

**Under expert TP** (TP without EP: each GPU runs a 1/t slice of every expert) the module does not take 1/t of its
time: its slices fill Marlin's tiles less well. AIConfigurator measured SGLang 0.5.14's Marlin module (the same
kernel and shape, EP 1) at TP 1 to 32 on both GPUs (hwprofiles/engine_modules/marlin_mxfp4_tp_*.csv): above the
least time measured, TP t runs e(t, rows an expert) of a perfect split, 0.93 at decode sizes and 0.70-0.76 at
prefill sizes for TP 8 (docs/engines_and_validation.md section 27). A GPU of expert TP t takes the module's time
over its experts / (t x e), e geometric between measured t and linear in the rows an expert, held beyond.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

from sim.errors import InputError
from sim.paths import project_root
from sim.timing.interp import LINEAR, LOGLOG, Curve, Grid
from sim.timing.tables import gpu_key, read_table

MEASURED_GPUS = ("h200", "h100")  # gpu_key of the GPUs the module was measured on
# by gpu_key: the module's rows, and SGLang's module at each expert-TP size (docs/engines_and_validation.md section 27)
POINTS_FILES: dict[str, tuple[str, ...]] = {
    gpu: ("hwprofiles", "engine_modules", f"marlin_mxfp4_{gpu}.csv") for gpu in MEASURED_GPUS
}
TP_FILES: dict[str, tuple[str, ...]] = {
    gpu: ("hwprofiles", "engine_modules", f"marlin_mxfp4_tp_{gpu}.csv") for gpu in MEASURED_GPUS
}


class MarlinPoint(NamedTuple):
    """One measured call: the module over `tokens` tokens of an EP group of `ep`, routed evenly."""

    hidden: int
    intermediate: int
    experts: int
    top_k: int
    ep: int
    tokens: int
    seconds: float

    @property
    def expert_weights(self) -> int:
        return 3 * self.hidden * self.intermediate  # gate, up and down


@dataclass(frozen=True)
class TpSplit:
    """How well the module splits over expert-TP GPUs: e(t, rows an expert), the module's time above its floor at
    TP 1 over t x its time above the floor at TP t (1: a perfect split; module doc)."""

    efficiency: Grid  # outer: TP size (geometric), inner: rows an expert

    def at(self, tp: float, rows_per_expert: float) -> float:
        if tp <= 1.0:
            return 1.0
        return self.efficiency.at(tp, rows_per_expert)


@dataclass(frozen=True)
class MarlinModule:
    """The measured module as a floor and a cost per weight by (local experts, rows per expert) (module doc), and
    its efficiency under expert TP where that was measured."""

    floor_s: float
    # seconds a weight above the floor; outer: local experts (geometric), inner: rows an expert
    per_weight: Grid
    max_experts: float  # the most local experts measured (the cost is held beyond)
    tp_split: TpSplit | None = None

    def tp_layer_s(self, experts: float, rows_per_expert: float, expert_weights: int, tp: float) -> float:
        """`layer_s` for a GPU that runs a 1/`tp` slice of each of its experts (expert TP)."""
        eff = 1.0 if self.tp_split is None else self.tp_split.at(tp, rows_per_expert)
        return self.layer_s(experts, rows_per_expert, expert_weights) / (tp * eff)

    def layer_s(self, experts: float, rows_per_expert: float, expert_weights: int) -> float:
        """Seconds above the module's floor of one MoE layer whose GPU runs `experts` experts of
        `expert_weights` weights at `rows_per_expert` rows each (the floor is the engine's MoE glue, module doc)."""
        if experts <= 0.0:
            return 0.0
        return experts * expert_weights * self.per_weight.at(min(experts, self.max_experts), rows_per_expert)


def build(points: list[MarlinPoint]) -> MarlinModule:
    """The module of the measured points (one shape; module doc)."""
    shapes = {(p.hidden, p.intermediate, p.experts, p.top_k) for p in points}
    if len(shapes) != 1:
        raise ValueError(f"the Marlin points must be of one expert shape, not {sorted(shapes)}")
    floor = min(p.seconds for p in points)
    p0 = points[0]
    one_row_tokens = p0.experts / p0.top_k  # tokens at which every expert gets one row
    columns: list[tuple[float, Curve]] = []
    for ep in sorted({p.ep for p in points}, reverse=True):  # fewest local experts first
        col = sorted((p for p in points if p.ep == ep), key=lambda p: p.tokens)
        tokens = Curve(tuple(float(p.tokens) for p in col), tuple(p.seconds for p in col), LINEAR)
        local = p0.experts / ep
        rows = [1.0] + [p.tokens / one_row_tokens for p in col if p.tokens > one_row_tokens]
        cost = [max(tokens.at(r * one_row_tokens) - floor, 0.0) / (local * p0.expert_weights) for r in rows]
        columns.append((local, Curve(tuple(rows), tuple(max(c, 1e-30) for c in cost), LINEAR)))
    outer = tuple(local for local, _ in columns)
    return MarlinModule(floor, Grid(outer, tuple(c for _, c in columns), LOGLOG), max(outer))


def build_tp_split(points: list[MarlinPoint]) -> TpSplit:
    """The expert-TP efficiency of one shape's module measured at TP sizes (`MarlinPoint.ep` holding the TP size):
    above the least time measured (the module's glue), TP 1's time over t x TP t's, at most 1."""
    floor = min(p.seconds for p in points)
    p0 = points[0]
    base = {p.tokens: p.seconds for p in points if p.ep == 1}
    columns: list[tuple[float, Curve]] = []
    for tp in sorted({p.ep for p in points}):
        col = sorted((p for p in points if p.ep == tp and p.tokens in base), key=lambda p: p.tokens)
        rows = tuple(p.tokens * p0.top_k / p0.experts for p in col)
        eff = []
        for p in col:
            above = p.seconds - floor
            e = 1.0 if tp == 1 or above <= 0.0 else (base[p.tokens] - floor) / (tp * above)
            eff.append(min(max(e, 1e-3), 1.0))
        columns.append((float(tp), Curve(rows, tuple(eff), LINEAR)))
    return TpSplit(Grid(tuple(t for t, _ in columns), tuple(c for _, c in columns), LOGLOG))


def load_tp_points(gpu: str) -> list[MarlinPoint]:
    """SGLang's module at each expert-TP size on `gpu` (the TP size in `MarlinPoint.ep`)."""
    rows = list(
        read_table(project_root().joinpath(*TP_FILES[gpu]), "the measured Marlin module under expert TP")[2]
    )
    return [
        MarlinPoint(int(r["hidden"]), int(r["intermediate"]), int(r["experts"]), int(r["top_k"]), int(r["tp"]),
                    int(r["tokens"]), float(r["time_us"]) * 1e-6)
        for r in rows
    ]  # fmt: skip


def load_points(path: Path | None = None, gpu: str = "h200") -> list[MarlinPoint]:
    """The measured rows of `path`, else of `gpu`'s committed file (the CSV's header names their source)."""
    path = path or project_root().joinpath(*POINTS_FILES[gpu])
    rows = list(read_table(path, "the measured Marlin module")[2])
    return [
        MarlinPoint(
            hidden=int(r["hidden"]),
            intermediate=int(r["intermediate"]),
            experts=int(r["experts"]),
            top_k=int(r["top_k"]),
            ep=int(r["ep"]),
            tokens=int(r["tokens"]),
            seconds=float(r["time_us"]) * 1e-6,
        )
        for r in rows
    ]


def measured(gpu: str = "h200") -> MarlinModule:
    """The module of `gpu`'s committed measurement (module doc), built once per GPU."""
    return _measured(gpu)


@functools.cache
def _measured(gpu: str) -> MarlinModule:
    module = build(load_points(gpu=gpu))
    if gpu in TP_FILES:
        module = replace(module, tp_split=build_tp_split(load_tp_points(gpu)))
    return module


REFUSAL = (
    "W4A16 experts (Marlin) are timed from measurements on the H200 and the H100 only; other GPUs without native "
    "FP4 are not carried"
)
ALLOWED = "bf16 on an H200, an H100 or a GPU with native FP4 (sim.timing.carry rule 4); fp8 elsewhere"


def measured_on(profile) -> bool:
    """Whether `profile`'s GPU is one the module was measured on."""
    return gpu_key(profile) in POINTS_FILES


def for_gpu(profile) -> MarlinModule:
    """The module measured on `profile`'s GPU; an InputError where it was not measured."""
    if not measured_on(profile):
        raise InputError(
            REFUSAL, where="models[].expert_activations", value=f"bf16 on {profile.gpu}", allowed=ALLOWED
        )
    return measured(gpu_key(profile))
