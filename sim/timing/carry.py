"""Kernel times on GPUs without measured tables, carried from the H200's (both kernel stacks).

Every measured H200 kernel row has a time t, FLOPs F and HBM bytes Y. Its op class
(attention, dense GEMM, grouped/MoE GEMM, elementwise/mHC; communication is timed by the
roofline's collectives at the profile's link fractions) and its precision (the compute ceiling
the row was measured against: FP8 for >= 1,000 TFLOP/s, else BF16; mHC's TF32 GEMM scales as
BF16) say which peaks it runs against. The rule, per row:

1. Latency floor: `t_lat = min(t, LAUNCH_S x kernels)`, one CUDA-graph kernel launch per kernel
   (kernels.md §1 [M]: 1.5-3 us; a decode pipeline row is indexer + top-k + sparse MLA, 3
   kernels), a software cost that does not shrink on a faster GPU.
2. Work: `w = t - t_lat` ran at a compute fraction `F / (P_H w)` and a bandwidth fraction
   `Y / (B_H w)` of the H200 datasheet peaks (kernels.md §1 [A]: 989 BF16 / 1,979 FP8 TFLOP/s,
   4.8 TB/s); the larger is the bound resource and its fraction is the kernel's efficiency of
   that resource at its rows (batch, tokens, experts x tokens). The other resource was not the
   limit, so its fraction only bounds its efficiency from below: for it the kernel gets the best
   fraction of that resource any kernel of its op class reached (`class_best`). The per-class
   curves `efficiency_curves` summarise these separate compute and bandwidth efficiencies.
2b. Bound by neither peak (issue 28): a row whose compute fraction and bandwidth fraction are both below
   `KNEE` x what that resource delivers at saturation on the H200 (its ceiling rows: the SM copy at
   4.24 TB/s = 0.88 of the datasheet, cuBLAS BF16 / FP8 at 0.78 / 0.72, kernels.md §1 [M]) is limited by
   what its SMs keep in flight and issue (latency x outstanding requests, Little's law: achieved bandwidth
   = bytes in flight / latency, which a higher peak does not change), not by either peak. Below about half
   the saturated rate the memory latency is near its unloaded value, so the achieved rate is set by the
   concurrency [D: KNEE = 0.5, chosen from that argument before any second GPU was measured]. Its work
   carries with the SMs' issue rate (SM count x maximum clock, `sm_count`, `sm_clock_max_MHz` of the
   profile): `t_X = t_lat + max(w x SM_H / SM_X, F_X / (P_X s_c), Y_X / (B_X s_b))`, the floors being X's
   peaks at the H200's saturation fractions. Same SMs and clocks (H100 vs H200): the same time. The
   small-M projections (router, wkv, compressors), FlashMLA sparse decode, the decode pipelines and the
   mHC boundary sit there on the H200 (`sim calibrate show GPU` lists each row's regime).
3. On GPU X the same software reaches the same fractions of X's peaks:
   `t_X = t_lat + max(F_X / (P_X ec), Y_X / (B_X eb))`; identical to t on the H200 itself (the
   bound term reproduces w, the other is smaller). A kernel compute-bound on the H200 can become
   bandwidth-bound on X and vice versa.
3b. Except GEMMs' compute, where measured: AIConfigurator's SGLang 0.5.14 FP8 GEMMs with m, n, k >= 4,096 reach
   a median 0.606 of the FP8 peak on the H200, 0.619 on the H100, 0.570 on the B200, 0.605 on the B300 and 0.565
   on the GB200 (`accelerator.gemm_fp8_peak_frac`, `python3 -m kernels_bench.aic_gemm_frac`): a dense or grouped
   GEMM row's compute fraction on X is the H200's times X's over the H200's (`GpuPeaks.gemm_frac`). Attention,
   mHC and the rest keep rule 3 (no measured ratio); AMD GPUs and the H20, unmeasured, too.
4. Formats X runs natively (Blackwell and other GPUs with an FP4 peak in their profile): the
   routed experts (grouped MoE GEMMs) are MXFP4 (model.md: per-32 UE8M0 scales, 0.53125 B a
   weight), so `Y_X` replaces the FP8 weight bytes (groups x N x K) by MXFP4 bytes. Their MMA rate is
   set by the activations, not the weights (`GpuPeaks.expert_activations`): an FP8 x FP4 product is
   tcgen05 `kind::mxf8f6f4`, K = 32 a instruction as for FP8 x FP8, so the FP8 peak; only FP4 x FP4
   (`kind::mxf4` / `mxf4nvf4`, K = 64) reaches the FP4 peak (PTX ISA 9.7.17.2.1, Table 42 [A]); BF16
   activations (W4A16, the weights dequantised in the kernel) run at the BF16 peak, at the FP8 kernel's
   fractions [D] (on GPUs without native FP4, W4A16 is Marlin's measured module, sim.timing.marlin). The
   engines quantise the activations of MXFP4 experts to FP8 (W4A8): SGLang 0.5.15's flashinfer_mxfp4
   runner (`mxfp8_quantize`), DeepEP + DeepGEMM's FP8 x FP4 grouped GEMM and Mega MoE's `fp8_fp4_mega_moe`
   (unless its FP4-activation env is set); vLLM 0.34.0's DeepSeek-V4 MXFP4 backends (FlashInfer TRT-LLM
   MXFP4 x MXFP8, then DeepGEMM MXFP4, fused_moe/oracle/mxfp4.py `select_deepseek_v4_mxfp4_moe_backend`). An
   NVFP4 checkpoint on vLLM runs W4A4 (modelopt.py: activation key kNvfp4Dynamic): `fp4`. Before issue 29's
   seventh sitting every expert GEMM here ran at the FP4 peak; AIConfigurator's measured B200 W4A8 MoE
   (SGLang 0.5.14 / vLLM 0.24.0) took 2-3x that at 4K-16K tokens (docs/carry/aic). Index keys are
   MXFP4 (68 B instead of the FP8 132 B Hopper kernels read, kernels.md §2), scaling the key bytes of
   every row timed with FP8 keys (V4's indexer and CSA pipeline; the production stack's V4.1 indexer,
   DeepGEMM's SM90 MQA logits being FP8 only, kernels.md §3.1). Their compute stays at the FP8 rate [D]:
   the head reduction on CUDA cores (3·H·N ops, kernels.md §3.1) does not speed up with FP4 MMAs.
5. Published Blackwell anchors bound what the rule gives (each with its source, `ANCHORS`):
   FlashMLA sparse decode reaches at most 350 TFLOP/s on B200 and keeps a ~21.6 us per-call
   floor at batch 1; FlashMLA sparse prefill at most 1,450 TFLOP/s. The anchors act on the sparse
   MLA rows and, through them, on the decode pipelines that contain that kernel.
Everything else (mHC, GEMM shapes, top-k) follows the rule alone; for AMD GPUs the rule carries
CUDA kernels' fractions to ROCm, an assumption [D] no measurement checks.
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from sim.hardware import load_hw
from sim.paths import hwprofiles_dir
from sim.timing.stacks import OpTimes, load_stack, rows_per_sequence
from sim.timing.tables import KernelRow, KernelTables, gpu_key, table_path

REFERENCE_GPU = "h200"
REFERENCE_PROFILE = "nvidia-h200-hgx8"
# H200 datasheet peaks (kernels.md §1 [A]): the fractions are of these, as the roofline's are
H200_HBM_BYTES_PER_S = 4.8e12
H200_PEAK_FLOPS_PER_S = {"bf16": 989e12, "fp8": 1979e12}
LAUNCH_S = 2e-6  # kernels.md §1 [M]: one kernel launch inside a CUDA graph costs ~1.5-3 us
KNEE = 0.5  # rule 2b [D]: below half the saturated rate of both resources a row is concurrency-bound
H200_SM_RATE = (
    132 * 1980e6
)  # SMs x maximum clock (hwprofiles/nvidia-h200-hgx8.yaml sm_count, sm_clock_max_MHz)
PIPELINE_KERNELS = 3  # indexer scoring + top-k + sparse MLA (kernels_bench decode_layer)
MXFP4_BYTES_PER_WEIGHT = 0.53125  # 4-bit values + one UE8M0 scale per 32 (model.md §2, spec weight_formats)
FP8_INDEX_KEY_BYTES, FP4_INDEX_KEY_BYTES = 132.0, 68.0  # kernels.md §2: V4 index key on Hopper / Blackwell
# rows that read V4's index keys, and the column with the keys per sequence (indexer: n, pipeline: k)
V4_INDEX_ROWS = (("indexer", "CSA"), ("pipeline", "CSA"))
OP_CLASSES = ("attention", "dense_gemm", "grouped_gemm", "elementwise")


@dataclass(frozen=True)
class Anchor:
    """A published number that bounds a kernel on a GPU family."""

    name: str
    applies_to: str  # family/kernel
    value: float
    unit: str
    source: str


ANCHORS = (
    Anchor(
        "FlashMLA sparse decode, compute-bound rate on B200",
        "attention/sparse_mla_decode",
        350e12,
        "FLOP/s",
        "FlashMLA README (deepseek-ai/FlashMLA): 'up to 350 TFLOP/s on B200 (not really optimized yet)'; kernels.md §9a [A]",
    ),
    Anchor(
        "FlashMLA sparse decode, per-call floor at batch 1 (split-KV + combine)",
        "attention/sparse_mla_decode",
        21.6e-6,
        "s",
        "FlashInfer 'Frost' vs FlashMLA V4.1 sparse decode, Blackwell-class GPU, B = 1: 21.6 us; kernels.md §3.1 [B]",
    ),
    Anchor(
        "FlashMLA sparse prefill, compute-bound rate on B200",
        "attention/sparse_mla_prefill",
        1450e12,
        "FLOP/s",
        "FlashMLA README: sparse prefill up to 1,450 TFLOP/s on B200 (CUDA 12.9); kernels.md §9a [A]",
    ),
)


@dataclass(frozen=True)
class GpuPeaks:
    """What the rule needs of a GPU: datasheet peaks and whether it runs FP4 natively."""

    name: str
    hbm_bytes_per_s: float
    bf16_flops_per_s: float
    fp8_flops_per_s: float
    fp4_flops_per_s: float  # 0: no native FP4
    vendor: str
    sm_rate: float = H200_SM_RATE  # SMs x maximum clock (Hz); the H200's where the profile does not say
    # rule 4: the routed experts' activations, fp8 (W4A8, the FP8 MMA rate), fp4 (W4A4, the FP4 rate) or
    # bf16 (W4A16, the BF16 rate)
    expert_activations: str = "fp8"
    # rule 3b: the fraction of its FP8 peak large GEMMs reach on this GPU against the H200's, where both are measured
    gemm_frac: float = 1.0

    @classmethod
    def of(cls, profile, expert_activations: str = "fp8") -> GpuPeaks:
        fp4 = profile.peak_tflops("fp4")
        return cls(
            name=str(profile.gpu),
            hbm_bytes_per_s=profile.hbm_bw_bytes_per_s,
            bf16_flops_per_s=profile.peak_flops_per_s("bf16"),
            fp8_flops_per_s=profile.peak_flops_per_s("fp8"),
            fp4_flops_per_s=profile.peak_flops_per_s("fp4") if fp4 else 0.0,
            vendor=str(profile.vendor),
            sm_rate=_sm_rate(profile.accelerator),
            expert_activations=expert_activations,
            gemm_frac=_gemm_frac(profile.accelerator),
        )

    @property
    def sm_ratio(self) -> float:
        """The SMs' issue rate (SM count x clock) against the H200's: what rule 2b carries by."""
        return self.sm_rate / H200_SM_RATE

    @property
    def native_fp4(self) -> bool:
        return self.fp4_flops_per_s > 0.0

    @property
    def blackwell(self) -> bool:
        """NVIDIA with native FP4: B200, GB200, B300 (what the Blackwell anchors apply to)."""
        return self.native_fp4 and self.vendor == "nvidia"

    def flops_per_s(self, prec: str) -> float:
        return {"bf16": self.bf16_flops_per_s, "fp8": self.fp8_flops_per_s, "fp4": self.fp4_flops_per_s}[prec]


def _gemm_frac(acc) -> float:
    """Rule 3b: `acc`'s measured large-GEMM fraction of its FP8 peak over the reference GPU's; 1.0 where either
    is not measured."""
    own = acc.gemm_fp8_peak_frac
    ref = _reference_gemm_frac(hwprofiles_dir())
    return 1.0 if own is None or ref is None else own.value / ref


@functools.lru_cache(maxsize=4)
def _reference_gemm_frac(profiles: Path) -> float | None:
    """The reference GPU's measured fraction, read once per profiles folder (GpuPeaks.of runs at every pool build)."""
    frac = load_hw(profiles / f"{REFERENCE_PROFILE}.yaml").accelerator.gemm_fp8_peak_frac
    return None if frac is None else frac.value


def _sm_rate(acc) -> float:
    if acc.sm_count is None or acc.sm_clock_max_MHz is None:
        return H200_SM_RATE
    return acc.sm_count.value * acc.sm_clock_max_MHz.value * 1e6


def op_class(row: KernelRow) -> str | None:
    """The op class of a row (None: ceilings and format studies, which no step composes)."""
    if row.family in ("attention", "pipeline", "indexer", "topk"):
        return "attention"
    if row.family == "gemm_dense":
        return "dense_gemm"
    if row.family == "gemm_grouped":
        return "grouped_gemm"
    if row.family in ("mhc", "kvquant"):
        return "elementwise"
    return None


def precision(row: KernelRow) -> str:
    return "fp8" if (row.compute_ceiling_TFLOPs or 0.0) >= 1000.0 else "bf16"


@dataclass(frozen=True)
class Work:
    """A row split by the rule: latency floor, and the work's achieved fractions on the H200."""

    latency_s: float
    compute_frac: float
    bandwidth_frac: float

    @property
    def compute_bound(self) -> bool:
        return self.compute_frac >= self.bandwidth_frac


def work_of(row: KernelRow) -> Work:
    kernels = PIPELINE_KERNELS if row.family == "pipeline" and row.layer_kind != "SWA" else 1
    lat = min(row.median_s, LAUNCH_S * kernels)
    w = row.median_s - lat
    if w <= 0.0:
        return Work(lat, 0.0, 0.0)
    return Work(
        lat,
        row.flops / (H200_PEAK_FLOPS_PER_S[precision(row)] * w),
        row.bytes / (H200_HBM_BYTES_PER_S * w),
    )


def reads_fp8_index_keys(row: KernelRow) -> bool:
    """Rows whose indexer read FP8 (132 B) keys on the H200 (rule 4)."""
    if row.family == "indexer":
        return row.fmt == "fp8_132"
    return row.model == "V4" and (row.family, row.layer_kind) in V4_INDEX_ROWS


def _is_expert_gemm(row: KernelRow) -> bool:
    return row.family == "gemm_grouped" and row.kernel.startswith("moe_")


Best = dict[tuple[str, str], float]  # (op class, "compute" | "bandwidth") -> best fraction


@dataclass(frozen=True)
class Saturation:
    """What each resource delivers at saturation on the H200, as fractions of its datasheet peaks: the
    best of the tables' ceiling rows (rule 2b)."""

    bandwidth: float
    compute: tuple[tuple[str, float], ...]  # (precision, fraction)

    def compute_of(self, prec: str) -> float:
        return dict(self.compute).get(prec, 1.0)


def saturation(tables: KernelTables) -> Saturation:
    bw, comp = 0.0, {}
    for r in tables.rows:
        if r.family != "ceiling" or r.median_s <= 0.0:
            continue
        bw = max(bw, r.bytes / (H200_HBM_BYTES_PER_S * r.median_s))
        if r.flops:
            prec = precision(r)
            comp[prec] = max(comp.get(prec, 0.0), r.flops / (H200_PEAK_FLOPS_PER_S[prec] * r.median_s))
    return Saturation(min(bw, 1.0) or 1.0, tuple(sorted((k, min(v, 1.0)) for k, v in comp.items())))


def regime(row: KernelRow, sat: Saturation) -> str:
    """What binds a row on the H200 by rules 1-2b: compute, bandwidth or concurrency (neither peak)."""
    work = work_of(row)
    if concurrency_bound(work, precision(row), sat):
        return "concurrency"
    return "compute" if work.compute_bound else "bandwidth"


def concurrency_bound(work: Work, prec: str, sat: Saturation) -> bool:
    """Rule 2b: neither resource reaches KNEE of its saturated fraction."""
    return work.compute_frac < KNEE * sat.compute_of(prec) and work.bandwidth_frac < KNEE * sat.bandwidth


def class_best(tables: KernelTables) -> Best:
    """The highest compute and bandwidth fraction any row of each op class reached (rule 2)."""
    best: Best = {}
    for r in tables.rows:
        cls = op_class(r)
        if cls is None:
            continue
        work = work_of(r)
        for resource, frac in (("compute", work.compute_frac), ("bandwidth", work.bandwidth_frac)):
            best[cls, resource] = max(best.get((cls, resource), 0.0), frac)
    return best


def carried_time_s(row: KernelRow, gpu: GpuPeaks, best: Best, sat: Saturation | None = None) -> float:
    """Rules 1-4 for one row on `gpu` (anchors apply per operation, see `carry_tables`); without `sat`,
    rule 2b is off (every row bound by one of the peaks)."""
    work = work_of(row)
    if work.compute_frac == 0.0 and work.bandwidth_frac == 0.0:
        return row.median_s
    if sat is not None and concurrency_bound(work, precision(row), sat):
        w = row.median_s - work.latency_s
        nbytes, prec = _native_bytes(row, gpu)
        floors = (row.flops / (gpu.flops_per_s(prec) * sat.compute_of(precision(row)) * _gemm_share(row, gpu)),
                  nbytes / (gpu.hbm_bytes_per_s * sat.bandwidth))  # fmt: skip
        return work.latency_s + max(w / gpu.sm_ratio, *floors)
    cls = op_class(row) or ""
    ec, eb = work.compute_frac, work.bandwidth_frac
    if work.compute_bound:
        eb = max(eb, best.get((cls, "bandwidth"), 0.0))
    else:
        ec = max(ec, best.get((cls, "compute"), 0.0))
    nbytes, prec = _native_bytes(row, gpu)
    compute_s = row.flops / (gpu.flops_per_s(prec) * ec * _gemm_share(row, gpu)) if ec else 0.0
    memory_s = nbytes / (gpu.hbm_bytes_per_s * eb) if eb else 0.0
    return work.latency_s + max(compute_s, memory_s)


def _gemm_share(row: KernelRow, gpu: GpuPeaks) -> float:
    """Rule 3b: a GEMM row (dense or grouped) reaches `gpu.gemm_frac` of the H200's compute fraction; others 1."""
    return gpu.gemm_frac if op_class(row) in ("dense_gemm", "grouped_gemm") else 1.0


def _native_bytes(row: KernelRow, gpu: GpuPeaks) -> tuple[float, str]:
    """(bytes, precision) of a row on `gpu` in the formats it runs natively (rule 4)."""
    prec, nbytes = precision(row), row.bytes
    if gpu.native_fp4 and _is_expert_gemm(row) and prec == "fp8":
        weights = (row.groups or 1.0) * (row.n or 0.0) * (row.k or 0.0)  # FP8: one byte a weight
        return max(nbytes - weights, 0.0) + weights * MXFP4_BYTES_PER_WEIGHT, gpu.expert_activations
    if gpu.blackwell and reads_fp8_index_keys(row):
        keys = (row.batch or 1.0) * ((row.n if row.family == "indexer" else row.k) or 0.0)
        index = min(nbytes, keys * FP8_INDEX_KEY_BYTES)
        nbytes += index * (FP4_INDEX_KEY_BYTES / FP8_INDEX_KEY_BYTES - 1.0)
    return nbytes, prec


def _anchored(row: KernelRow, t: float, gpu: GpuPeaks) -> float:
    """Rule 5 on a sparse MLA row."""
    if not gpu.blackwell:
        return t
    for a in ANCHORS:
        if a.applies_to != f"{row.family}/{row.kernel}":
            continue
        t = max(t, row.flops / a.value) if a.unit == "FLOP/s" else max(t, a.value)
    return t


def carry_tables(ref: KernelTables, gpu: GpuPeaks) -> KernelTables:
    """The reference GPU's stack carried to `gpu` by the module's rules; pipelines pick up the
    anchored sparse MLA rows' excess over the plain rule at their (context, batch)."""
    best, sat = class_best(ref), saturation(ref)
    rows, plain_mla, anchored_mla = [], [], []
    for r in ref.rows:
        if r.family == "pipeline":
            continue
        t = carried_time_s(r, gpu, best, sat)
        t_anchor = _anchored(r, t, gpu)
        if (r.family, r.kernel) == ("attention", "sparse_mla_decode"):
            plain_mla.append(replace(r, median_s=t))
            anchored_mla.append(replace(r, median_s=t_anchor))
        rows.append(replace(r, median_s=t_anchor, package=_note(r, gpu)))
    plain, anchored = _by_kind(plain_mla), _by_kind(anchored_mla)
    for r in ref.rows:
        if r.family != "pipeline":
            continue
        t = carried_time_s(r, gpu, best, sat)
        kind = r.layer_kind if r.model == "V4" else "CSA2"
        key = (r.model if r.layer_kind != "SWA" else "V4", kind)
        if key in plain:  # verify-step pipelines (stacks rule 5) hold batch x s_q query rows
            ctx, b = float(r.context_tokens or 0.0), float(r.batch or 1.0) * rows_per_sequence(r)
            t += anchored[key].at(ctx, b) - plain[key].at(ctx, b)
        rows.append(replace(r, median_s=t, package=_note(r, gpu)))
    return replace(ref, rows=tuple(rows), sources=ref.sources, path=ref.path)


def _by_kind(rows: list[KernelRow]) -> dict[tuple[str, str], OpTimes]:
    groups: dict[tuple[str, str], list[KernelRow]] = {}
    for r in rows:
        groups.setdefault((r.model, r.layer_kind), []).append(r)
    return {k: OpTimes(v) for k, v in groups.items()}


def _note(row: KernelRow, gpu: GpuPeaks) -> str:
    origin = row.package or row.impl
    return f"carried from {REFERENCE_GPU} ({origin}) to {gpu.name}"


def carried_stack(gpu: GpuPeaks, stack: str) -> KernelTables:
    """The reference GPU's tables of one stack, carried to `gpu`."""
    return _carried(load_stack(REFERENCE_GPU, stack), gpu)


@functools.lru_cache(maxsize=16)
def _carried(ref: KernelTables, gpu: GpuPeaks) -> KernelTables:
    # the reference tables are cached per file and modification time, so this is too
    return carry_tables(ref, gpu)


def efficiency_curves(tables: KernelTables) -> list[dict]:
    """Per op class and rows (batch, tokens, experts x tokens): the median compute fraction of
    the rows bound by compute and the median bandwidth fraction of those bound by HBM (rule 2),
    with how many rows each median takes."""
    points: dict[tuple[str, float], tuple[list[float], list[float]]] = {}
    for r in tables.rows:
        cls = op_class(r)
        if cls is None:
            continue
        work = work_of(r)
        if work.compute_frac == 0.0 and work.bandwidth_frac == 0.0:
            continue
        rows = float(r.rows or r.batch or 1.0)
        compute, bandwidth = points.setdefault((cls, rows), ([], []))
        (compute if work.compute_bound else bandwidth).append(
            work.compute_frac if work.compute_bound else work.bandwidth_frac
        )
    out = []
    for (cls, rows), (compute, bandwidth) in sorted(points.items()):
        out.append(
            {
                "op_class": cls,
                "rows": rows,
                "compute_frac": statistics.median(compute) if compute else None,
                "compute_bound_rows": len(compute),
                "bandwidth_frac": statistics.median(bandwidth) if bandwidth else None,
                "bandwidth_bound_rows": len(bandwidth),
            }
        )
    return out


def tables_for(profile, stack: str, expert_activations: str = "fp8") -> KernelTables:
    """The kernel tables a calibrated timing of `profile` reads: its own GPU's where they are
    measured, else the reference GPU's carried to it with the routed experts' activations in
    `expert_activations` (rule 4)."""
    key = gpu_key(profile)
    if table_path(key).is_file():
        return load_stack(key, stack)
    return carried_stack(GpuPeaks.of(profile, expert_activations), stack)


def tables_available(profile) -> bool:
    """Measured tables for this GPU, or the reference GPU's to carry."""
    return table_path(gpu_key(profile)).is_file() or table_path(REFERENCE_GPU).is_file()


def carried(profile) -> bool:
    """True when `profile`'s tables are carried from the reference GPU (none measured on it)."""
    return not table_path(gpu_key(profile)).is_file()
