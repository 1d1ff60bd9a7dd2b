"""Model shapes, H200 ceilings and the FLOP / byte formulas of kernels.md, as pure functions.

Every benchmark row reports ``flops`` and ``bytes`` from these formulas (not from what a kernel happens to
move), so achieved TFLOP/s and GB/s are comparable across implementations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kernels_bench.formats import ROW_BYTES

# H200 ceilings used for every fraction (kernels.md §1 [M]); re-measured in each run as well.
HBM_GBPS = 4200.0  # kernels.md §1: 4.2 TB/s copy (read + write counted)
BF16_TFLOPS = 790.0  # kernels.md §1: 8192³ cuBLAS bf16
FP8_TFLOPS = 1440.0  # kernels.md §1: tensorwise FP8 8192³
FP8_BLOCKWISE_TFLOPS = 1180.0  # kernels.md §1: DeepSeek 1×128/128×128 blockwise
TF32_TFLOPS = 395.0  # kernels.md §1 lists ~495 dense datasheet; half the measured bf16 rate is used here
L2_BYTES = 60 * 2**20  # kernels.md §1: 60 MiB reported

ATTN_HEADS = 64  # kernels.md §2: 64 query heads, both models
LATENT = 512  # kernels.md §2: d = 512, K = V
WINDOW = 128  # kernels.md §2: 128-token SWA in every layer
TOPK = 512  # kernels.md §2: indexer top-512
INDEX_DIM = 128  # kernels.md §2
REINDEX_BLOCKS = 2048  # kernels.md §2: layer 20 keeps its best 2,048 blocks of 8
REINDEX_BLOCK = 8  # kernels.md §2
REINDEX_CANDIDATES = REINDEX_BLOCKS * REINDEX_BLOCK  # 16,384 positions (kernels.md §3.2)
MHC_STREAMS = 4  # kernels.md §2: hc_mult 4
SINKHORN_ITERS = 20  # kernels.md §2: 20 Sinkhorn iterations


@dataclass(frozen=True)
class ModelDims:
    name: str
    hidden: int
    index_heads: int
    index_key_fmt: str  # format of the indexer keys on Hopper
    q_lora: int
    experts: int
    expert_inter: int
    top_k_experts: int


V4 = ModelDims(  # kernels.md §2, model.md §2
    name="V4-Flash",
    hidden=4096,
    index_heads=64,
    index_key_fmt="fp8_132",  # kernels.md §2: FP8 keys (132 B) on Hopper
    q_lora=1024,
    experts=256,
    expert_inter=2048,
    top_k_experts=6,
)
V41 = ModelDims(  # kernels.md §2, model.md §3
    name="V4.1-Flash",
    hidden=5120,
    index_heads=32,
    index_key_fmt="mxfp4_68",  # kernels.md §2: MXFP4 keys (68 B)
    q_lora=1280,
    experts=384,
    expert_inter=2304,
    top_k_experts=6,
)
MODELS = {"V4": V4, "V4.1": V41}


# ---- sparse MLA attention (kernels.md §3.2) -------------------------------------------------------


def attention_flops(entries: int, queries: int = 1) -> float:
    """2·h·(d_qk + d_v)·N per query token (QK and PV matmuls)."""
    return 2.0 * ATTN_HEADS * (LATENT + LATENT) * entries * queries


def attention_bytes(entries_by_fmt: dict[str, int], queries: int = 1) -> float:
    """N·E_kv over the (possibly mixed) formats plus Q in and O out in bf16, per query."""
    kv = sum(n * ROW_BYTES[f] for f, n in entries_by_fmt.items())
    return float(queries) * (kv + 2 * ATTN_HEADS * LATENT * 2)


# ---- indexer (kernels.md §3.2) ------------------------------------------------------------------


def indexer_flops(index_heads: int, keys: int, queries: int = 1) -> float:
    """2·H_I·128·N_c tensor-core FLOPs per query (the 3·H_I·N_c CUDA-core ops are not counted)."""
    return 2.0 * index_heads * INDEX_DIM * keys * queries


def indexer_bytes(key_fmt: str, keys: int, queries: int = 1, logits_written: bool = True) -> float:
    """N_c·E_key per query, plus 4·N_c for the fp32 logits written out."""
    return float(queries) * keys * (ROW_BYTES[key_fmt] + (4 if logits_written else 0))


def topk_bytes(cols: int, rows: int = 1) -> float:
    """One read of the fp32 scores (4·N_c per row); the selected indices are negligible."""
    return 4.0 * cols * rows


# ---- decode layer shapes (kernels.md §3.2 table) ------------------------------------------------


@dataclass(frozen=True)
class LayerShape:
    """Per-query work of one decode layer: attention entries by format and indexer keys scored."""

    model: str
    layer_kind: str
    window_entries: int
    compressed_entries: int
    window_fmt: str
    compressed_fmt: str
    index_keys: int  # 0 when the layer does not score
    dense_compressed: bool  # HCA: attends to every compressed entry (no top-k)


def layer_shape(model: str, layer_kind: str, context_tokens: int) -> LayerShape:
    """Entries and keys per query for a layer kind at context L (kernels.md §3.2 [C])."""
    L = context_tokens
    win = min(L, WINDOW)
    if model == "V4":
        fmt = "fp8_584"  # kernels.md §2: MODEL1 rows for SWA and compressed alike
        if layer_kind == "SWA":
            return LayerShape(model, layer_kind, win, 0, fmt, fmt, 0, False)
        if layer_kind == "CSA":
            return LayerShape(model, layer_kind, win, min(TOPK, L // 4), fmt, fmt, L // 4, False)
        if layer_kind == "HCA":
            return LayerShape(model, layer_kind, win, L // 128, fmt, fmt, 0, True)
    elif model == "V4.1":
        wfmt, cfmt = "fp8_528", "nvfp4_288"  # kernels.md §2: FP8 window, NVFP4 compressed
        if layer_kind == "Full-enc":
            return LayerShape(model, layer_kind, win, min(TOPK, L // 2), wfmt, cfmt, L // 2, False)
        if layer_kind == "Full-L20":
            return LayerShape(model, layer_kind, win, min(TOPK, L), wfmt, cfmt, L, False)
        if layer_kind == "Reindex":
            keys = min(L, REINDEX_CANDIDATES)
            return LayerShape(model, layer_kind, win, min(TOPK, keys), wfmt, cfmt, keys, False)
        if layer_kind == "Reuse":
            return LayerShape(model, layer_kind, win, min(TOPK, L), wfmt, cfmt, 0, False)
    raise ValueError(f"unknown layer {model}/{layer_kind}")


def layer_entries_by_fmt(shape: LayerShape) -> dict[str, int]:
    out: dict[str, int] = {}
    for fmt, n in (
        (shape.window_fmt, shape.window_entries),
        (shape.compressed_fmt, shape.compressed_entries),
    ):
        out[fmt] = out.get(fmt, 0) + n
    return out


def layer_flops_bytes(shape: LayerShape, batch: int) -> tuple[float, float]:
    """Decode-layer FLOPs and minimum HBM bytes: scoring + top-k over materialised logits + attention."""
    entries = shape.window_entries + shape.compressed_entries
    flops = attention_flops(entries, batch)
    nbytes = attention_bytes(layer_entries_by_fmt(shape), batch)
    if shape.index_keys:
        heads = MODELS[shape.model].index_heads
        key_fmt = MODELS[shape.model].index_key_fmt
        flops += indexer_flops(heads, shape.index_keys, batch)
        nbytes += indexer_bytes(key_fmt, shape.index_keys, batch) + topk_bytes(shape.index_keys, batch)
    return flops, nbytes


# ---- KV quantise-on-write (kernels.md §4.2) -----------------------------------------------------


def quant_bytes(fmt: str, rows: int) -> float:
    """Read the bf16 values (2 B per channel), write the quantised row."""
    from kernels_bench.formats import ROW_DIM

    return float(rows) * (2 * ROW_DIM[fmt] + ROW_BYTES[fmt])


# ---- mHC (kernels.md §5.2) ----------------------------------------------------------------------


def mhc_flops(hidden: int, tokens: int) -> float:
    """~250·H per token per boundary (kernels.md §5.2 [C])."""
    return 250.0 * hidden * tokens


def mhc_bytes(hidden: int, tokens: int, fused: bool) -> float:
    """Fused ≈ 20·H bytes per token, unfused ≈ 40·H, plus the fp32 mixing weights once (24·4H·4 B)."""
    per_token = (20 if fused else 40) * hidden
    return float(per_token * tokens + 24 * MHC_STREAMS * hidden * 4)


# ---- GEMMs (kernels.md §6.2) --------------------------------------------------------------------


def gemm_flops(m: int, n: int, k: int, groups: int = 1) -> float:
    return 2.0 * m * n * k * groups


def gemm_bytes(
    m: int, n: int, k: int, w_bytes: float, a_bytes: float, out_bytes: float, groups: int = 1
) -> float:
    """Weights (N·K per group) + activations (M·K) + outputs (M·N), each read or written once."""
    return groups * (n * k * w_bytes + m * k * a_bytes + m * n * out_bytes)


def roofline_floor_us(flops: float, nbytes: float, peak_tflops: float, bw_gbps: float = HBM_GBPS) -> float:
    """max(bytes / BW, FLOPs / peak) in microseconds."""
    t_mem = nbytes / (bw_gbps * 1e9)
    t_cmp = flops / (peak_tflops * 1e12) if peak_tflops > 0 else 0.0
    return max(t_mem, t_cmp) * 1e6


def experts_touched(experts: int, top_k: int, tokens: int) -> float:
    """E·(1 − (1 − k/E)^B) distinct experts under uniform routing (kernels.md §6.2 [C])."""
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def next_pow2(x: int) -> int:
    return 1 if x <= 1 else 2 ** math.ceil(math.log2(x))
