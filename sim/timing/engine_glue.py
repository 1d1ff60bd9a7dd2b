"""The engine's prefill attention side beyond sim's kernels, from the engine's own measured attention modules
(issue 29, sixth sitting).

sim composes a prefill chunk's attention side from kernels timed alone: the sparse MLA prefill, the indexer
scoring and the attention projections (sim.timing.calibrated). The serving engines run more than those
kernels on every prompt row: RMSNorm of q and kv, RoPE and its inverse on the output, FP8 quantisation of
each GEMM's input, the KV cache store, the compressor's pooling, the indexer's own RoPE, quantisation and
top-k, and the dequantisation of the window and compressed cache into the sparse kernel's BF16 workspace
(SGLang 0.5.15 `deepseek_v4_backend._forward_prefill_sparse`), each a separate pass over the rows.
sim's forward pass (sim.timing.forward) cannot size them: it runs its own glue, and its prefill points are
dropped by the `fused_glue` term as the engines' business.

NVIDIA's AIConfigurator measured that business: one V4-Flash layer's attention side as SGLang 0.5.14 and
vLLM 0.24.0 run it (`dsv4_{csa,hca}_context_module`, fp8_block, one sequence, no prefix) on the H100, H200,
B200, B300 and GB200, at 1-8,192 tokens and attention TP 1-8
(`hwprofiles/engine_modules/dsv4_prefill_attention_modules.csv`, `kernels_bench.aic_compare modules`).
At 512-8,192 tokens it was 1.3-3.7x sim's composition of the same layer before this term (heads split
/ tp then; docs/carry/aic/README.md, "Prefill attention modules"), and what it adds grows with the
tokens: a cost per prompt row.

So the engine glue is a term of the model, fitted as sim's forward-pass term is fitted (sim.timing.forward),
but against the engine's modules: for each GPU and engine, the 43-layer V4-Flash stack of AIC's modules (21
CSA; 20 HCA and the 2 SWA layers as HCA modules, as AIC counts them) minus sim's composition of the same
stack (`AttentionSideParts`, context 0, one chunk) at each measured (tokens, TP), fitted by least squares on
the relative error as `rows x (whole + split / tp)` seconds per layer and row: the part every attention-TP
GPU repeats and the part TP splits. No per-step constant: the modules at 1-64 tokens sit within 0.1 ms of
sim's composition, and a step's fixed costs are the forward-pass term's and the host's.
Assumptions [D]:
- the glue of a layer and row is the same whatever the prefix (AIC measured no prefix; the context-dependent
  kernels, attention and indexer scoring, are sim's own);
- V4.1 (no module measured) pays V4's glue per layer and prompt row: the same heads, latent, compressors
  and indexer per layer, the same engine code paths;
- rows of one step's several chunks pay it as one chunk of their sum (the glue is per row);
- a pool with no engine named, or on a GPU without the engine's modules, gets none (`calibrate show` says so).
"""

from __future__ import annotations

import csv
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from sim.errors import InputError
from sim.paths import hwprofiles_dir

MODULES_FILE = "engine_modules/dsv4_prefill_attention_modules.csv"
# V4-Flash's layers by AIC module kind (model.md §4: 21 CSA, 20 HCA, 2 SWA; AIC counts SWA as HCA)
STACK_LAYERS = {"CSA": 21, "HCA": 22}
FIT_TOKENS = (512, 8192)  # the tokens sim's prefill tables measure (mla_prefill's grid)


class ModulePoint(NamedTuple):
    """One measured module: an engine's layer of `layer_kind` at `tp`, `isl` tokens, in seconds."""

    layer_kind: str
    tp: int
    isl: int
    latency_s: float


class AttentionSideParts(NamedTuple):
    """sim's composed attention side of a stack for one chunk at context 0, split by what TP does to it."""

    mla_s: float  # the sparse MLA prefill at all heads (a TP GPU runs its padded share of it)
    index_s: float  # the indexer scoring, whole on every TP GPU
    whole_s: float  # attention projections every TP GPU runs whole (TP_REPLICATED)
    split_s: float  # attention projections TP splits (wq_b, wo_a, wo_b)

    def at(self, tp: int, head_share: float) -> float:
        return self.mla_s * head_share + self.index_s + self.whole_s + self.split_s / tp


@dataclass(frozen=True)
class EngineGlue:
    """Seconds per layer and prompt row the engine adds to sim's prefill attention side."""

    engine: str
    engine_version: str
    gpu: str
    whole_s: float  # per layer and row, on every attention-TP GPU
    split_s: float  # per layer and row, divided over the attention-TP GPUs
    points: int
    rms_rel_error_before: float  # sim's composition against the modules, without the term
    rms_rel_error_after: float

    def per_layer_row_s(self, tp: int) -> float:
        return self.whole_s + self.split_s / tp

    def describe(self) -> str:
        return (
            f"{self.engine} {self.engine_version} on {self.gpu}: {self.whole_s * 1e9:.1f} ns + "
            f"{self.split_s * 1e9:.1f} ns / tp per layer and prompt row, from {self.points} measured stacks "
            f"(rms error of sim's attention side {self.rms_rel_error_before:.0%} -> {self.rms_rel_error_after:.0%})"
        )


def modules_path() -> Path:
    return hwprofiles_dir() / MODULES_FILE


@functools.cache
def load_modules(path: Path) -> dict[tuple[str, str], tuple[str, tuple[ModulePoint, ...]]]:
    """(gpu, engine) -> (engine version, its measured module points); an InputError naming the file, line and
    value on a malformed row."""
    out: dict[tuple[str, str], tuple[str, list[ModulePoint]]] = {}
    with path.open() as f:
        lines = [(i, line) for i, line in enumerate(f, 1) if not line.startswith("#")]
    reader = csv.DictReader(line for _i, line in lines)
    for (lineno, _line), row in zip(lines[1:], reader, strict=True):
        try:
            point = ModulePoint(
                row["layer_kind"], int(row["tp"]), int(row["isl"]), float(row["latency_us"]) * 1e-6
            )
        except (KeyError, TypeError, ValueError) as e:
            raise InputError("malformed engine module row", file=str(path), where=f"line {lineno}",
                             value=str(e)) from None  # fmt: skip
        key = (row["gpu"], row["engine"])
        out.setdefault(key, (row["engine_version"], []))[1].append(point)
    return {k: (v, tuple(p)) for k, (v, p) in out.items()}


def stack_points(points: Sequence[ModulePoint]) -> list[tuple[int, int, float]]:
    """(tokens, tp, seconds) of the V4-Flash stack (STACK_LAYERS) at each measured (tokens, tp) inside
    FIT_TOKENS where every module kind was measured."""
    by: dict[tuple[int, int], dict[str, float]] = {}
    for p in points:
        if FIT_TOKENS[0] <= p.isl <= FIT_TOKENS[1]:
            by.setdefault((p.isl, p.tp), {})[p.layer_kind] = p.latency_s
    return [
        (isl, tp, sum(n * kinds[k] for k, n in STACK_LAYERS.items()))
        for (isl, tp), kinds in sorted(by.items())
        if kinds.keys() >= STACK_LAYERS.keys()
    ]


def fit_glue(points: Sequence[tuple[int, int, float, float]]) -> tuple[float, float]:
    """(whole, split) seconds per stack row minimising the relative error of `measured = composed + rows x
    (whole + split / tp)` over `points` of (rows, tp, composed_s, measured_s): two-parameter least squares,
    no intercept (module doc)."""
    # each equation divided by its measured time: a x whole + b x split = c
    saa = sab = sbb = sac = sbc = 0.0
    for rows, tp, composed, measured in points:
        a = rows / measured
        b = rows / tp / measured
        c = (measured - composed) / measured
        saa += a * a
        sab += a * b
        sbb += b * b
        sac += a * c
        sbc += b * c
    det = saa * sbb - sab * sab
    if not points or det <= 0.0:
        raise ValueError("engine glue fit needs points at two attention-TP degrees at least")
    return (sac * sbb - sbc * sab) / det, (saa * sbc - sab * sac) / det


def engine_glue(
    gpu: str,
    engine: str,
    compose: Callable[[int], AttentionSideParts],
    head_share: Callable[[int], float],
    path: Path | None = None,
) -> EngineGlue | None:
    """The engine glue of `engine` on `gpu` (None where its modules were not measured), fitted against
    `compose(tokens)`, sim's V4-Flash stack on that GPU, at `head_share(tp)` of the sparse MLA."""
    found = load_modules(path or modules_path()).get((gpu, engine))
    if found is None:
        return None
    version, points = found
    rows = []
    for isl, tp, measured in stack_points(points):
        rows.append((isl, tp, compose(isl).at(tp, head_share(tp)), measured))
    whole, split = fit_glue(rows)
    layers = sum(STACK_LAYERS.values())

    def rms(with_term: bool) -> float:
        errs = [(c + (r * (whole + split / tp) if with_term else 0.0)) / m - 1.0 for r, tp, c, m in rows]
        return (sum(e * e for e in errs) / len(errs)) ** 0.5

    return EngineGlue(engine, version, gpu, whole / layers, split / layers, len(rows), rms(False), rms(True))
