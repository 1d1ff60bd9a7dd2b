"""Manifold-constrained hyper-connection (mHC) residual mixing at one sublayer boundary: PyTorch reference.

n = 4 residual streams X [T, 4, H], 20 Sinkhorn iterations (kernels.md §2, §5). At a boundary the previous
sublayer's output y [T, H] is mixed back with the carried gates (``post`` [T, 4], ``comb`` [T, 4, 4]):

    X'_i = post_i · y + Σ_j comb[j, i] · X_j                      (post)
    m    = (flatten(X') @ fnᵀ) · rsqrt(mean(X'²) + eps)            (24 mixes: 4 pre, 4 post, 16 comb)
    pre' = σ(a_pre·m[0:4] + b), post' = 2σ(a_post·m[4:8] + b), comb' = Sinkhorn(a_comb·m[8:24] + b)
    x    = RMSNorm(Σ_i pre_i · X'_i) · γ                          (collapse: the next sublayer's input)

``shifted=False`` is the classic order (the collapse uses the fresh ``pre'``), i.e. the unfused
post → GEMM → epilogue → RMSNorm sequence. ``shifted=True`` is V4.1's single pass ("Mega-mHC"): the collapse
uses the ``pre`` carried from the previous boundary, so post, GEMM, gates, Sinkhorn, collapse and RMSNorm
can run in one kernel that reads X and y once and writes X' and x once (kernels.md §2, §5.1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

STREAMS = 4  # kernels.md §2: hc_mult 4
SINKHORN_ITERS = 20  # kernels.md §2
NORM_EPS = 1e-6


@dataclass
class MhcParams:
    fn: torch.Tensor  # [24, 4H] fp32 mixing weights (rows: 4 pre, 4 post, 16 comb as [j, i])
    bias: torch.Tensor  # [24] fp32
    alpha: tuple[float, float, float]  # scales for pre, post, comb logits
    gamma: torch.Tensor  # [H] RMSNorm weight


def make_params(hidden: int, device="cpu", generator: torch.Generator | None = None) -> MhcParams:
    g = generator
    fn = torch.randn(24, STREAMS * hidden, generator=g, device=device) / (STREAMS * hidden) ** 0.5
    bias = torch.randn(24, generator=g, device=device) * 0.5
    gamma = 1.0 + 0.1 * torch.randn(hidden, generator=g, device=device)
    return MhcParams(fn=fn, bias=bias, alpha=(1.0, 1.0, 1.0), gamma=gamma)


def make_state(tokens: int, hidden: int, device="cpu", generator: torch.Generator | None = None):
    """Random streams X, sublayer output y and carried gates (pre, post, comb) of a boundary."""
    g = generator
    x = torch.randn(tokens, STREAMS, hidden, generator=g, device=device).to(torch.bfloat16)
    y = torch.randn(tokens, hidden, generator=g, device=device).to(torch.bfloat16)
    pre = torch.rand(tokens, STREAMS, generator=g, device=device)
    post = 2 * torch.rand(tokens, STREAMS, generator=g, device=device)
    comb = sinkhorn(torch.randn(tokens, STREAMS, STREAMS, generator=g, device=device))
    return x, y, pre, post, comb


def sinkhorn(logits: torch.Tensor, iters: int = SINKHORN_ITERS) -> torch.Tensor:
    """exp, then alternate row and column normalisation of [..., 4, 4] (doubly stochastic in the limit)."""
    m = torch.exp(logits - logits.amax(dim=(-2, -1), keepdim=True))
    for _ in range(iters):
        m = m / m.sum(dim=-1, keepdim=True)
        m = m / m.sum(dim=-2, keepdim=True)
    return m


def gates_from_mixes(mixes: torch.Tensor, params: MhcParams):
    """[T, 24] normalised mixes -> pre [T, 4], post [T, 4], comb [T, 4, 4]."""
    b = params.bias.to(mixes.dtype)
    a_pre, a_post, a_comb = params.alpha
    pre = torch.sigmoid(a_pre * mixes[:, 0:4] + b[0:4])
    post = 2.0 * torch.sigmoid(a_post * mixes[:, 4:8] + b[4:8])
    comb = sinkhorn((a_comb * mixes[:, 8:24] + b[8:24]).reshape(-1, STREAMS, STREAMS))
    return pre, post, comb


def mhc_boundary_ref(x, y, pre, post, comb, params: MhcParams, shifted: bool, dtype=torch.float64):
    """Reference of one boundary. Returns (X' bf16, layer input bf16, pre', post', comb') in ``dtype``.

    X' is rounded to bf16 before the GEMM and the collapse, as the kernels store and reuse it.
    """
    t, n, h = x.shape
    xd, yd = x.to(dtype), y.to(dtype)
    xn = post.to(dtype)[:, :, None] * yd[:, None, :] + torch.einsum("tji,tjh->tih", comb.to(dtype), xd)
    xn_b = xn.to(torch.bfloat16)
    xf = xn_b.to(dtype).reshape(t, n * h)
    rs = torch.rsqrt(xf.pow(2).mean(dim=1, keepdim=True) + NORM_EPS)
    mixes = (xf @ params.fn.to(dtype).T) * rs
    pre_n, post_n, comb_n = gates_from_mixes(mixes, params)
    use_pre = pre.to(dtype) if shifted else pre_n
    hsum = (use_pre[:, :, None] * xf.reshape(t, n, h)).sum(dim=1)
    out = hsum * torch.rsqrt(hsum.pow(2).mean(dim=1, keepdim=True) + NORM_EPS) * params.gamma.to(dtype)
    return xn_b, out.to(torch.bfloat16), pre_n, post_n, comb_n
