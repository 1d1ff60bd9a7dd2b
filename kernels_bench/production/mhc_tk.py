"""mHC boundary with DeepSeek's TileKernels (tile_kernels.mhc) and its float64 reference.

One boundary as TileKernels composes it at inference (kernels.md §5): ``mhc_post_fwd`` (X' = post·y +
combᵀX), the pre-norm GEMM (X'·fnᵀ and Σ X'² in one pass: DeepGEMM's ``tf32_hc_prenorm_gemm``, built from
source since the prebuilt wheel does not load on torch 2.11, kernels.md §9a; its split-K partials go to
``mhc_pre_big_fuse_fwd`` unsummed, which adds them as TileKernels' own pairing does), ``mhc_pre_big_fuse_fwd``
(RMS scale, gates, Sinkhorn, pre-mix collapse) and the sublayer's RMSNorm (torch), so that the row does the
same work as kernels_bench's ``mhc_fused`` row (which ends with the RMSNorm). ``prenorm="torch"`` keeps the
earlier stand-in (bf16 GEMM + Σx² through torch) for the step-by-step timing.

TileKernels' conventions differ from ``kernels_bench.mhc`` in the gate details (pre = σ(·)+eps, Sinkhorn
starts with a row softmax and adds eps, one scale per gate group), so the reference below follows
TileKernels' own ``tile_kernels/torch/mhc.py`` in float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

STREAMS = 4
RMS_EPS = 1e-6
PRE_EPS = 1e-6
SINKHORN_EPS = 1e-6
POST_MULT = 2.0  # V4: post gate = 2σ(·) (kernels_bench.mhc)
SINKHORN_REPEAT = 20  # kernels.md §2


@dataclass
class TkParams:
    fn: torch.Tensor  # [24, 4H] fp32
    scale: torch.Tensor  # [3] fp32 (pre, post, comb)
    base: torch.Tensor  # [24] fp32
    gamma: torch.Tensor  # [H] RMSNorm weight


def make_params(hidden: int, device="cpu", generator=None) -> TkParams:
    g = generator
    fn = torch.randn(24, STREAMS * hidden, generator=g, device=device) / (STREAMS * hidden) ** 0.5
    scale = 1.0 + 0.1 * torch.randn(3, generator=g, device=device)
    base = 0.5 * torch.randn(24, generator=g, device=device)
    gamma = 1.0 + 0.1 * torch.randn(hidden, generator=g, device=device)
    return TkParams(fn=fn, scale=scale, base=base, gamma=gamma)


def sinkhorn_tk(x: torch.Tensor, repeat: int = SINKHORN_REPEAT, eps: float = SINKHORN_EPS) -> torch.Tensor:
    """TileKernels' Sinkhorn: row softmax + eps, column normalise, then (repeat − 1) row/column rounds."""
    x = x.softmax(-1) + eps
    x = x / (x.sum(-2, keepdim=True) + eps)
    for _ in range(repeat - 1):
        x = x / (x.sum(-1, keepdim=True) + eps)
        x = x / (x.sum(-2, keepdim=True) + eps)
    return x


def boundary_ref(x, y, post, comb, p: TkParams, dtype=torch.float64):
    """x [T,4,H] bf16, y [T,H] bf16, post [T,4], comb [T,4,4] -> (X' bf16, out bf16, post', comb' [T,4,4])."""
    t, n, h = x.shape
    xn = post.to(dtype)[:, :, None] * y.to(dtype)[:, None, :] + torch.einsum(
        "tmn,tmh->tnh", comb.to(dtype), x.to(dtype)
    )
    xn_b = xn.to(torch.bfloat16)
    xf = xn_b.to(dtype).reshape(t, n * h)
    mixes = (xf @ p.fn.to(dtype).T) * torch.rsqrt(xf.pow(2).mean(dim=1, keepdim=True) + RMS_EPS)
    sc, base = p.scale.to(dtype), p.base.to(dtype)
    pre = torch.sigmoid(mixes[:, :4] * sc[0] + base[:4]) + PRE_EPS
    post_n = torch.sigmoid(mixes[:, 4:8] * sc[1] + base[4:8]) * POST_MULT
    comb_n = sinkhorn_tk((mixes[:, 8:] * sc[2] + base[8:]).reshape(t, 4, 4))
    li = (pre[:, :, None] * xf.reshape(t, n, h)).sum(dim=1).to(torch.bfloat16).to(dtype)
    out = li * torch.rsqrt(li.pow(2).mean(dim=1, keepdim=True) + RMS_EPS) * p.gamma.to(dtype)
    return xn_b, out.to(torch.bfloat16), post_n, comb_n


PRENORM_SPLITS = (
    16  # DeepGEMM's split-K for the pre-norm GEMM at up to PRENORM_SPLIT_MAX_T tokens (its test case)
)
PRENORM_SPLIT_MAX_T = 4096


def prenorm_splits(T: int) -> int:
    """K-splits of the pre-norm GEMM for T tokens: one CTA per 64 rows leaves the GPU idle at small T."""
    return PRENORM_SPLITS if T <= PRENORM_SPLIT_MAX_T else 1


class DgPrenorm:
    """DeepGEMM's ``tf32_hc_prenorm_gemm`` into preallocated split partials: mul [s, T, 24], sq [s, T] fp32,
    which ``mhc_pre_big_fuse_fwd(n_splits=s)`` sums (no separate reduction)."""

    def __init__(self, T: int, fn: torch.Tensor, device):
        from kernels_bench.production import require

        self._gemm = require("deep_gemm").tf32_hc_prenorm_gemm
        self.splits = prenorm_splits(T)
        self.fn = fn.float().contiguous()  # [24, 4H]
        self.mul = torch.empty(self.splits, T, fn.shape[0], dtype=torch.float32, device=device)
        self.sq = torch.empty(self.splits, T, dtype=torch.float32, device=device)

    def __call__(self, xf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """xf [T, 4H] bf16 -> the split partials of (xf·fnᵀ, Σ xf²)."""
        T = xf.shape[0]
        if self.splits > 1:
            self._gemm(xf, self.fn, self.mul, self.sq, num_splits=self.splits)
        else:
            self._gemm(xf, self.fn, self.mul.view(T, -1), self.sq.view(T))
        return self.mul, self.sq


class TorchPrenorm:
    """The earlier stand-in: a bf16 GEMM against fnᵀ and Σx² through torch (one partial)."""

    splits = 1

    def __init__(self, T: int, fn: torch.Tensor, device):
        self.fn_t = fn.to(torch.bfloat16).t().contiguous()  # [4H, 24]

    def __call__(self, xf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        T = xf.shape[0]
        mul = torch.mm(xf, self.fn_t).float().view(1, T, -1)
        return mul, torch.linalg.vector_norm(xf, dim=1, dtype=torch.float32).square().view(1, T)


PRENORMS = {"deepgemm": DgPrenorm, "torch": TorchPrenorm}


class TkBoundary:
    """Preallocated TileKernels boundary for T tokens of hidden size H (graph-capturable); the pre-norm GEMM
    is DeepGEMM's (``prenorm="deepgemm"``, production) or the torch stand-in."""

    def __init__(self, T: int, H: int, p: TkParams, device, prenorm: str = "deepgemm"):
        from kernels_bench.production import require

        require("tile_kernels")
        from tile_kernels.mhc import mhc_post_fwd, mhc_pre_big_fuse_fwd

        self._post, self._fuse = mhc_post_fwd, mhc_pre_big_fuse_fwd
        self.T, self.H, self.p = T, H, p
        self.prenorm = PRENORMS[prenorm](T, p.fn, device)
        self.xn = torch.empty(1, T, STREAMS, H, dtype=torch.bfloat16, device=device)
        self.post_o = torch.empty(T, STREAMS, dtype=torch.float32, device=device)
        self.comb_o = torch.empty(T, STREAMS * STREAMS, dtype=torch.float32, device=device)
        self.li = torch.empty(T, H, dtype=torch.bfloat16, device=device)

    def parts(self, x, y, post, comb) -> list[tuple[str, object]]:
        """The boundary's steps as separate callables (for timing each alone; __call__ runs them all)."""
        T, H = self.T, self.H
        xf = self.xn.view(T, STREAMS * H)
        st: dict = {}

        def post_step():
            self._post(
                y.view(1, T, H),
                x.view(1, T, STREAMS, H),
                post.view(1, T, STREAMS, 1),
                comb.view(1, T, STREAMS, STREAMS),
                out=self.xn,
            )

        def gemm_step():
            st["mul"], st["sq"] = self.prenorm(xf)

        def fuse_step():
            self._fuse(
                st["mul"],
                st["sq"],
                self.p.scale,
                self.p.base,
                self.xn.view(T, STREAMS, H),
                self.post_o,
                self.comb_o,
                self.li,
                RMS_EPS,
                PRE_EPS,
                SINKHORN_EPS,
                POST_MULT,
                SINKHORN_REPEAT,
                n_splits=self.prenorm.splits,
            )

        def norm_step():
            st["out"] = torch.nn.functional.rms_norm(self.li, (H,), self.p.gamma.to(torch.bfloat16), RMS_EPS)

        return [
            ("mhc_post", post_step),
            ("mhc_prenorm_gemm", gemm_step),
            ("mhc_pre_big_fuse", fuse_step),
            ("rmsnorm", norm_step),
        ]

    def __call__(self, x, y, post, comb):
        T, H = self.T, self.H
        self._post(
            y.view(1, T, H),
            x.view(1, T, STREAMS, H),
            post.view(1, T, STREAMS, 1),
            comb.view(1, T, STREAMS, STREAMS),
            out=self.xn,
        )
        mul, sq = self.prenorm(self.xn.view(T, STREAMS * H))
        self._fuse(
            mul,
            sq,
            self.p.scale,
            self.p.base,
            self.xn.view(T, STREAMS, H),
            self.post_o,
            self.comb_o,
            self.li,
            RMS_EPS,
            PRE_EPS,
            SINKHORN_EPS,
            POST_MULT,
            SINKHORN_REPEAT,
            n_splits=self.prenorm.splits,
        )
        out = torch.nn.functional.rms_norm(self.li, (H,), self.p.gamma.to(torch.bfloat16), RMS_EPS)
        return self.xn.view(T, STREAMS, H), out, self.post_o, self.comb_o.view(T, STREAMS, STREAMS)
