"""Production-stack benchmark families: same row identity as kernels_bench (family / kernel / shape
semantics), ``impl`` naming the production library, every row checked before it is timed.

* attention: FlashMLA SM90 sparse decode (V4 MODEL1 584 B, V3.2 656 B) and sparse prefill (bf16 KV);
* mhc: TileKernels boundary (``mhc_fused`` rows, impl ``tilelang``);
* gemm_dense: FP8 1×128 / 128×128 blockwise projections through cuBLASLt with K zero-padded to a multiple
  of 512 where K/128 is not a multiple of 4 (the case that gave wrong results unpadded, kernels_bench
  README).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

from kernels_bench import families as F
from kernels_bench import shapes
from kernels_bench.columns import KERNEL_COLUMNS, PRODUCTION_COLUMNS, names
from kernels_bench.families import Ctx, _time, guarded, rel_err
from kernels_bench.production import PACKAGES, MissingPackage, package_version
from kernels_bench.shapes import BF16_TFLOPS, FP8_BLOCKWISE_TFLOPS, TF32_TFLOPS
from kernels_bench.timing import rotation_count

# production_results.csv: the kernel columns, then the production run's (kernels_bench.columns)
PROD_COLUMNS = list(names(KERNEL_COLUMNS + PRODUCTION_COLUMNS))


def prod(base: dict, package: str) -> dict:
    """Row fields naming the production package (the three appended columns)."""
    ver = package_version(package) if package in PACKAGES else ""
    if package == "torch":
        ver = torch.__version__
    return {**base, "_stack": "production", "_package": PACKAGES.get(package, (package,))[0], "_version": ver}


def finish(row: dict, base: dict) -> dict:
    row["stack"] = base["_stack"]
    row["package"] = base["_package"]
    row["package_version"] = base["_version"]
    return row


def _guard(ctx: Ctx, base: dict, body) -> dict:
    core = {k: v for k, v in base.items() if not k.startswith("_")}
    return finish(guarded(ctx, core, body), base)


def _checked_timed(ctx: Ctx, make, check_rows, tol: float, max_sets: int = 16) -> dict:
    c0 = make(23)
    got, ref = c0.check(check_rows)
    mx, rel = rel_err(got, ref)
    res = {"max_abs_err": mx, "rel_err": rel, "check_passed": rel < tol}
    if res["check_passed"]:
        nbuf = rotation_count(c0.working_set(), max_sets=max_sets)
        cases = [c0] + [make(23 + 2 * i) for i in range(1, nbuf)]
        res.update(_time(ctx, [c.run for c in cases]))
    return res


# ---- attention -----------------------------------------------------------------------------------------


def _attn_base(kernel, model, kind, fmt, na, nb, Q, L=0, T=0, row_bytes=584, note=""):
    return dict(
        family="attention",
        kernel=kernel,
        impl="flashmla",
        model=model,
        layer_kind=kind,
        fmt=fmt,
        batch=Q,
        context_tokens=L,
        chunk_tokens=T,
        rows=Q,
        n=na + nb,
        flops=shapes.attention_flops(na + nb, Q),
        bytes=float(Q) * ((na + nb) * row_bytes + 2 * 64 * 512 * 2),
        compute_ceiling_TFLOPs=BF16_TFLOPS,
        note=note,
    )


def fam_attention(ctx: Ctx) -> Iterator[dict]:
    from kernels_bench.production.attention import FlashDecodeCase, FlashPrefillCase

    gr = ctx.grid
    W, TOPK = shapes.WINDOW, shapes.TOPK
    dev = ctx.device
    pool = int(4 * shapes.L2_BYTES // 584) + 1  # random gathers miss L2
    note_layout = "MODEL1 paged layout (576-B data then 8-B scales per token, per 64-token block)"
    for kind, nb in (("CSA", TOPK), ("SWA", 0)):
        for B in gr.attn_batches:
            base = prod(
                _attn_base("sparse_mla_decode", "V4", kind, "fp8_584", W, nb, B, note=note_layout),
                "flash_mla",
            )
            yield _guard(
                ctx,
                base,
                lambda B=B, nb=nb: _checked_timed(
                    ctx, lambda s: FlashDecodeCase(B, W, nb, s, dev, pool_rows=pool), sorted({0, B - 1}), 1e-2
                ),
            )
    for L in gr.contexts:  # HCA: window + every one of the L/128 compressed entries
        for B in gr.batches:
            if B * L > gr.max_batch_context:
                continue
            nb = L // 128
            base = prod(
                _attn_base("sparse_mla_decode", "V4", "HCA", "fp8_584", W, nb, B, L=L, note=note_layout),
                "flash_mla",
            )
            yield _guard(
                ctx,
                base,
                lambda B=B, nb=nb: _checked_timed(
                    ctx,
                    lambda s: FlashDecodeCase(B, W, nb, s, dev, dense_b=True, pool_rows=pool),
                    sorted({0, B - 1}),
                    1e-2,
                ),
            )
    # V3.2 format (656 B/token, d_qk 576): one cache, top-k 640 (V4's entry count) and 2048 (V3.2's)
    for topk in (640, 2048):
        for B in gr.attn_fmt_batches:
            base = prod(
                _attn_base(
                    "sparse_mla_decode",
                    "V3.2",
                    f"top{topk}",
                    "fp8_656",
                    topk,
                    0,
                    B,
                    row_bytes=656,
                    note="V3.2 layout, d_qk 576 / d_v 512",
                ),
                "flash_mla",
            )
            base["flops"] = 2.0 * 64 * (576 + 512) * topk * B
            yield _guard(
                ctx,
                base,
                lambda B=B, topk=topk: _checked_timed(
                    ctx,
                    lambda s: FlashDecodeCase(B, topk, 0, s, dev, fmt="fp8_656", pool_rows=pool),
                    sorted({0, B - 1}),
                    1e-2,
                ),
            )
    # prefill: T query tokens of one sequence, 640 entries each (bf16 KV, as flash_mla_sparse_fwd reads it)
    for T in gr.attn_prefill_chunks:
        for model, dqk, topk in (("V4", 512, W + TOPK), ("V3.2", 576, 2048)):
            base = prod(
                _attn_base(
                    "sparse_mla_prefill",
                    model,
                    "CSA",
                    "bf16_1024" if dqk == 512 else "bf16_1152",
                    topk,
                    0,
                    T,
                    T=T,
                    row_bytes=2 * dqk,
                    note="bf16 KV (production dequantises the FP8 cache before this kernel); kernel alone",
                ),
                "flash_mla",
            )
            base["batch"] = 1
            base["flops"] = 2.0 * 64 * (dqk + 512) * topk * T
            yield _guard(
                ctx,
                base,
                lambda T=T, dqk=dqk, topk=topk: _checked_timed(
                    ctx,
                    lambda s: FlashPrefillCase(
                        T, topk, s, dev, dqk=dqk, pool_rows=int(4 * shapes.L2_BYTES // (2 * dqk))
                    ),
                    sorted({0, T // 2, T - 1}),
                    1e-2,
                    max_sets=4,
                ),
            )


SPEC_S_Q = (2, 4)  # rows per sequence in a verify step: V4 MTP 2, V4.1 DSpark 4 (sim/config/families.py)


def fam_attention_spec(ctx: Ctx) -> Iterator[dict]:
    """FlashMLA sparse decode of speculative verify steps: B sequences of s_q query rows (vLLM's call, q
    [B, s_q, H, D] with per-row indices), and beside it the same rows as B·s_q sequences of one row
    (SGLang's call, impl ``flashmla_expanded``); V4 CSA (128 + 512), SWA (128) and HCA (128 + L/128)."""
    from kernels_bench.production.attention import FlashDecodeCase

    gr = ctx.grid
    W, TOPK = shapes.WINDOW, shapes.TOPK
    dev = ctx.device
    pool = int(4 * shapes.L2_BYTES // 584) + 1
    points = [("CSA", TOPK, 0, B) for B in gr.attn_batches] + [("SWA", 0, 0, B) for B in gr.attn_batches]
    points += [
        ("HCA", L // 128, L, B) for L in gr.contexts for B in gr.batches if B * L <= gr.max_batch_context
    ]
    for s_q in SPEC_S_Q:
        for kind, nb, L, B in points:
            dense = kind == "HCA"
            for impl, seqs, rows_per in (("flashmla", B, s_q), ("flashmla_expanded", B * s_q, 1)):
                call = "vLLM's verify call" if impl == "flashmla" else "SGLang's verify call: one row each"
                base = prod(
                    _attn_base(
                        "sparse_mla_decode_spec",
                        "V4",
                        kind,
                        "fp8_584",
                        W,
                        nb,
                        B * s_q,
                        L=L,
                        note=f"{B} sequences x s_q {s_q} as {seqs} x {rows_per} ({call}); MODEL1 layout; "
                        + ("CSA rows' top-k drawn apart (an upper bound)" if kind == "CSA" else ""),
                    ),
                    "flash_mla",
                )
                base.update(impl=impl, batch=B, k=s_q)
                yield _guard(
                    ctx,
                    base,
                    lambda seqs=seqs, rows_per=rows_per, nb=nb, dense=dense: _checked_timed(
                        ctx,
                        lambda s: FlashDecodeCase(
                            seqs, W, nb, s, dev, dense_b=dense, pool_rows=pool, s_q=rows_per
                        ),
                        sorted({0, seqs - 1}),
                        1e-2,
                    ),
                )


# ---- mHC ---------------------------------------------------------------------------------------------


class _MhcCase:
    def __init__(self, T, H, seed, device, params, prenorm="deepgemm"):
        from kernels_bench.production.mhc_tk import TkBoundary

        g = torch.Generator(device=device)
        g.manual_seed(seed)
        self.x = torch.randn(T, 4, H, generator=g, device=device).to(torch.bfloat16)
        self.y = torch.randn(T, H, generator=g, device=device).to(torch.bfloat16)
        self.post = 2 * torch.rand(T, 4, generator=g, device=device)
        self.comb = torch.rand(T, 4, 4, generator=g, device=device)
        self.comb = self.comb / self.comb.sum(-1, keepdim=True)
        self.p = params
        self.op = TkBoundary(T, H, params, device, prenorm)
        self.T, self.H = T, H

    def run(self):
        return self.op(self.x, self.y, self.post, self.comb)

    def check(self, rows):
        from kernels_bench.production.mhc_tk import boundary_ref

        outs = self.run()
        n = min(self.T, 64)
        ref = boundary_ref(self.x[:n], self.y[:n], self.post[:n], self.comb[:n], self.p)
        got = torch.cat(
            [o[:n].reshape(n, -1).double() / r.double().norm() for o, r in zip(outs, ref, strict=True)], 1
        )
        want = torch.cat([r.reshape(n, -1).double() / r.double().norm() for r in ref], 1)
        return got, want

    def working_set(self):
        return self.T * 20.0 * self.H


def fam_mhc(ctx: Ctx) -> Iterator[dict]:
    from kernels_bench.production import mhc_tk

    for H, model in ((4096, "V4"), (5120, "V4.1")):
        params = mhc_tk.make_params(H, device=ctx.device, generator=F._gen(ctx, 7))
        for T in ctx.grid.mhc_tokens:
            base = prod(
                dict(
                    family="mhc",
                    kernel="mhc_fused",
                    impl="tilelang",
                    model=model,
                    layer_kind="boundary",
                    fmt="bf16+fp32",
                    batch=T,
                    rows=T,
                    n=H,
                    flops=shapes.mhc_flops(H, T),
                    bytes=shapes.mhc_bytes(H, T, fused=True),
                    compute_ceiling_TFLOPs=TF32_TFLOPS,
                    note="tile_kernels mhc_post_fwd + DeepGEMM tf32_hc_prenorm_gemm "
                    f"({mhc_tk.prenorm_splits(T)} K-splits, summed by the next kernel) + "
                    "mhc_pre_big_fuse_fwd + torch RMSNorm",
                ),
                "tile_kernels",
            )
            base["_version"] += f" + deep_gemm {package_version('deep_gemm')}"
            yield _guard(
                ctx,
                base,
                lambda T=T, H=H, params=params: _checked_timed(
                    ctx, lambda s: _MhcCase(T, H, s, ctx.device, params), [0], 2e-2, 32
                ),
            )


def fam_mhc_parts(ctx: Ctx) -> Iterator[dict]:
    """Each step of the TileKernels boundary alone (timing only: the composition is checked in mhc_fused)."""
    from kernels_bench.production import mhc_tk

    H = 4096
    params = mhc_tk.make_params(H, device=ctx.device, generator=F._gen(ctx, 7))
    for T in (1, 8, 64, 512, 4096):
        case = _MhcCase(T, H, 23, ctx.device, params, prenorm="torch")
        case.run()
        for name, fn in case.op.parts(case.x, case.y, case.post, case.comb):
            base = prod(
                dict(
                    family="mhc",
                    kernel=name,
                    impl="tilelang" if name in ("mhc_post", "mhc_pre_big_fuse") else "torch",
                    model="V4",
                    layer_kind="boundary-part",
                    fmt="bf16+fp32",
                    batch=T,
                    rows=T,
                    n=H,
                    note="one step of mhc_fused (tilelang rows) alone; timing only, the composition is checked",
                ),
                "tile_kernels",
            )
            yield _guard(ctx, base, lambda fn=fn: {"check_passed": "", **_time(ctx, [fn])})


# ---- FP8 blockwise dense projections (cuBLASLt, K padded) ------------------------------------------------


def _pad_k(K: int) -> int:
    """K rounded up so that K/128 is a multiple of 4 (cuBLASLt's blockwise recipe is wrong otherwise)."""
    return K if (K // 128) % 4 == 0 else -(-K // 512) * 512


class _BlockwiseCase:
    def __init__(self, M, K, N, seed, device):
        g = torch.Generator(device=device)
        g.manual_seed(seed)
        mp = max(16, -(-M // 16) * 16)
        Kp = _pad_k(K)
        x = torch.randn(mp, K, generator=g, device=device).to(torch.bfloat16)
        w = (torch.randn(N, K, generator=g, device=device) / math.sqrt(K)).to(torch.bfloat16)
        xp = torch.nn.functional.pad(x, (0, Kp - K))
        wp = torch.nn.functional.pad(w, (0, Kp - K))
        self.xq, xs = F._fp8_blockwise_act(xp)
        self.wq, self.wsc = F._fp8_blockwise_w(wp)
        self.xs = xs
        self.xs_t = xs.t().contiguous().t()
        self.sb = F._blockwise_scale_b(self.xq, self.wq, self.xs_t, self.wsc)
        self.M, self.K, self.N, self.Kp = M, K, N, Kp

    def run(self):
        return torch._scaled_mm(
            self.xq, self.wq.t(), scale_a=self.xs_t, scale_b=self.sb, out_dtype=torch.bfloat16
        )

    def check(self, rows):
        out = self.run()[:16]
        Kp, N = self.Kp, self.N
        xd = (self.xq[:16].float().reshape(16, Kp // 128, 128) * self.xs[:16, :, None]).reshape(16, Kp)
        wd = (self.wq.float().reshape(N // 128, 128, Kp // 128, 128) * self.wsc[:, None, :, None]).reshape(
            N, Kp
        )
        return out, xd @ wd.t()

    def working_set(self):
        return self.N * self.Kp + self.M * self.Kp * 2


def fam_gemm_dense(ctx: Ctx) -> Iterator[dict]:
    for model in ("V4", "V4.1"):
        for name, K, N in F.dense_projections(model):
            for M in ctx.grid.dense_m:
                Kp = _pad_k(K)
                note = "M padded to 16; " if M % 16 else ""
                if Kp != K:
                    note += (
                        f"K zero-padded {K} -> {Kp} (K/128 must be a multiple of 4 for cuBLASLt blockwise)"
                    )
                base = prod(
                    dict(
                        family="gemm_dense",
                        kernel=f"proj_{name}",
                        impl="cublas",
                        model=model,
                        layer_kind=name,
                        fmt="fp8_blockwise",
                        batch=M,
                        rows=M,
                        n=N,
                        k=K,
                        flops=shapes.gemm_flops(M, N, K),
                        bytes=shapes.gemm_bytes(M, N, K, 1, 1, 2),
                        compute_ceiling_TFLOPs=FP8_BLOCKWISE_TFLOPS,
                        note=note.strip("; "),
                    ),
                    "torch",
                )
                yield _guard(
                    ctx,
                    base,
                    lambda M=M, K=K, N=N: _checked_timed(
                        ctx, lambda s: _BlockwiseCase(M, K, N, s, ctx.device), [0], 2e-2, 32
                    ),
                )


FAMILIES = {
    "attention": fam_attention,
    "attention_spec": fam_attention_spec,
    "mhc": fam_mhc,
    "mhc_parts": fam_mhc_parts,
    "gemm_dense": fam_gemm_dense,
}


def missing_row(family: str, err: MissingPackage) -> dict:
    """One failed row saying which package is missing (the family is not silently dropped)."""
    from kernels_bench.report import make_row

    row = make_row(family=family, kernel="-", impl="-", check_passed=False, note=str(err)[:300])
    row.update(stack="production", package="", package_version="")
    return row
