"""A measured MoE module (the engine's whole routed-expert op) as sim times it: a floor and a cost per weight by
(local experts, rows an expert), and its efficiency under expert TP (issue 29).

Every engine MoE runner sim times from its own measured rows goes through here: Marlin's W4A16 module
(AIConfigurator's, sim.timing.marlin) and the runners of sim.timing.engine_moe (FlashInfer's SM90 CUTLASS W4A16
kernel, measured here; SGLang's FlashInfer TRT-LLM MXFP4 and Triton modules on Blackwell, AIConfigurator's). The
carry is the same for all and is argued in sim.timing.marlin's doc: at equal rows
an expert the kernel runs one configuration and streams each local expert's weights alike, so its time above the
floor (the engine's MoE glue, which sim charges in the forward-pass term) scales with the weights of the experts a
GPU runs; between measured local expert counts the cost per weight is geometric in the experts, and beyond the
most rows measured it grows linearly with the rows (the last segment's slope).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from sim.timing.interp import LINEAR, LOGLOG, Curve, Grid


class ModulePoint(NamedTuple):
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
class MoeModule:
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


def build(
    points: list[ModulePoint], floor_s: float | None = None, one_row: str = "interpolated"
) -> MoeModule:
    """The module of the measured points (one shape; module doc); `floor_s`: the module's glue where it was
    measured apart from these points (another shape's least time), else their least time. `one_row`: the time at
    exactly one row an expert, `interpolated` linearly in the tokens between the measured points around it, or
    `held` from the fewest tokens measured at or above it (a kernel whose tile holds many rows an expert, so
    that its time follows the experts it touches, not the rows: interpolating from a point that touched fewer
    experts would undercount)."""
    shapes = {(p.hidden, p.intermediate, p.experts, p.top_k) for p in points}
    if len(shapes) != 1:
        raise ValueError(f"the module's points must be of one expert shape, not {sorted(shapes)}")
    floor = min(p.seconds for p in points) if floor_s is None else floor_s
    p0 = points[0]
    one_row_tokens = p0.experts / p0.top_k  # tokens at which every expert gets one row
    columns: list[tuple[float, Curve]] = []
    for ep in sorted({p.ep for p in points}, reverse=True):  # fewest local experts first
        col = sorted((p for p in points if p.ep == ep), key=lambda p: p.tokens)
        tokens = Curve(tuple(float(p.tokens) for p in col), tuple(p.seconds for p in col), LINEAR)
        local = p0.experts / ep
        rows = [1.0] + [p.tokens / one_row_tokens for p in col if p.tokens > one_row_tokens]
        times = [tokens.at(r * one_row_tokens) for r in rows]
        if one_row == "held":
            times[0] = next((p.seconds for p in col if p.tokens >= one_row_tokens), times[0])
        cost = [max(t - floor, 0.0) / (local * p0.expert_weights) for t in times]
        columns.append((local, Curve(tuple(rows), tuple(max(c, 1e-30) for c in cost), LINEAR)))
    outer = tuple(local for local, _ in columns)
    return MoeModule(floor, Grid(outer, tuple(c for _, c in columns), LOGLOG), max(outer))


def build_tp_split(points: list[ModulePoint], floor_s: float | None = None) -> TpSplit:
    """The expert-TP efficiency of one shape's module measured at TP sizes (`ModulePoint.ep` holding the TP size):
    above the module's glue (`floor_s`, else the least time measured), TP 1's time over t x TP t's, at most 1."""
    floor = min(p.seconds for p in points) if floor_s is None else floor_s
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
