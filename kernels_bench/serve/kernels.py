"""The served model's kernel backends: the float64 reference (CPU, CI) and the production kernels (H200).

Both extend the forward-pass backends of ``kernels_bench.production.forward`` (FP8 blockwise GEMMs, FP8
grouped expert GEMMs, mHC boundaries) with what serving adds: quantise-on-write of rows, the lightning
indexer over a *paged* key cache, and attention over the paged MODEL1 pools with per-row index lists
(-1 = no entry), one query per row: a decode's token or a prefill chunk's token alike.

Attention index convention (both backends): row ``i`` attends to window rows ``win[i]`` of the raw pool and
to entries ``ext[i]`` of the compressed pool, absolute pool rows, -1 where nothing.
"""

from __future__ import annotations

import math

import torch

from kernels_bench import formats
from kernels_bench.production import forward as fw

SM_SCALE = 1.0 / math.sqrt(formats.LATENT_DIM)  # FlashMLA's default for d_qk = 512


def _quant_index_q(q: torch.Tensor) -> torch.Tensor:
    """Indexer queries as the FP8 kernel reads them (e4m3 codes, unit scales; forward.GpuKernels)."""
    return q.float().clamp(-formats.E4M3_MAX, formats.E4M3_MAX).to(torch.float8_e4m3fn)


class ServeRef(fw.RefKernels):
    """Float64 reference: every op on dequantised bytes, no row depends on another row of its batch."""

    pad_rows = 1  # GEMM rows need no padding
    ext_align = 1  # HCA entries per row: no padding

    def __init__(self):
        super().__init__(act_dtype=torch.float64)

    def quant_rows(self, fmt: str, x: torch.Tensor) -> torch.Tensor:
        return formats.quant_rows(fmt, x.float())

    def index_logits(self, q, w, keys: torch.Tensor, key_rows: torch.Tensor, visible: torch.Tensor):
        """q [n, h, 128], w [n, h], keys pool [R, 132], key_rows [n, N] absolute rows (clamped), visible [n]
        -> [n, N] float64 scores, -inf for keys j >= visible."""
        qd = _quant_index_q(q).double()
        kd = formats.dequant_rows("fp8_132", keys[key_rows.reshape(-1)]).view(*key_rows.shape, -1)
        s = torch.einsum("nhd,nkd->nhk", qd, kd.double())
        out = (torch.relu(s) * w.double()[:, :, None]).sum(dim=1)
        j = torch.arange(out.shape[1], device=out.device)
        return out.masked_fill(j[None, :] >= visible[:, None], float("-inf"))

    def attend(self, q, raw_pool, win, comp_pool, ext, sink) -> torch.Tensor:
        """q [n, h, 512] -> [n, h, 512]: softmax over the window rows and compressed entries, with sink."""
        parts, masks = [], []
        for pool, idx in ((raw_pool, win), (comp_pool, ext)):
            if idx is None or idx.shape[1] == 0:
                continue
            rows = pool.gather(idx.clamp_min(0).reshape(-1))
            parts.append(formats.dequant_rows("fp8_584", rows).double().view(*idx.shape, -1))
            masks.append(idx >= 0)
        kv, valid = torch.cat(parts, dim=1), torch.cat(masks, dim=1)
        s = torch.einsum("nhd,nkd->nhk", q.double(), kv) * SM_SCALE
        s = s.masked_fill(~valid[:, None, :], float("-inf"))
        sk = sink.double()[None, :, None].expand(s.shape[0], -1, 1)
        p = torch.softmax(torch.cat([s, sk], dim=-1), dim=-1)[..., :-1]
        return torch.einsum("nhk,nkd->nhd", p, kv).to(self.act_dtype)


class ServeGpu(fw.GpuKernels):
    """Production kernels: FlashMLA sparse decode on the MODEL1 pools (every row, prefill rows too: one
    query per row, static shapes for CUDA graphs), the Triton FP8 indexer through block tables (its Reindex
    mode), Triton quantise-on-write, plus forward.GpuKernels' GEMMs and TileKernels mHC."""

    pad_rows = 16  # cuBLASLt blockwise FP8 wants M % 16 == 0
    ext_align = 64  # FlashMLA decode: extra top-k a multiple of 64

    def __init__(self):
        super().__init__()
        self._meta: dict[tuple, object] = {}
        self._padded: dict[int, tuple] = {}  # id(weight) -> (weight, its K-padded copy)

    def quant_rows(self, fmt: str, x: torch.Tensor) -> torch.Tensor:
        from kernels_bench.kvquant_triton import quantize_on_write

        out = torch.empty(x.shape[0], formats.ROW_BYTES[fmt], dtype=torch.uint8, device=x.device)
        slots = torch.arange(x.shape[0], device=x.device)
        return quantize_on_write(fmt, x.to(torch.bfloat16).contiguous(), slots, out)

    def gemm(self, xqs, w):
        """forward.GpuKernels' cuBLASLt blockwise FP8 GEMM, which is wrong unless K/128 % 4 == 0: V4.1's K =
        1280 (q_lora: wq_b, indexer wq_b) and 2304 (shared expert down) run zero-padded to a multiple of 512
        (+20 % / +11 % of those GEMMs' work; DeepGEMM, the production kernel, takes them unpadded) [D]."""
        k = xqs[0].shape[1]
        if (k // 128) % 4 == 0:
            return super().gemm(xqs, w)
        kp = -(-k // 512) * 512
        if id(w) not in self._padded:  # the weight padded once (the model keeps its weights alive)
            self._padded[id(w)] = (w, pad_weight_k(w, kp))
        return super().gemm(pad_act_k(xqs, kp), self._padded[id(w)][1])

    def index_logits_paged(self, q, w, keys, pages, n_keys: int):
        """FP8 indexer scores of ``n_keys`` keys per row through a block table of 8-key pages (``pages``
        [n, P], one row per query; the kernel's Reindex mode). The kernel scores a multiple of its
        ``block_n`` keys (the extra columns are cut off): with 650 keys (an eager step's exact count) it
        faulted with a misaligned address on the H200, with multiples of 64 never (``eager_probe``, engine14
        call 5). ``pages`` covers whole engine blocks (64 keys each), so the rounded count stays inside it."""
        from kernels_bench.indexer_triton import indexer_logits

        block_n = 64
        n_run = -(-n_keys // block_n) * block_n
        if n_run > pages.shape[1] * 8:
            raise ValueError(f"{n_keys} keys need {n_run // 8} pages, the table has {pages.shape[1]}")
        qc = _quant_index_q(q)
        qs = torch.ones(q.shape[0], q.shape[1], 4, device=q.device)
        out = indexer_logits(
            "fp8_132",
            qc,
            qs,
            w.float().contiguous(),
            keys,
            n_run,
            q_per_seq=1,
            rows_per_seq=0,
            block_table=pages,
            block_n=block_n,
            num_warps=4,
        )[0]
        return out if n_run == n_keys else out[:, :n_keys]

    def attend_decode(self, q, raw_pool, win, comp_pool, ext, sink) -> torch.Tensor:
        """FlashMLA sparse decode, one query per row, straight from the MODEL1 pools."""
        if q.shape[0] == 0:
            return q
        key = (q.shape[0], win.shape[1], None if ext is None else ext.shape[1], id(raw_pool), id(comp_pool))
        if key not in self._meta:
            self._meta[key] = self.flash_mla.get_mla_metadata()[0]
        return self.flash_mla.flash_mla_with_kvcache(
            q[:, None],
            raw_pool.view,
            None,
            None,
            formats.LATENT_DIM,
            self._meta[key],
            softmax_scale=SM_SCALE,
            is_fp8_kvcache=True,
            indices=win[:, None].int(),
            attn_sink=sink,
            extra_k_cache=None if ext is None else comp_pool.view,
            extra_indices_in_kvcache=None if ext is None else ext[:, None].int(),
            use_legacy=True,
            kv_format="V4",
        )[0][:, 0]


def pad_act_k(xqs, kp: int):
    """Blockwise FP8 activations (codes [m, K], outer-dim-major scales [m, K/128]) zero-padded to ``kp``
    columns (codes 0, scales 1): a GEMM with a weight padded alike (``pad_weight_k``) is unchanged."""
    xq, xs_t = xqs
    m, k = xq.shape
    xp = torch.zeros(m, kp, dtype=xq.dtype, device=xq.device)
    xp[:, :k] = xq
    sp = torch.ones(kp // 128, m, dtype=xs_t.dtype, device=xs_t.device).t()
    sp[:, : k // 128] = xs_t
    return xp, sp


def pad_weight_k(w: fw.BlockwiseWeight, kp: int) -> fw.BlockwiseWeight:
    n, k = w.q.shape
    wq = torch.zeros(n, kp, dtype=w.q.dtype, device=w.q.device)
    wq[:, :k] = w.q
    ws = torch.ones(w.s.shape[0], kp // 128, dtype=w.s.dtype, device=w.s.device)
    ws[:, : k // 128] = w.s
    return fw.BlockwiseWeight(wq, ws)


def masked_topk(scores: torch.Tensor, k: int) -> torch.Tensor:
    """[n, N] scores (-inf = not visible) -> [n, k] selected key numbers, -1 where fewer than k are visible."""
    kk = min(k, scores.shape[1])
    v, i = torch.topk(scores, kk, dim=1, sorted=False)
    i = torch.where(torch.isinf(v) & (v < 0), torch.full_like(i, -1), i)
    if kk < k:
        i = torch.cat([i, torch.full((i.shape[0], k - kk), -1, dtype=i.dtype, device=i.device)], dim=1)
    return i
