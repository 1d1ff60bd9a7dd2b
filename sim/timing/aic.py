"""The `aic` kernel stack: the engines' own operators as NVIDIA AIConfigurator measured them, on every GPU it
measured (H100, H200, B200, B300, GB200), the production stack (measured, or carried from the H200 by
sim.timing.carry) for the operations it did not measure. The stack of every pool whose scenario names its engine
(`timing.kernels: auto`, `resolved_stack` below); issue 29, docs/engines_and_validation.md section 64.

Why: sim's production rows are kernels sim timed alone (DeepGEMM, TileLang) on the H200, carried to the other
GPUs by the resource assumed to bind them; AIC timed the operator as the engine calls it (the activations'
quantisation with the GEMM, the fused MoE layer with its permutation) on each GPU. The rows are committed
(`hwprofiles/engine_modules/aic_*.csv`, Apache-2.0, written by `python3 -m kernels_bench.aic_operators`): AIC
need not be installed. Which operations they replace (`COVERAGE`; docs/carry/aic/README.md compares both):

- dense projections (gemm_dense): SGLang 0.5.14's `gemm_perf` fp8_block rows at the row's M and (N, K), log-log in
  M; a shape AIC's grid lacks (V4-Flash's wq_b, most of V4.1-Flash's) takes the nearest measured (N', K') in log
  space, scaled by N K / (N' K') (its time per FLOP at the same M) [D]. vLLM's fp8_block rows are not used: at
  small M they sit flat at 3-25x BF16's time (~180 us on the B200), a table artifact (docs/carry/aic/README.md);
- routed experts (gemm_grouped moe_gate_up / moe_down): a grouped row of g experts with b tokens each is vLLM
  0.24.0's balanced `moe_perf` layer (on a GPU with an FP4 peak w4a8_mxfp4_mxfp8, or nvfp4 where the experts run
  W4A4 as the Dynamo B200 recipe's `nvidia/DeepSeek-V4-Flash-NVFP4` does (sim.timing.carry rule 4); else
  fp8_block; W4A16 rows, which AIC has at other shapes only, keep the production stack) at EP e = 256 / g' with g'
  the power of two nearest g (each rank then holds g' experts) and T = 256 b / 6 tokens (every expert b tokens),
  scaled by g / g', split between gate_up and down in the proportion of the production rows; T beyond AIC's
  16,384 tokens keeps the production row. AIC measured V4-Flash's expert shape only: V4.1-Flash's experts take it
  at equal tokens an expert, scaled by their weights (N K of the row over V4-Flash's, 1.41x) [D];
- mHC (mhc_fused / mhc_unfused): one boundary = SGLang's `mhc_module_perf` (TileLang) pre + post at the rows,
  linear in the hidden size between the two AIC measured (4,096 and 7,168: V4.1-Flash's 5,120 between) [D];
- attention (pipelines, sparse MLA, indexer), wo_a, mHC outside AIC's tokens: production. AIC's decode
  attention modules include the layer's projections and stop at batch x context ~ 1M tokens (batch 128:
  6,144), its sparse-MLA and indexer tables at 12,288 tokens, while sim's pipelines start at 8,192; its prefill
  attention modules feed the engine glue instead (sim.timing.engine_glue).
Rows replaced are marked impl `aic` and their package names the AIC table. Communication is not a kernel row: it
stays the roofline's collectives.
"""

from __future__ import annotations

import csv
import functools
import math
from dataclasses import replace

from sim.paths import hwprofiles_dir
from sim.timing.carry import GpuPeaks, carried_stack
from sim.timing.interp import LOGLOG, Curve
from sim.timing.stacks import load_stack
from sim.timing.tables import KernelRow, KernelTables, gpu_key, table_path

AIC_VERSION = "0.12.0"
GPUS = ("b200", "b300", "gb200", "h100", "h200")  # the GPUs AIConfigurator measured (sim's keys)
EXPERTS, TOP_K = 256, 6  # V4-Flash's routing (model.md §2), the shape AIC's MoE rows are keyed by
V4_EXPERT_WEIGHTS = {
    "moe_gate_up": 4096 * 4096,
    "moe_down": 4096 * 2048,
}  # N K of V4-Flash's rows (production)
FILES = {"gemm": "aic_gemm_fp8_block.csv", "moe": "aic_moe_vllm.csv", "mhc": "aic_mhc.csv"}
MHC_KERNELS = ("mhc_fused", "mhc_unfused")
COVERAGE = (
    ("dense projections", "AIC SGLang 0.5.14 gemm_perf fp8_block (DeepGEMM, quantisation included); a shape "
     "outside its grid from the nearest measured one by N x K"),
    ("routed experts", "AIC vLLM 0.24.0 moe_perf, balanced, V4-Flash's shape: w4a8_mxfp4_mxfp8 (nvfp4 for W4A4) with "
     "an FP4 peak, else fp8_block; V4.1-Flash's by its expert weights"),
    ("mHC boundary", "AIC SGLang 0.5.14 mhc_module_perf (TileLang): pre + post, linear in the hidden size"),
    ("W4A16 routed experts", "production: AIC has W4A16 at other shapes only"),
    ("attention pipelines, sparse MLA, indexer", "production: AIC's modules include the projections; its kernel "
     "tables stop at 12K context, below sim's 8K-1M grid"),
    ("wo_a grouped projection", "production: no grouped (8-way) GEMM in AIC"),
    ("communication", "roofline collectives (not a kernel row)"),
)  # fmt: skip


def _rows(table: str) -> list[dict]:
    path = hwprofiles_dir() / "engine_modules" / FILES[table]
    with path.open() as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def _curve(points: dict[float, float]) -> Curve | None:
    if len(points) < 2:
        return None
    xs = sorted(points)
    return Curve(tuple(xs), tuple(points[x] for x in xs), LOGLOG)


def _inside(curve: Curve, x: float) -> bool:
    return curve.xs[0] <= x <= curve.xs[-1]


@functools.cache
def gemms(gpu: str) -> dict[tuple[int, int], Curve]:
    """Per measured (N, K): seconds of the GEMM over M rows."""
    by_nk: dict[tuple[int, int], dict[float, float]] = {}
    for r in _rows("gemm"):
        if r["gpu"] == gpu:
            by_nk.setdefault((int(r["n"]), int(r["k"])), {})[float(r["m"])] = float(r["time_us"]) * 1e-6
    return {nk: c for nk, pts in by_nk.items() if (c := _curve(pts)) is not None}


def gemm_at(gpu: str, n: float, k: float) -> tuple[Curve, float, tuple[int, int]] | None:
    """(curve, scale, measured (N', K')) timing an (n, k) projection: its own shape, else the nearest measured one
    in log space scaled by n k / (N' K') (module doc); None where the GPU has no rows."""
    table = gemms(gpu)
    if not table:
        return None
    nk = min(sorted(table), key=lambda p: abs(math.log(p[0] / n)) + abs(math.log(p[1] / k)))
    return table[nk], n * k / (nk[0] * nk[1]), nk


@functools.cache
def moe(gpu: str, dtype: str) -> dict[int, Curve]:
    """Per EP size: seconds of one balanced V4-Flash MoE layer of `dtype` over num_tokens tokens (expert TP 1)."""
    by_ep: dict[int, dict[float, float]] = {}
    for r in _rows("moe"):
        if r["gpu"] == gpu and r["moe_dtype"] == dtype:
            by_ep.setdefault(int(r["ep"]), {})[float(r["tokens"])] = float(r["time_us"]) * 1e-6
    return {ep: c for ep, pts in by_ep.items() if (c := _curve(pts)) is not None}


@functools.cache
def mhc(gpu: str) -> dict[int, Curve]:
    """Per hidden size: seconds of one mHC boundary (pre + post, where both are measured) over num_tokens."""
    parts: dict[int, dict[float, list[float]]] = {}
    for r in _rows("mhc"):
        if r["gpu"] == gpu:
            parts.setdefault(int(r["hidden"]), {}).setdefault(float(r["tokens"]), []).append(
                float(r["time_us"]) * 1e-6
            )
    out = {}
    for hidden, pts in parts.items():
        c = _curve({t: sum(v) for t, v in pts.items() if len(v) == 2})
        if c is not None:
            out[hidden] = c
    return out


def mhc_at(gpu: str, hidden: float, rows: float) -> float | None:
    """One mHC boundary at `hidden` over `rows`: the measured hidden size, else linear in it between the two
    nearest (held at the ends); None outside the tokens measured."""
    curves = mhc(gpu)
    sizes = sorted(h for h, c in curves.items() if _inside(c, rows))
    if not sizes:
        return None
    lo = max((h for h in sizes if h <= hidden), default=sizes[0])
    hi = min((h for h in sizes if h >= hidden), default=sizes[-1])
    a, b = curves[lo].at(rows), curves[hi].at(rows)
    return a if hi == lo else a + (b - a) * (hidden - lo) / (hi - lo)


def moe_dtype(peaks: GpuPeaks) -> str:
    """AIC's moe_perf format for the routed experts on `peaks`' GPU (module doc)."""
    if peaks.expert_activations == "bf16":
        return "w4a16_mxfp4"
    if not peaks.native_fp4:
        return "fp8_block"
    return "nvfp4" if peaks.expert_activations == "fp4" else "w4a8_mxfp4_mxfp8"


def _note(what: str) -> str:
    return f"aic {AIC_VERSION}: {what}"


def _gemm_row(gpu: str, r: KernelRow) -> tuple[float, str] | None:
    found = gemm_at(gpu, r.n, r.k)
    if found is None or not _inside(found[0], r.rows):
        return None
    curve, scale, (n, k) = found
    carried = "" if scale == 1.0 else f" at {n} x {k}, x {scale:.3f} by N K"
    return curve.at(r.rows) * scale, f"SGLang gemm_perf fp8_block m={r.rows:g}{carried}"


def _moe_row(curves: dict[int, Curve], r: KernelRow, other: KernelRow | None) -> tuple[float, str] | None:
    g, b = float(r.groups), float(r.batch or 1.0)
    local = 2 ** round(math.log2(g))
    c = curves.get(EXPERTS // local)
    tokens = EXPERTS * b / TOP_K
    if c is None or other is None or not _inside(c, tokens):
        return None
    share = r.median_s / (r.median_s + other.median_s)
    weights = r.n * r.k / V4_EXPERT_WEIGHTS[r.kernel]  # 1 for V4-Flash's own rows
    what = f"vLLM moe_perf ep={EXPERTS // local} tokens={tokens:.0f} x {g / local:.2f} x {share:.2f}"
    return c.at(tokens) * g / local * share * weights, what + (
        f" x {weights:.3f} by weights" if weights != 1 else ""
    )


def aic_stack(base: KernelTables, gpu: str, dtype: str) -> KernelTables:
    """`base` (the production stack of the GPU) with the operations AIC covers replaced (module doc)."""
    experts = moe(gpu, dtype)
    rows: list[KernelRow] = []
    by_point = {(r.model, r.kernel, r.groups, r.batch): r for r in base.rows
                if r.family == "gemm_grouped" and r.kernel in V4_EXPERT_WEIGHTS}  # fmt: skip
    for r in base.rows:
        got = None
        if r.family == "gemm_dense" and r.rows and r.n and r.k:
            got = _gemm_row(gpu, r)
        elif r.family == "gemm_grouped" and r.kernel in V4_EXPERT_WEIGHTS and r.groups and r.n and r.k:
            pair = "moe_down" if r.kernel == "moe_gate_up" else "moe_gate_up"
            got = _moe_row(experts, r, by_point.get((r.model, pair, r.groups, r.batch)))
        elif r.family == "mhc" and r.kernel in MHC_KERNELS and r.rows and r.n:
            t = mhc_at(gpu, r.n, r.rows)
            got = None if t is None else (t, f"SGLang mhc_module_perf pre + post at hidden {r.n:g}")
        rows.append(r if got is None else replace(r, median_s=got[0], impl="aic", package=_note(got[1])))
    return replace(base, rows=tuple(rows), stack="aic")


@functools.lru_cache(maxsize=16)
def _cached(peaks: GpuPeaks, key: str) -> KernelTables:
    if key not in GPUS:
        from sim.errors import InputError

        raise InputError("AIConfigurator has no measured operators for this GPU", where="timing.kernels: aic",
                         value=key, allowed=", ".join(GPUS))  # fmt: skip
    base = load_stack(key, "production") if table_path(key).is_file() else carried_stack(peaks, "production")
    return aic_stack(base, key, moe_dtype(peaks))


def aic_tables(profile, expert_activations: str = "fp8") -> KernelTables:
    """The `aic` stack of `profile`'s GPU; an InputError for a GPU AIConfigurator did not measure."""
    return _cached(GpuPeaks.of(profile, expert_activations), gpu_key(profile))


def resolved_stack(kernels: str, engine: str, profile) -> str:
    """The stack `timing.kernels` names; `auto`: the engine's operators (`aic`) where the scenario names its engine
    and AIConfigurator measured the GPU, the production stack elsewhere (module doc)."""
    if kernels != "auto":
        return kernels
    return "aic" if engine and profile is not None and gpu_key(profile) in GPUS else "production"


def stack_tables(profile, stack: str, expert_activations: str = "fp8") -> KernelTables:
    """The kernel tables a calibrated timing of `profile` reads for `stack` (timing.kernels, resolved), the routed
    experts' activations in `expert_activations` (sim.timing.carry rule 4)."""
    if stack == "aic":
        return aic_tables(profile, expert_activations)
    from sim.timing.carry import tables_for

    return tables_for(profile, stack, expert_activations)
