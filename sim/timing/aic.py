"""The `aic` kernel stack (`timing.kernels: aic`): NVIDIA AIConfigurator's measured operators where they
cover an operation of V4-Flash on the GPU, the production stack (measured, or carried from the H200 by
sim.timing.carry) everywhere else.

AIConfigurator is an optional dependency (sim.timing.aic_data): without it this stack is one InputError
naming how to install it. Which operations it replaces, from which AIC table, and why the others keep the
carry (`COVERAGE`; docs/carry/aic/README.md compares both with AIC op by op):

- dense projections (gemm_dense, V4): AIC's SGLang `gemm_perf` fp8_block rows (DeepGEMM, the kernel the
  production stack times on the H200) at the row's M and the projection's (N, K), log-log in M. vLLM's
  fp8_block rows are not used: at small M they sit flat at 3-25x BF16's time (~180 us on the B200), a table
  artifact (docs/carry/aic/README.md). wq_b (32768 x 1024) is not in AIC's grid: carry;
- routed experts (gemm_grouped moe_gate_up / moe_down, V4): a grouped row of g experts with b tokens each
  is AIC's balanced `moe_perf` (vLLM; on a GPU with an FP4 peak w4a8_mxfp4_mxfp8, or nvfp4 where the
  experts run W4A4 as the Dynamo B200 recipe's `nvidia/DeepSeek-V4-Flash-NVFP4` does (sim.timing.carry rule 4);
  w4a16_mxfp4 where they run W4A16, which AIC has at other shapes only, so the carry keeps those rows; else
  fp8_block) at EP e = 256 / g' with g' the power of two nearest g
  (each rank then holds g' experts) and T = 256 b / 6 tokens (uniform routing gives every expert b tokens),
  scaled by g / g', split between gate_up and down in the proportion of the production rows; T beyond AIC's
  16,384 tokens keeps the carry. AIC's time is the whole fused MoE (routing permute, activation included);
- mHC (mhc_fused / mhc_unfused, V4): one boundary = AIC's SGLang `mhc_module_perf` (TileLang) pre + post
  at the rows (vLLM's B200 table lacks `pre` below 48 tokens);
- attention (pipelines, sparse MLA, indexer), wo_a, V4.1, mHC outside AIC's tokens: carry. AIC's decode
  attention modules include the layer's projections and stop at batch x context ~ 1M tokens (batch 128:
  6,144), its sparse-MLA and indexer tables at 12,288 tokens, while sim's pipelines start at 8,192.
Rows AIC replaces are marked impl `aic` and their package names the AIC table. Communication is not a
kernel row: it stays the roofline's collectives.
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from pathlib import Path

from sim.timing.aic_data import AicData, find_aic
from sim.timing.carry import GpuPeaks, carried_stack
from sim.timing.interp import LOGLOG, Curve
from sim.timing.stacks import load_stack
from sim.timing.tables import KernelRow, KernelTables, gpu_key, table_path

MODEL = "V4"  # AIConfigurator 0.12 models V4-Flash only
EXPERTS, TOP_K, HIDDEN = 256, 6, 4096  # V4-Flash (model.md §2), the shapes AIC's tables are keyed by
GEMM_SOURCE = ("sglang", "0.5.14", "fp8_block")
MOE_SOURCE = ("vllm", "0.24.0")
MHC_SOURCE = ("sglang", "0.5.14")  # vLLM's B200 table lacks `pre` below 48 tokens
MHC_KERNELS = ("mhc_fused", "mhc_unfused")
COVERAGE = (
    ("dense projections (V4, but wq_b)", "AIC SGLang 0.5.14 gemm_perf fp8_block (DeepGEMM)"),
    (
        "routed experts (V4)",
        "AIC vLLM 0.24.0 moe_perf, balanced: w4a8_mxfp4_mxfp8 (nvfp4 for W4A4) with an FP4 peak, else fp8_block",
    ),
    ("mHC boundary (V4)", "AIC SGLang 0.5.14 mhc_module_perf (TileLang): pre + post"),
    ("wq_b projection", "carry: 32768 x 1024 is not in AIC's GEMM grid"),
    (
        "attention pipelines, sparse MLA, indexer",
        "carry: AIC's modules include the projections; its kernel "
        "tables stop at 12K context, below sim's 8K-1M grid",
    ),  # fmt: skip
    ("wo_a grouped projection", "carry: no grouped (8-way) GEMM in AIC"),
    ("V4.1 (every op)", "carry: AIConfigurator 0.12 has no V4.1-Flash"),
    ("communication", "roofline collectives (not a kernel row)"),
)


def _read(path: Path, columns: list[str]) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(path, columns=columns).to_pylist()


def _curve(points: dict[float, list[float]]) -> Curve | None:
    if len(points) < 2:
        return None
    xs = sorted(points)
    return Curve(tuple(xs), tuple(sum(points[x]) / len(points[x]) for x in xs), LOGLOG)


def _inside(curve: Curve, x: float) -> bool:
    return curve.xs[0] <= x <= curve.xs[-1]


def _gemms(system: Path) -> dict[tuple[int, int], Curve]:
    backend, version, dtype = GEMM_SOURCE
    path = system / "gemm" / backend / version / "gemm_perf.parquet"
    by_nk: dict[tuple[int, int], dict[float, list[float]]] = {}
    if path.is_file():
        for r in _read(path, ["gemm_dtype", "m", "n", "k", "latency"]):
            if r["gemm_dtype"] == dtype:
                by_nk.setdefault((r["n"], r["k"]), {}).setdefault(float(r["m"]), []).append(
                    r["latency"] * 1e-3
                )
    return {nk: c for nk, pts in by_nk.items() if (c := _curve(pts)) is not None}


def _moe(system: Path, dtype: str) -> dict[int, Curve]:
    """Per EP size: seconds of one balanced MoE layer of `dtype` over num_tokens tokens (expert TP 1)."""
    backend, version = MOE_SOURCE
    path = system / "moe" / backend / version / "moe_perf.parquet"
    by_ep: dict[int, dict[float, list[float]]] = {}
    if path.is_file():
        cols = ["moe_dtype", "num_tokens", "hidden_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size",
                "distribution", "latency"]  # fmt: skip
        for r in _read(path, cols):
            if (r["moe_dtype"], r["hidden_size"], r["topk"], r["num_experts"], r["moe_tp_size"],
                    r["distribution"]) == (dtype, HIDDEN, TOP_K, EXPERTS, 1, "balanced"):  # fmt: skip
                by_ep.setdefault(r["moe_ep_size"], {}).setdefault(float(r["num_tokens"]), []).append(
                    r["latency"] * 1e-3
                )
    return {ep: c for ep, pts in by_ep.items() if (c := _curve(pts)) is not None}


def _mhc(system: Path) -> Curve | None:
    backend, version = MHC_SOURCE
    path = system / "mhc" / backend / version / "mhc_module_perf.parquet"
    if not path.is_file():
        return None
    sums: dict[float, list[float]] = {}
    for r in _read(path, ["op_name", "num_tokens", "hidden_size", "latency"]):
        if r["hidden_size"] == HIDDEN:
            sums.setdefault(float(r["num_tokens"]), []).append(r["latency"] * 1e-3)
    # one boundary: pre + post, where both are measured
    return _curve({t: [sum(v)] for t, v in sums.items() if len(v) == 2})


def _note(aic: AicData, what: str) -> str:
    return f"aic {aic.version}: {what}"


def moe_dtype(peaks: GpuPeaks) -> str:
    """AIC's moe_perf format for the routed experts on `peaks`' GPU (module doc)."""
    if peaks.expert_activations == "bf16":
        return "w4a16_mxfp4"
    if not peaks.native_fp4:
        return "fp8_block"
    return "nvfp4" if peaks.expert_activations == "fp4" else "w4a8_mxfp4_mxfp8"


def aic_stack(base: KernelTables, aic: AicData, system: Path, dtype: str) -> KernelTables:
    """`base` (the production stack of the GPU) with the operations AIC covers replaced (module doc)."""
    gemms, moe, mhc = _gemms(system), _moe(system, dtype), _mhc(system)
    rows: list[KernelRow] = []
    by_point = {(r.kernel, r.groups, r.batch): r for r in base.rows
                if r.family == "gemm_grouped" and r.model == MODEL and r.kernel.startswith("moe_")}  # fmt: skip
    for r in base.rows:
        t = None
        if r.model == MODEL and r.family == "gemm_dense" and r.rows and r.n and r.k:
            c = gemms.get((int(r.n), int(r.k)))
            if c is not None and _inside(c, r.rows):
                t, what = c.at(r.rows), f"SGLang gemm_perf {GEMM_SOURCE[2]} m={r.rows:g}"
        elif r.model == MODEL and r.family == "gemm_grouped" and r.kernel.startswith("moe_") and r.groups:
            g, b = float(r.groups), float(r.batch or 1.0)
            local = 2 ** round(math.log2(g))
            c = moe.get(EXPERTS // local)
            tokens = EXPERTS * b / TOP_K
            other = by_point.get(
                ("moe_down" if r.kernel == "moe_gate_up" else "moe_gate_up", r.groups, r.batch)
            )
            if c is not None and other is not None and _inside(c, tokens):
                share = r.median_s / (r.median_s + other.median_s)
                t = c.at(tokens) * g / local * share
                what = (
                    f"vLLM moe_perf ep={EXPERTS // local} tokens={tokens:.0f} x {g / local:.2f} x {share:.2f}"
                )
        elif r.model == MODEL and r.family == "mhc" and r.kernel in MHC_KERNELS and mhc is not None:
            if r.rows and _inside(mhc, r.rows):
                t, what = mhc.at(r.rows), "SGLang mhc_module_perf pre + post"
        rows.append(r if t is None else replace(r, median_s=t, impl="aic", package=_note(aic, what)))
    return replace(base, rows=tuple(rows), stack="aic")


@functools.lru_cache(maxsize=8)
def _cached(peaks: GpuPeaks, key: str, root: Path, version: str) -> KernelTables:
    aic = AicData(root=root, version=version)
    system = aic.system(key)
    if system is None:
        from sim.errors import InputError

        raise InputError("AIConfigurator has no measured data for this GPU", where="timing.kernels: aic",
                         value=key, allowed="b200, gb200, b300, h200, h100")  # fmt: skip
    base = load_stack(key, "production") if table_path(key).is_file() else carried_stack(peaks, "production")
    return aic_stack(base, aic, system, moe_dtype(peaks))


def aic_tables(profile, expert_activations: str = "fp8") -> KernelTables:
    """The `aic` stack of `profile`'s GPU; an InputError when AIConfigurator is not installed."""
    aic = find_aic(needed_by="timing.kernels: aic")
    return _cached(GpuPeaks.of(profile, expert_activations), gpu_key(profile), aic.root, aic.version)


def stack_tables(profile, stack: str, expert_activations: str = "fp8") -> KernelTables:
    """The kernel tables a calibrated timing of `profile` reads for `stack` (timing.kernels), the routed
    experts' activations in `expert_activations` (sim.timing.carry rule 4)."""
    if stack == "aic":
        return aic_tables(profile, expert_activations)
    from sim.timing.carry import tables_for

    return tables_for(profile, stack, expert_activations)
