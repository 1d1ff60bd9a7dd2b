"""A real V4-Flash forward pass on the GPU, built from the production kernels, to check the composed step.

Issue 11 item 3. A stack of decoder layers with random weights and the model's real shapes (kernels.md §2,
§6.2; the MoE has the real expert shape but ``experts`` routed experts on the GPU, as under expert
parallelism), run as one CUDA graph:

    per layer: mHC boundary (TileKernels) -> q_a / q norm / q_b / RoPE, kv / kv norm / RoPE / quantise-on-write
    -> [CSA: compressor GEMM, indexer q + weights GEMMs, FP8 indexer scores, top-k] [HCA: compressor GEMM]
    -> FlashMLA sparse attention (window 128 + compressed entries) -> inverse RoPE -> wo_a (8 groups) -> wo_b
    -> mHC boundary -> router, top-6, sort, rowwise FP8 quantisation, FP8 grouped gate/up, SwiGLU, rowwise FP8
    quantisation, FP8 grouped down, weighted combine
    + shared expert

Each operation is a named op; ``measure`` times the whole graph (``measured_us_*``) and every op alone in
its own graph, summed over the stack (``kernel_sum_us`` and the per-category breakdown), so the difference is
what launching them back to back costs or saves. ``RefKernels`` runs the same stack with float reference
kernels (CPU or GPU) so that the structure is tested in CI and the GPU stack can be checked against it.

    python3 -m kernels_bench.production.forward --out DIR [--points smoke|full] [--commit SHA]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from kernels_bench import columns, formats, indexer
from kernels_bench.columns import FORWARD_COLUMNS, names
from kernels_bench.production import mhc_tk
from kernels_bench.production.attention import sparse_mla_ref_qkv

FWD_COLUMNS = list(names(FORWARD_COLUMNS))  # kernels_bench.columns: shared with sim.timing.forward
# attention: FlashMLA; indexer: index weights, FP8 scores, top-k; mhc: both boundaries; dense_gemm: FP8
# blockwise GEMMs and wo_a; act_quant: their activation quantisation and the grouped GEMMs' rowwise one (its own
# op since docs/carry/moe_grouped split it out: glue a serving engine fuses); moe: the two grouped GEMMs;
# routing: router, top-6, sort, dispatch gather and the weighted combine; other: norms, RoPE, SwiGLU,
# quantise-on-write
CATEGORIES = ("attention", "indexer", "mhc", "dense_gemm", "act_quant", "moe", "routing", "other")


@dataclass(frozen=True)
class Dims:
    """V4-Flash shapes (kernels.md §2, §6.2); ``experts`` = routed experts resident on the GPU."""

    hidden: int = 4096
    q_lora: int = 1024
    heads: int = 64
    head_dim: int = 512
    rope_dim: int = 64
    o_groups: int = 8
    o_lora: int = 1024
    index_heads: int = 64
    index_dim: int = 128
    topk: int = 512
    window: int = 128
    experts: int = 32
    experts_per_token: int = 6
    inter: int = 2048
    shared_inter: int = 2048
    compressor_out: dict = field(default_factory=lambda: {"CSA": 2048, "HCA": 1024})  # kernels.md §6.2
    index_compressor_out: int = 512


RATIO = {"SWA": 0, "CSA": 4, "HCA": 128}  # compression ratio per layer kind (kernels.md §2)
KIND_LABEL = {"SWA": "SWA", "CSA": "CSA4", "HCA": "HCA128"}


def ceil_to(x: int, m: int) -> int:
    return -(-x // m) * m


# ---- FP8 helpers shared by both backends (the reference quantises the same way, so only the
# accumulation differs) ---------------------------------------------------------------------------


def act_quant_blockwise(x: torch.Tensor):
    """bf16 [M, K] -> e4m3 codes and fp32 scales [M, K/128] (1×128 groups, amax/448)."""
    m, k = x.shape
    xf = x.float().view(m, k // 128, 128)
    s = (xf.abs().amax(dim=2) / formats.E4M3_MAX).clamp_min(1e-12)
    return (xf / s[:, :, None]).view(m, k).to(torch.float8_e4m3fn), s


def act_quant_rowwise(x: torch.Tensor):
    s = (x.float().abs().amax(dim=1, keepdim=True) / formats.E4M3_MAX).clamp_min(1e-12)
    return (x.float() / s).to(torch.float8_e4m3fn), s


@dataclass
class BlockwiseWeight:
    q: torch.Tensor  # e4m3 [N, K]
    s: torch.Tensor  # fp32 [N/128, K/128]
    sb: torch.Tensor | None = None  # the scale layout cuBLASLt accepts (GPU)

    def dequant(self) -> torch.Tensor:
        n, k = self.q.shape
        return (self.q.float().view(n // 128, 128, k // 128, 128) * self.s[:, None, :, None]).view(n, k)


def quant_weight_blockwise(w: torch.Tensor) -> BlockwiseWeight:
    n, k = w.shape
    wf = w.float().view(n // 128, 128, k // 128, 128)
    s = (wf.abs().amax(dim=(1, 3)) / formats.E4M3_MAX).clamp_min(1e-12)
    return BlockwiseWeight((wf / s[:, None, :, None]).view(n, k).to(torch.float8_e4m3fn), s)


@dataclass
class GroupedWeight:
    q: torch.Tensor  # e4m3 [E, N, K]
    s: torch.Tensor  # fp32 [E, N] (rowwise)


def quant_weight_grouped(w: torch.Tensor) -> GroupedWeight:
    s = (w.float().abs().amax(dim=2) / formats.E4M3_MAX).clamp_min(1e-12)
    return GroupedWeight((w.float() / s[:, :, None]).to(torch.float8_e4m3fn), s)


# ---- backends ------------------------------------------------------------------------------------------


class RefKernels:
    """Float reference kernels (any device): the structure's test in CI and the GPU stack's check."""

    name = "reference"

    def __init__(self, act_dtype: torch.dtype = torch.bfloat16):
        self._deq: dict[int, torch.Tensor] = {}  # dequantised weights, by id of the quantised tensor
        # activations between ops; float64 (the served model's reference) accumulates in float64 too, so
        # that a row's result does not depend on the other rows of its batch
        self.act_dtype = act_dtype
        self.acc_dtype = torch.float64 if act_dtype == torch.float64 else torch.float32

    def _dequant(self, q: torch.Tensor, make) -> torch.Tensor:
        if id(q) not in self._deq:
            self._deq[id(q)] = make()
        return self._deq[id(q)]

    def quant(self, x: torch.Tensor):
        """Activation quantisation for the FP8 blockwise GEMMs (its own op: shared by several GEMMs)."""
        return act_quant_blockwise(x)

    def gemm(self, xqs, w: BlockwiseWeight) -> torch.Tensor:
        xq, xs = xqs
        m, k = xq.shape
        xd = (xq.float().view(m, k // 128, 128) * xs[:, :, None]).view(m, k).to(self.acc_dtype)
        wd = self._dequant(w.q, lambda: w.dequant().to(self.acc_dtype))
        return (xd @ wd.t()).to(self.act_dtype)

    def linear(self, x: torch.Tensor, w: BlockwiseWeight) -> torch.Tensor:
        return self.gemm(self.quant(x), w)

    def wo_a_quant(self, o: torch.Tensor):
        """wo_a's input [m, groups, r] as the kernel takes it (the reference: as it is)."""
        return o

    def wo_a(self, o, w: torch.Tensor) -> torch.Tensor:
        """The grouped output projection: [m, groups, r] x [groups, r, d] -> [m, groups, d]."""
        return torch.bmm(o.transpose(0, 1), w).transpose(0, 1)

    def grouped_quant(self, x: torch.Tensor):
        """The routed experts' rowwise activation quantisation, an op of its own: a serving engine fuses it
        (per-token-group quantisation before dispatch, SiLU-and-quantise before the down projection), so the
        pass books it as glue (`act_quant`), not as expert GEMM time (docs/carry/moe_grouped)."""
        return act_quant_rowwise(x)

    def grouped(self, x: torch.Tensor, w: GroupedWeight, counts: torch.Tensor) -> torch.Tensor:
        return self.grouped_q(self.grouped_quant(x), w, counts)

    def grouped_q(self, xqs, w: GroupedWeight, counts: torch.Tensor) -> torch.Tensor:
        xq, xs = xqs
        xd = (xq.float() * xs).to(self.acc_dtype)
        out = torch.empty(xq.shape[0], w.q.shape[1], dtype=self.act_dtype, device=xq.device)
        start = 0
        wall = self._dequant(w.q, lambda: (w.q.float() * w.s[:, :, None]).to(self.acc_dtype))
        for e, c in enumerate(counts.tolist()):
            wd = wall[e]
            out[start : start + c] = (xd[start : start + c] @ wd.t()).to(self.act_dtype)
            start += c
        return out

    def make_mhc(self, T: int, H: int, p: mhc_tk.TkParams, device):
        def run(x, y, post, comb):
            xn, out, post_n, comb_n = mhc_tk.boundary_ref(x, y, post, comb, p, dtype=self.acc_dtype)
            cast = self.act_dtype  # the kernel's outputs are bf16; the float64 reference keeps the rounding
            return xn.to(cast), out.to(cast), post_n.to(self.acc_dtype), comb_n.to(self.acc_dtype)

        return run

    def kv_write(self, kv: torch.Tensor, rows: torch.Tensor) -> None:
        rows.copy_(formats.quant_rows("fp8_584", kv))

    def index_scores(self, q: torch.Tensor, w: torch.Tensor, keys: torch.Tensor, n: int, causal_base=None):
        qc, _, qd = indexer.quant_queries("fp8_132", q)
        kd = indexer.dequant_keys("fp8_132", keys)
        if causal_base is None:  # decode: one query per sequence, n keys each
            return indexer.indexer_logits_ref(qd, w, kd.view(q.shape[0], n, -1)).float()
        vis = (causal_base + torch.arange(q.shape[0], device=q.device) + 1) // RATIO["CSA"]
        return indexer.indexer_logits_ref(qd, w, kd[None], visible=vis).float()

    def attention_decode(self, att: DecodeAttention, q: torch.Tensor, idx_b) -> torch.Tensor:
        b = q.shape[0]
        parts = [att.rows_a[att.idx_a[:, 0].reshape(-1).long()]]
        if att.rows_b is not None:
            parts.append(att.rows_b[idx_b[:, 0].reshape(-1).long()])
        kv = torch.cat([formats.dequant_rows("fp8_584", r).view(b, -1, 512) for r in parts], dim=1)
        return sparse_mla_ref_qkv(q, kv, att.sink, 1 / math.sqrt(512), dtype=torch.float32).to(torch.bfloat16)

    def attention_prefill(self, att: PrefillAttention, q: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        valid = idx[:, 0] >= 0
        kv = att.kv[idx[:, 0].clamp_min(0).long(), 0].float() * valid[..., None]
        s = torch.einsum("thd,tnd->thn", q.float(), kv) / math.sqrt(512)
        s = s.masked_fill(~valid[:, None, :], float("-inf"))
        sk = att.sink[None, :, None].expand(s.shape[0], -1, 1)
        p = torch.softmax(torch.cat([s, sk], dim=-1), dim=-1)[..., :-1]
        return torch.einsum("thn,tnd->thd", p, kv).to(torch.bfloat16)

    def prep_attention_decode(self, att: DecodeAttention) -> None:
        return None


class GpuKernels(RefKernels):
    """The production kernels: FlashMLA, TileKernels mHC with DeepGEMM's pre-norm GEMM, DeepGEMM's FP8
    ``fp8_einsum`` for wo_a, cuBLASLt FP8 blockwise, torch FP8 grouped GEMMs, kernels_bench's Triton FP8
    indexer and quantise-on-write (no installable production kernel for those)."""

    name = "production"

    def __init__(self):
        super().__init__()
        import flash_mla

        from kernels_bench.production import require

        require("tile_kernels")
        self.deep_gemm = require("deep_gemm")
        self.flash_mla = flash_mla
        self._wo_a_w: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # FP8 wo_a by id of the bf16 one

    def wo_a_quant(self, o):
        from kernels_bench.production.deepgemm import _per_token_fp8

        return _per_token_fp8(o)  # 1x128 scales along r

    def wo_a(self, o, w):
        from kernels_bench.production.deepgemm import _per_block_fp8

        if id(w) not in self._wo_a_w:  # [groups, r, d] -> FP8 [groups, d, r], 128x128 scales (once)
            self._wo_a_w[id(w)] = _per_block_fp8(w.transpose(1, 2).contiguous())
        b = self._wo_a_w[id(w)]
        out = torch.empty(
            o[0].shape[0], o[0].shape[1], b[0].shape[1], dtype=torch.bfloat16, device=o[0].device
        )
        self.deep_gemm.fp8_einsum("bhr,hdr->bhd", o, b, out)
        return out

    def quant(self, x):
        xq, xs = act_quant_blockwise(x)
        return xq, xs.t().contiguous().t()  # outer-dim-major scales, as cuBLASLt reads them

    def gemm(self, xqs, w):
        from kernels_bench.families import _blockwise_scale_b

        xq, xs_t = xqs
        assert (xq.shape[1] // 128) % 4 == 0, "cuBLASLt blockwise FP8 is wrong unless K/128 % 4 == 0"
        if w.sb is None:
            w.sb = _blockwise_scale_b(xq, w.q, xs_t, w.s)
        return torch._scaled_mm(xq, w.q.t(), scale_a=xs_t, scale_b=w.sb, out_dtype=torch.bfloat16)

    def grouped_q(self, xqs, w, counts):
        xq, xs = xqs
        offs = torch.cumsum(counts, 0).to(torch.int32)
        return torch._scaled_grouped_mm(
            xq, w.q.transpose(1, 2), xs.view(-1), w.s, offs=offs, out_dtype=torch.bfloat16
        )

    def make_mhc(self, T, H, p, device):
        return mhc_tk.TkBoundary(T, H, p, device)

    def kv_write(self, kv, rows):
        from kernels_bench.kvquant_triton import quantize_on_write

        slots = torch.arange(kv.shape[0], device=kv.device)
        quantize_on_write("fp8_584", kv, slots, rows)

    def index_scores(self, q, w, keys, n, causal_base=None):
        from kernels_bench.indexer_triton import indexer_logits

        qc = q.float().clamp(-formats.E4M3_MAX, formats.E4M3_MAX).to(torch.float8_e4m3fn)
        qs = torch.ones(q.shape[0], q.shape[1], 4, device=q.device)
        if causal_base is None:
            return indexer_logits("fp8_132", qc, qs, w.contiguous(), keys, n, block_n=64, num_warps=4)[0]
        return indexer_logits(
            "fp8_132",
            qc,
            qs,
            w.contiguous(),
            keys,
            n,
            q_per_seq=q.shape[0],
            rows_per_seq=0,
            causal_base=causal_base,
            ratio=RATIO["CSA"],
            block_n=128,
            bq=4,
            num_warps=8,
        )[0]

    def prep_attention_decode(self, att):
        from kernels_bench.production.flashmla_layout import model1_paged

        att.cache_a = model1_paged(att.rows_a)
        att.cache_b = model1_paged(att.rows_b) if att.rows_b is not None else None
        att.meta = self.flash_mla.get_mla_metadata()[0]

    def attention_decode(self, att, q, idx_b):
        return self.flash_mla.flash_mla_with_kvcache(
            q[:, None],
            att.cache_a,
            None,
            None,
            512,
            att.meta,
            softmax_scale=1 / math.sqrt(512),
            is_fp8_kvcache=True,
            indices=att.idx_a,
            attn_sink=att.sink,
            extra_k_cache=att.cache_b,
            extra_indices_in_kvcache=idx_b,
            use_legacy=True,
            kv_format="V4",
        )[0][:, 0]

    def attention_prefill(self, att, q, idx):
        return self.flash_mla.flash_mla_sparse_fwd(
            q, att.kv, idx, 1 / math.sqrt(512), 512, attn_sink=att.sink, use_legacy=True
        )[0]


@dataclass
class LayerWeights:
    """One decoder layer's weights (random, the model's shapes): FP8 blockwise linears, wo_a (bf16, 8 groups),
    the indexer's head weights, the router, the routed experts (FP8 rowwise) and the q / kv norm weights."""

    w: dict[str, BlockwiseWeight]
    wo_a: torch.Tensor
    w_index_weights: torch.Tensor
    w_router: torch.Tensor
    gate_up: GroupedWeight
    down: GroupedWeight
    norm_w: dict[str, torch.Tensor]


def make_layer_weights(kind: str, d: Dims, g: torch.Generator, device) -> LayerWeights:
    """Draw a layer's weights from ``g`` (the forward-pass stack and the served model share them)."""
    H = d.hidden

    def lin(n_out, n_in):
        w = torch.randn(n_out, n_in, generator=g, device=device) / math.sqrt(n_in)
        return quant_weight_blockwise(w.to(torch.bfloat16))

    w = {
        "q_a": lin(d.q_lora, H),
        "q_b": lin(d.heads * d.head_dim, d.q_lora),
        "kv": lin(d.head_dim, H),
        "wo_b": lin(H, d.o_groups * d.o_lora),
        "shared_gate_up": lin(2 * d.shared_inter, H),
        "shared_down": lin(H, d.shared_inter),
    }
    if kind != "SWA":
        w["compressor"] = lin(d.compressor_out[kind], H)
    if kind == "CSA":
        w["index_q"] = lin(d.index_heads * d.index_dim, d.q_lora)
        w["index_compressor"] = lin(d.index_compressor_out, H)
    gi = d.o_groups
    wo_a = (
        torch.randn(gi, d.heads * d.head_dim // gi, d.o_lora, generator=g, device=device)
        / math.sqrt(d.heads * d.head_dim // gi)
    ).to(torch.bfloat16)
    w_index_weights = (torch.randn(H, d.index_heads, generator=g, device=device) / math.sqrt(H)).to(
        torch.bfloat16
    )
    w_router = (torch.randn(H, d.experts, generator=g, device=device) / math.sqrt(H)).to(torch.bfloat16)
    gate_up = quant_weight_grouped(
        torch.randn(d.experts, 2 * d.inter, H, generator=g, device=device) / math.sqrt(H)
    )
    down = quant_weight_grouped(
        torch.randn(d.experts, H, d.inter, generator=g, device=device) / math.sqrt(d.inter)
    )
    norm_w = {
        n: (1 + 0.1 * torch.randn(s, generator=g, device=device)).to(torch.bfloat16)
        for n, s in (("q", d.q_lora), ("kv", d.head_dim))
    }
    return LayerWeights(w, wo_a, w_index_weights, w_router, gate_up, down, norm_w)


def rope_(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rope_dim: int) -> None:
    """Rotate, in place, the last ``rope_dim`` dims of x [m, heads, d] (or [m, d]) by angles with cos / sin
    [m, rope_dim / 2] (rotate-half pairs)."""
    r = x[..., -rope_dim:]
    h = rope_dim // 2
    c = cos.view(x.shape[0], *([1] * (x.dim() - 2)), h).to(x.dtype)
    s = sin.view(x.shape[0], *([1] * (x.dim() - 2)), h).to(x.dtype)
    a, b = r[..., :h].clone(), r[..., h:].clone()
    r[..., :h] = a * c - b * s
    r[..., h:] = b * c + a * s


def route_tokens(x: torch.Tensor, w_router: torch.Tensor, experts: int, top_k: int):
    """Sigmoid router, top-k, dispatch sorted by expert: (token of each routed row, its normalised weight,
    rows per expert, the gathered rows)."""
    logits = (x @ w_router.to(x.dtype)).float() if x.dtype != torch.float64 else x @ w_router.double()
    w, ids = torch.sigmoid(logits).topk(top_k, dim=1)
    flat = ids.view(-1)
    order = torch.argsort(flat, stable=True)
    tok = order // top_k
    wsorted = (w / w.sum(dim=1, keepdim=True)).view(-1)[order]
    counts = torch.zeros(experts, dtype=torch.int64, device=flat.device).scatter_add_(
        0, flat, torch.ones_like(flat)
    )
    return tok, wsorted, counts, x[tok]


def swiglu_(gu: torch.Tensor, inter: int) -> torch.Tensor:
    """SwiGLU of [rows, 2·inter] gate|up (computed in float32, or float64 for the float64 reference)."""
    acc = torch.float64 if gu.dtype == torch.float64 else torch.float32
    return (torch.nn.functional.silu(gu[:, :inter].to(acc)) * gu[:, inter:].to(acc)).to(gu.dtype)


# ---- attention state -----------------------------------------------------------------------------------


@dataclass
class DecodeAttention:
    rows_a: torch.Tensor  # window rows (fp8_584), B·window
    idx_a: torch.Tensor  # [B, 1, window] int32
    rows_b: torch.Tensor | None  # compressed rows, B·n_c
    idx_b: torch.Tensor | None  # [B, 1, n] int32 (HCA: all; CSA: written by the top-k)
    sink: torch.Tensor
    cache_a: torch.Tensor | None = None
    cache_b: torch.Tensor | None = None
    meta: object = None


@dataclass
class PrefillAttention:
    kv: torch.Tensor  # bf16 [P, 1, 512]: raw tokens then compressed entries
    idx: torch.Tensor  # [T, 1, W + extra] int32 (-1 = none)
    comp_base: int  # first compressed entry in kv
    sink: torch.Tensor


def _tiled_rows(fmt: str, n: int, g, device) -> torch.Tensor:
    blk = formats.random_rows(fmt, min(n, 65536), generator=g, device=device)
    out = torch.empty(n, blk.shape[1], dtype=torch.uint8, device=device)
    for s in range(0, n, blk.shape[0]):
        m = min(blk.shape[0], n - s)
        out[s : s + m] = blk[:m]
    return out


# ---- the stack -------------------------------------------------------------------------------------------


Op = tuple[str, str, Callable[[], None]]  # (category, name, run)


class Layer:
    """One decoder layer's weights, caches and ops for a decode batch (B) or a prefill chunk (T)."""

    def __init__(
        self,
        kind: str,
        d: Dims,
        k: RefKernels,
        *,
        mode: str,
        batch: int,
        context: int,
        chunk: int,
        device,
        seed: int,
    ):
        g = torch.Generator(device=device)
        g.manual_seed(seed)
        self.kind, self.d, self.k, self.mode = kind, d, k, mode
        self.n = batch if mode == "decode" else chunk  # tokens this pass
        self.m = ceil_to(self.n, 16)  # GEMM rows (cuBLASLt FP8 wants M % 16 == 0)
        H = d.hidden

        lw = make_layer_weights(kind, d, g, device)
        self.w, self.wo_a, self.w_index_weights, self.w_router = (
            lw.w,
            lw.wo_a,
            lw.w_index_weights,
            lw.w_router,
        )
        self.gate_up, self.down, self.norm_w = lw.gate_up, lw.down, lw.norm_w
        bf = dict(device=device, dtype=torch.bfloat16)
        ang = torch.rand(self.m, d.rope_dim // 2, generator=g, device=device) * 6.283
        self.cos, self.sin = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)
        sink = torch.randn(d.heads, generator=g, device=device)
        # per-layer activations (static buffers, so that the whole stack is one CUDA graph)
        self.o = torch.zeros(self.m, d.heads, d.head_dim, **bf)
        self.kv_rows = torch.empty(self.n, formats.ROW_BYTES["fp8_584"], dtype=torch.uint8, device=device)
        self.y = torch.zeros(self.m, H, **bf)
        if mode == "decode":
            self._init_decode(g, batch, context, sink, device)
        else:
            self._init_prefill(g, chunk, context, sink, device)

    # -- caches --
    def _init_decode(self, g, B, L, sink, device):
        d, ratio = self.d, RATIO[self.kind]
        W = d.window
        rows_a = _tiled_rows("fp8_584", B * W, g, device)
        idx_a = (torch.arange(B, device=device)[:, None] * W + torch.arange(W, device=device)).int()[:, None]
        rows_b = idx_b = None
        self.n_c = L // ratio if ratio else 0
        if ratio:
            rows_b = _tiled_rows("fp8_584", B * self.n_c, g, device)
            nb = min(d.topk, self.n_c) if self.kind == "CSA" else self.n_c
            base = torch.arange(B, device=device)[:, None] * self.n_c
            idx_b = (base + torch.arange(nb, device=device)).int()[:, None].contiguous()
        if self.kind == "CSA":
            self.keys = _tiled_rows("fp8_132", B * self.n_c, g, device)
            self.key_base = torch.arange(B, device=device)[:, None] * self.n_c
        self.att = DecodeAttention(rows_a, idx_a.contiguous(), rows_b, idx_b, sink)
        self.k.prep_attention_decode(self.att)

    def _init_prefill(self, g, T, L, sink, device):
        d, ratio = self.d, RATIO[self.kind]
        W, total = d.window, L + T
        n_c = total // ratio if ratio else 0
        kv = torch.randn(total + n_c, 1, d.head_dim, generator=g, device=device).to(torch.bfloat16)
        pos = L + torch.arange(T, device=device)
        win = pos[:, None] - torch.arange(W - 1, -1, -1, device=device)[None]  # the 128 newest tokens
        extra = 0
        if self.kind == "CSA":
            extra = d.topk
        elif self.kind == "HCA":
            extra = ceil_to(n_c, 128)  # FlashMLA prefill: top-k a multiple of 128
        idx = torch.full((T, 1, W + extra), -1, dtype=torch.int32, device=device)
        idx[:, 0, :W] = win.int()
        if self.kind == "HCA":
            idx[:, 0, W : W + n_c] = (total + torch.arange(n_c, device=device)).int()
        if self.kind == "CSA":
            self.keys = _tiled_rows("fp8_132", n_c, g, device)
        self.n_c, self.context = n_c, L
        self.att = PrefillAttention(kv, idx, total, sink)

    # -- helpers --
    def _rope(self, x: torch.Tensor) -> None:
        rope_(x, self.cos, self.sin, self.d.rope_dim)

    # -- ops --
    def ops(self, st: dict) -> list[Op]:
        d, k, n, m = self.d, self.k, self.n, self.m
        L: dict = {}  # this layer's activations, rebound by the ops (kept as self.act for inspection)
        self.act = L
        out: list[Op] = []

        def add(cat, name, fn):
            out.append((cat, name, fn))

        def mhc_attn():
            st["X"], L["x"], st["post"], st["comb"] = st["mhc_attn"][id(self)](
                st["X"], st["y"], st["post"], st["comb"]
            )

        def quant(src: str) -> None:  # activation quantisation, once per tensor (shared by its GEMMs)
            add("act_quant", f"quant_{src}", lambda: L.__setitem__(src + "_q", k.quant(L[src])))

        def gemm(name: str, src: str, dst: str, shape=None) -> None:
            def run():
                y = k.gemm(L[src + "_q"], self.w[name])
                L[dst] = y if shape is None else y.view(*shape)

            add("dense_gemm", name, run)

        add("mhc", "mhc_attn", mhc_attn)
        quant("x")
        gemm("q_a", "x", "qa")
        add(
            "other",
            "q_norm",
            lambda: L.__setitem__(
                "qa", torch.nn.functional.rms_norm(L["qa"], (d.q_lora,), self.norm_w["q"], 1e-6)
            ),
        )
        quant("qa")
        gemm("q_b", "qa", "q", (m, d.heads, d.head_dim))
        add("other", "q_rope", lambda: self._rope(L["q"]))
        gemm("kv", "x", "kv")
        add(
            "other",
            "kv_norm_rope",
            lambda: (
                L.__setitem__(
                    "kv", torch.nn.functional.rms_norm(L["kv"], (d.head_dim,), self.norm_w["kv"], 1e-6)
                ),
                self._rope(L["kv"]),
            ),
        )
        add("other", "kv_write", lambda: k.kv_write(L["kv"][:n], self.kv_rows))
        if self.kind != "SWA":
            gemm("compressor", "x", "c")
        if self.kind == "CSA":
            gemm("index_compressor", "x", "ic")
            gemm("index_q", "qa", "iq", (m, d.index_heads, d.index_dim))
            scale = 1.0 / math.sqrt(d.index_heads * d.index_dim)
            add(
                "indexer",
                "index_weights",
                lambda: L.__setitem__("iw", (L["x"][:n] @ self.w_index_weights).float() * scale),
            )
            if self.mode == "decode":
                add(
                    "indexer",
                    "index_scores",
                    lambda: L.__setitem__("s", k.index_scores(L["iq"][:n], L["iw"], self.keys, self.n_c)),
                )
                add(
                    "indexer",
                    "topk",
                    lambda: self.att.idx_b.copy_(
                        (torch.topk(L["s"], d.topk, dim=1, sorted=False).indices + self.key_base).int()[
                            :, None
                        ]
                    ),
                )
            else:
                add(
                    "indexer",
                    "index_scores",
                    lambda: L.__setitem__(
                        "s",
                        k.index_scores(L["iq"][:n], L["iw"], self.keys, self.n_c, causal_base=self.context),
                    ),
                )
                add(
                    "indexer",
                    "topk",
                    lambda: self.att.idx[:, 0, d.window :].copy_(
                        (torch.topk(L["s"], d.topk, dim=1, sorted=False).indices + self.att.comp_base).int()
                    ),
                )
        if self.mode == "decode":
            add(
                "attention",
                "sparse_mla",
                lambda: self.o[:n].copy_(k.attention_decode(self.att, L["q"][:n], self.att.idx_b)),
            )
        else:
            add(
                "attention",
                "sparse_mla",
                lambda: self.o[:n].copy_(k.attention_prefill(self.att, L["q"][:n], self.att.idx)),
            )
        add("other", "o_rope", lambda: self._rope(self.o))
        g = d.o_groups
        add("act_quant", "wo_a_quant", lambda: L.__setitem__("o_q", k.wo_a_quant(self.o.view(m, g, -1))))
        add("dense_gemm", "wo_a", lambda: L.__setitem__("oa", k.wo_a(L["o_q"], self.wo_a).reshape(m, -1)))
        quant("oa")
        add("dense_gemm", "wo_b", lambda: st.__setitem__("y", k.gemm(L["oa_q"], self.w["wo_b"])))

        def mhc_ffn():
            st["X"], L["x"], st["post"], st["comb"] = st["mhc_ffn"][id(self)](
                st["X"], st["y"], st["post"], st["comb"]
            )

        add("mhc", "mhc_ffn", mhc_ffn)
        E, kx = d.experts, d.experts_per_token

        def route():
            L["tok"], L["wsorted"], L["counts"], L["xs"] = route_tokens(L["x"][:n], self.w_router, E, kx)

        add("routing", "route_dispatch", route)
        add("act_quant", "quant_xs", lambda: L.__setitem__("xs_q", k.grouped_quant(L["xs"])))
        add("moe", "gate_up", lambda: L.__setitem__("gu", k.grouped_q(L["xs_q"], self.gate_up, L["counts"])))

        def swiglu():
            L["a"] = swiglu_(L["gu"], d.inter)

        add("other", "swiglu", swiglu)
        add("act_quant", "quant_a", lambda: L.__setitem__("a_q", k.grouped_quant(L["a"])))
        add("moe", "down", lambda: L.__setitem__("dn", k.grouped_q(L["a_q"], self.down, L["counts"])))

        quant("x")  # the ffn boundary's output
        gemm("shared_gate_up", "x", "su")

        def shared_swiglu():
            L["sa"] = swiglu_(L["su"], d.shared_inter)

        add("other", "shared_swiglu", shared_swiglu)
        quant("sa")
        gemm("shared_down", "sa", "sh")

        def combine():
            y = L["sh"].float()
            y[:n].index_add_(0, L["tok"], L["dn"].float() * L["wsorted"][:, None])
            self.y.copy_(y)
            st["y"] = self.y

        add("routing", "combine", combine)
        return out


class Stack:
    """Layers of the given kinds, the mHC state they share, and the ops of one forward pass."""

    def __init__(
        self,
        kinds: list[str],
        d: Dims,
        k: RefKernels,
        *,
        mode: str,
        batch: int,
        context: int,
        chunk: int,
        device,
        seed: int = 0,
    ):
        self.kinds, self.d, self.k, self.mode = kinds, d, k, mode
        self.layers = [
            Layer(
                kind,
                d,
                k,
                mode=mode,
                batch=batch,
                context=context,
                chunk=chunk,
                device=device,
                seed=seed + 101 * i,
            )
            for i, kind in enumerate(kinds)
        ]
        m, H = self.layers[0].m, d.hidden
        g = torch.Generator(device=device)
        g.manual_seed(seed + 7)
        p = mhc_tk.make_params(H, device=device, generator=g)
        self.init = {
            "X": torch.randn(m, 4, H, generator=g, device=device).to(torch.bfloat16),
            "y": torch.randn(m, H, generator=g, device=device).to(torch.bfloat16),
            "post": 2 * torch.rand(m, 4, generator=g, device=device),
            "comb": torch.full((m, 4, 4), 0.25, device=device),
        }
        self.st = dict(self.init)
        self.st["mhc_attn"] = {id(la): k.make_mhc(m, H, p, device) for la in self.layers}
        self.st["mhc_ffn"] = {id(la): k.make_mhc(m, H, p, device) for la in self.layers}
        self.op_list: list[Op] = []
        for la in self.layers:
            self.op_list += la.ops(self.st)

    def reset(self) -> None:
        self.st.update(self.init)

    def run(self) -> torch.Tensor:
        """One forward pass from the initial state; returns the last layer's output y."""
        self.reset()
        for _, _, fn in self.op_list:
            fn()
        return self.st["y"]


COMPONENTS = {  # backend methods swapped together, per production component
    "gemm": ("quant", "gemm", "linear"),
    "grouped": ("grouped_quant", "grouped_q"),
    "wo_a": ("wo_a_quant", "wo_a"),
    "mhc": ("make_mhc",),
    "attention": ("prep_attention_decode", "attention_decode", "attention_prefill"),
    "indexer": ("index_scores",),
    "kv_write": ("kv_write",),
}


def component_errors(kinds, d: Dims, gpu: RefKernels, **kw) -> dict[str, float]:
    """Relative error of the stack's output when one component runs on ``gpu`` and the rest on the reference,
    and (key ``sensitivity``) the reference stack's own change when its input X moves by 0.1 %.

    The stack is not smooth: FP8 activation quantisation turns a per-mille difference into whole FP8 steps
    on the elements near a rounding boundary, so the output moves by several per cent for a 0.1 % input
    change (7 % measured at the test's shapes). A component agrees with the reference when its error is of
    that order; a wrong layout or scale gives O(1).
    """
    base = Stack(kinds, d, RefKernels(), **kw)
    ref = base.run().float().clone()
    g = torch.Generator(device=ref.device)
    g.manual_seed(1)
    x0 = base.init["X"]
    noise = torch.randn(x0.shape, generator=g, device=x0.device)
    base.init["X"] = (x0.float() * (1 + 1e-3 * noise)).to(torch.bfloat16)
    out = {"sensitivity": ((base.run().float() - ref).norm() / ref.norm()).item()}
    for comp, methods in COMPONENTS.items():
        hyb = RefKernels()
        for meth in methods:
            setattr(hyb, meth, getattr(gpu, meth))
        y = Stack(kinds, d, hyb, **kw).run().float()
        out[comp] = ((y - ref).norm() / ref.norm()).item()
    return out


def layer_kinds_label(kinds: list[str]) -> str:
    return ";".join(KIND_LABEL[k] for k in kinds)


# ---- measurement (GPU) -------------------------------------------------------------------------------------


def eager_host_us(stack: Stack, passes: int) -> float:
    """Median host time (us) to issue one whole eager pass (no synchronisation inside the timed call)."""
    out = []
    for _ in range(passes):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t = time.perf_counter()
        stack.run()
        out.append((time.perf_counter() - t) * 1e6)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return statistics.median(out)


def measure(stack: Stack) -> dict:
    """Whole pass as one CUDA graph; the same pass eagerly (its GPU span, launch gaps included, and the host's
    time to issue it); then each op alone (over all layers) in its own graph."""
    from kernels_bench.timing import time_calls

    eager = stack.run().clone()
    torch.cuda.synchronize()
    full = time_calls([stack.run], samples=15, max_seconds=2.0)
    graphed = stack.st["y"].float()
    finite = bool(torch.isfinite(graphed[: stack.layers[0].n]).all())
    rel = ((graphed - eager.float()).norm() / eager.float().norm().clamp_min(1e-30)).item()
    names: dict[str, list] = {}
    for cat, name, fn in stack.op_list:
        names.setdefault((cat, name), []).append(fn)
    eager_t = time_calls([stack.run], samples=10, max_seconds=2.0, use_graph=False)
    cats = dict.fromkeys(CATEGORIES, 0.0)
    ops_us = {}
    for (cat, name), fns in names.items():
        t = time_calls([lambda fns=fns: [f() for f in fns]], samples=10, max_seconds=0.5)
        cats[cat] += t.median_us
        ops_us[name] = t.median_us
    return {
        "measured_us_p50": full.median_us,
        "measured_us_p10": full.p10_us,
        "measured_us_p90": full.p90_us,
        "kernel_sum_us": sum(cats.values()),
        **{f"{c}_us": v for c, v in cats.items()},
        "ops_per_pass": len(stack.op_list),
        "output_finite": finite,
        "graph_vs_eager_rel": rel,
        "timing_method": full.method,
        "eager_us_p50": eager_t.median_us,
        "eager_host_us_p50": eager_host_us(stack, passes=7),
        "ops_us": ops_us,  # each op alone, summed over the stack's layers (JSON only)
    }


# Both stacks use deepseek-v4-flash's shapes (sim/model/specs/deepseek-v4-flash.yaml). With 32 resident
# experts and B tokens each picking 6 of them, the MoE sees what one GPU of a DP8 / EP8 node sees (6·B
# routed rows over 32 experts), without the all-to-all.
SPEC = "deepseek-v4-flash"
STACKS = {
    "layer": ["CSA"],  # one full decoder layer: CSA (compressor, indexer, top-512) with its MoE
    "reduced": ["SWA", "CSA", "HCA", "CSA", "HCA"],  # reduced depth, the real layer kinds
}
DECODE_BATCHES = (1, 8, 64, 256)
DECODE_CONTEXTS = (8 * 1024, 128 * 1024)
PREFILL_CHUNKS = (512, 4096)
PREFILL_CONTEXT = 8 * 1024  # tokens already in the sequence before the chunk


def points(preset: str) -> list[tuple[str, str, int, int, int]]:
    """(stack, mode, batch, context, chunk) in the order they run."""
    if preset == "smoke":
        return [("layer", "decode", 8, 8192, 0), ("reduced", "prefill", 1, 8192, 512)]
    out = []
    for spec in STACKS:
        out += [(spec, "decode", b, L, 0) for L in DECODE_CONTEXTS for b in DECODE_BATCHES]
        out += [(spec, "prefill", 1, PREFILL_CONTEXT, t) for t in PREFILL_CHUNKS]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="kernels_bench.production.forward", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--points", default="full", choices=["full", "smoke"])
    ap.add_argument("--commit", default=None)
    ap.add_argument("--budget-s", type=float, default=300.0)
    ap.add_argument("--experts", type=int, default=Dims.experts)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: CUDA is not available (the forward-pass check runs on the GPU)", file=sys.stderr)
        return 2
    from kernels_bench import report
    from kernels_bench.production.run import production_provenance

    t0 = time.monotonic()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    prov = production_provenance(args.commit)
    d = Dims(experts=args.experts)
    kern = GpuKernels()
    rows = []
    log = (out / "forward_log.txt").open("w")
    for spec, mode, b, L, T in points(args.points):
        if time.monotonic() - t0 > args.budget_s:
            print(f"budget exhausted before {spec} {mode} B={b} L={L} T={T}", file=log, flush=True)
            break
        kinds = STACKS[spec]
        row = columns.row(
            FORWARD_COLUMNS,
            model="deepseek-v4-flash",
            mode=mode,
            spec=SPEC,
            n_layers=len(kinds),
            layer_kinds=layer_kinds_label(kinds),
            n_routed_experts=d.experts,
            experts_per_token=d.experts_per_token,
            batch=b,
            context_tokens=L,
            chunk_tokens=T,
        )
        try:
            stack = Stack(kinds, d, kern, mode=mode, batch=b, context=L, chunk=T, device="cuda")
            row.update(measure(stack))
            del stack
        except Exception as e:  # noqa: BLE001 - a point that fails is reported, never silent
            row["note"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            import traceback

            traceback.print_exc(file=log)
        torch.cuda.empty_cache()
        rows.append(row)
        msg = " ".join(
            f"{k}={row.get(k, '')}" for k in ("spec", "mode", "batch", "context_tokens", "chunk_tokens")
        )
        line = (
            f"[{time.monotonic() - t0:6.1f}s] {msg} measured={row.get('measured_us_p50', '-')} "
            f"sum={row.get('kernel_sum_us', '-')} {row.get('note', '')}"
        )
        print(line, flush=True)
        print(line, file=log, flush=True)
        write_forward_csv(out / "forward_pass_results.csv", rows, prov)
    prov["elapsed_s"] = round(time.monotonic() - t0, 1)
    write_forward_csv(out / "forward_pass_results.csv", rows, prov)
    report.atomic_write(
        out / "forward_pass_results.json",
        json.dumps({"provenance": prov, "rows": rows}, indent=1, default=str) + "\n",
    )
    return 0


def write_forward_csv(path: Path, rows: list[dict], prov: dict) -> None:
    from kernels_bench import report

    report.write_csv(path, rows, prov, columns=FWD_COLUMNS)


if __name__ == "__main__":
    raise SystemExit(main())
