"""Benchmark families: build inputs, check each kernel against its reference, then time it.

Each family is a generator of tidy rows (``report.make_row``). Every configuration is checked before it
is timed; a failed check or an exception becomes a row with ``check_passed`` False and the reason in
``note`` (never a silent timing).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from kernels_bench import attention as attn_ref
from kernels_bench import formats, indexer, mhc, shapes, topk
from kernels_bench.grid import Grid
from kernels_bench.report import make_row
from kernels_bench.shapes import BF16_TFLOPS, FP8_BLOCKWISE_TFLOPS, FP8_TFLOPS, MODELS, TF32_TFLOPS
from kernels_bench.timing import rotation_count, time_calls


@dataclass
class Ctx:
    grid: Grid
    device: str
    timed: bool  # False for the CPU dry run (checks only)
    log: Callable[[str], None]
    deadline: float  # time.monotonic() after which remaining configs are skipped
    tune: dict  # kernel configurations chosen by the tuning sweep (or defaults)


def tuned(tune: dict, family: str, variant: str) -> dict:
    """Configuration for ``family:variant`` (e.g. ``attention:fp8_528+nvfp4_288``), else the family's."""
    return dict(tune.get(f"{family}:{variant}", tune.get(family, {})))


def _gen(ctx: Ctx, seed: int) -> torch.Generator:
    g = torch.Generator(device=ctx.device)
    g.manual_seed(seed)
    return g


def tiled_rows(fmt: str, n_rows: int, ctx: Ctx, seed: int, block: int = 65536) -> torch.Tensor:
    """n_rows valid random rows of ``fmt``: one quantised random block, repeated (fast for GB-sized caches)."""
    blk = formats.random_rows(fmt, min(n_rows, block), generator=_gen(ctx, seed), device=ctx.device)
    out = torch.empty(n_rows, formats.ROW_BYTES[fmt], dtype=torch.uint8, device=ctx.device)
    for s in range(0, n_rows, blk.shape[0]):
        m = min(blk.shape[0], n_rows - s)
        out[s : s + m] = blk[:m]
    return out


def rel_err(got: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    g, r = got.double(), ref.double()
    fin = torch.isfinite(r)
    if not torch.equal(torch.isfinite(g), fin):
        return math.inf, math.inf
    d = (g[fin] - r[fin]).abs()
    den = r[fin].norm().item()
    return (d.max().item() if d.numel() else 0.0), (d.norm().item() / den if den > 0 else d.norm().item())


def _time(ctx: Ctx, calls) -> dict:
    if not ctx.timed:
        for c in calls[:1]:
            c()
        return {"timing_method": "dry_run"}
    t = time_calls(calls)
    return {
        "median_us": t.median_us,
        "p10_us": t.p10_us,
        "p90_us": t.p90_us,
        "samples": t.samples,
        "timing_method": t.method,
    }


def guarded(ctx: Ctx, base: dict, body: Callable[[], dict]) -> dict:
    """Run one configuration; exceptions become a failed row (so one bad shape never stops the grid)."""
    import time

    if time.monotonic() > ctx.deadline:
        note = "; ".join(filter(None, [base.get("note"), "skipped: time budget exhausted"]))
        return make_row(**{**base, "check_passed": False, "note": note})
    try:
        out = body()
    except Exception as e:  # noqa: BLE001 - recorded in the table, never silent
        msg = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        ctx.log(f"  ERROR {base.get('kernel')} {base.get('layer_kind', '')}: {msg}")
        out = {"check_passed": False, "note": msg}
    finally:
        if ctx.device == "cuda":
            torch.cuda.synchronize()
    row = make_row(**{**base, **out})
    ctx.log(
        f"  {row['family']:<12} {row['kernel']:<22} {row['model']:<5} {str(row['layer_kind']):<9} "
        f"{str(row['fmt']):<20} B={row['batch']} L={row['context_tokens']} T={row['chunk_tokens']} "
        f"rows={row['rows']} n={row['n']} -> {_fmt_us(row['median_us'])} ok={row['check_passed']} "
        f"err={_fmt_e(row['rel_err'])} roof={_fmt_e(row['frac_of_ceiling'])}"
    )
    return row


def _fmt_us(v) -> str:
    return f"{v:.2f}us" if isinstance(v, float) else "-"


def _fmt_e(v) -> str:
    return f"{v:.3g}" if isinstance(v, float) else "-"


# ---- ceilings ---------------------------------------------------------------------------------------


def fam_ceiling(ctx: Ctx) -> Iterator[dict]:
    """Re-measure copy bandwidth and bf16 / FP8 GEMM rates in this run (kernels.md §1 method)."""
    if not ctx.timed:
        return
    dev = ctx.device

    def copy_body(engine: bool):
        n = 2 * 2**30 // 4
        x = torch.randn(n, device=dev)
        y = torch.empty_like(x)
        # an SM kernel (elementwise multiply by 1); copy_ of a whole buffer runs on the copy engines instead
        call = (lambda: y.copy_(x)) if engine else (lambda: torch.mul(x, 1.0, out=y))  # noqa: E731
        call()
        ok = bool(torch.equal(x[: 1 << 20], y[: 1 << 20]))
        return {**_time(ctx, [call]), "bytes": 2.0 * 4 * n, "check_passed": ok}

    yield guarded(
        ctx,
        dict(
            family="ceiling",
            kernel="d2d_copy_2GiB",
            impl="torch",
            model="-",
            fmt="fp32",
            note="elementwise SM kernel, read + write counted",
        ),
        lambda: copy_body(False),
    )
    yield guarded(
        ctx,
        dict(
            family="ceiling",
            kernel="memcpy_2GiB",
            impl="torch",
            model="-",
            fmt="fp32",
            note="copy_ (copy engine in a graph), read + write counted",
        ),
        lambda: copy_body(True),
    )

    def mm_body(fp8: bool):
        n = 8192
        a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        if fp8:
            a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn).t()
            one = torch.ones((), device=dev)
            call = lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
            ref = a8[:64].float() @ b8.float()
        else:
            call = lambda: a @ b  # noqa: E731
            ref = a[:64].float() @ b.float()
        out = call()
        mx, rel = rel_err(out[:64], ref)
        t = _time(ctx, [call])
        return {
            **t,
            "flops": 2.0 * n**3,
            "bytes": 3.0 * n * n * (1 if fp8 else 2),
            "max_abs_err": mx,
            "rel_err": rel,
            "check_passed": rel < 1e-2,
            "compute_ceiling_TFLOPs": FP8_TFLOPS if fp8 else BF16_TFLOPS,
        }

    yield guarded(
        ctx,
        dict(
            family="ceiling",
            kernel="gemm_8192",
            impl="cublas",
            model="-",
            fmt="bf16",
            rows=8192,
            n=8192,
            k=8192,
        ),
        lambda: mm_body(False),
    )
    yield guarded(
        ctx,
        dict(
            family="ceiling",
            kernel="gemm_8192",
            impl="cublas",
            model="-",
            fmt="fp8_tensorwise",
            rows=8192,
            n=8192,
            k=8192,
        ),
        lambda: mm_body(True),
    )


# ---- indexer ----------------------------------------------------------------------------------------


def _index_spec(model: str, kind: str, L: int):
    """(heads, key format, keys scored, cache rows per sequence, block-max?, reindex?)."""
    dims = MODELS[model]
    if kind == "CSA":
        return dims.index_heads, dims.index_key_fmt, L // 4, L // 4, False, False
    if kind == "Full-enc":
        return dims.index_heads, dims.index_key_fmt, L // 2, L // 2, False, False
    if kind == "Full-L20":
        return dims.index_heads, dims.index_key_fmt, L, L, True, False
    if kind == "Reindex":
        n = min(L, shapes.REINDEX_CANDIDATES)
        return dims.index_heads, dims.index_key_fmt, n, L, False, True
    raise ValueError(kind)


class IndexerCase:
    """Inputs of one decode indexer configuration (B queries, each with its own key cache)."""

    def __init__(self, ctx: Ctx, model: str, kind: str, B: int, L: int, seed: int):
        self.heads, self.fmt, self.n, self.rows_per_seq, self.block_max, reindex = _index_spec(model, kind, L)
        g = _gen(ctx, seed)
        self.keys = tiled_rows(self.fmt, B * self.rows_per_seq, ctx, seed)
        q = torch.randn(B, self.heads, 128, generator=g, device=ctx.device)
        self.qc, self.qs, self.qd = indexer.quant_queries(self.fmt, q)
        self.w = torch.rand(B, self.heads, generator=g, device=ctx.device) / self.heads
        self.block_table = None
        if reindex:
            nblk = self.rows_per_seq // 8
            nb = self.n // 8
            perm = torch.rand(B, nblk, generator=g, device=ctx.device).argsort(dim=1)[:, :nb]
            self.block_table = perm.sort(dim=1).values.to(torch.int32).contiguous()
        self.out = torch.empty(B, self.n, dtype=torch.float32, device=ctx.device)
        self.bmax = (
            torch.empty(B, self.n // 8, dtype=torch.float32, device=ctx.device) if self.block_max else None
        )

    def run(self, tune: dict):
        from kernels_bench.indexer_triton import indexer_logits

        return indexer_logits(
            self.fmt,
            self.qc,
            self.qs,
            self.w,
            self.keys,
            self.n,
            rows_per_seq=self.rows_per_seq,
            block_table=self.block_table,
            block_max=self.block_max,
            out=self.out,
            bmax=self.bmax,
            **tune,
        )

    def check(self, rows: list[int], max_keys: int = 65536) -> tuple[float, float]:
        worst = (0.0, 0.0)
        n = min(self.n, max_keys)
        for b in rows:
            if self.block_table is not None:
                kr = indexer.reindex_rows(self.block_table[b : b + 1], 8)[0, :n]
            else:
                kr = torch.arange(n, device=self.keys.device)
            kd = indexer.dequant_keys(self.fmt, self.keys[b * self.rows_per_seq + kr])
            ref = torch.einsum("hd,nd->hn", self.qd[b].float(), kd.float())
            ref = (torch.relu(ref) * self.w[b].float()[:, None]).sum(0)
            e = rel_err(self.out[b, :n], ref)
            worst = (max(worst[0], e[0]), max(worst[1], e[1]))
            if self.bmax is not None:  # block maxima of the kernel's own logits, exactly
                bm = indexer.block_max_ref(self.out[b : b + 1], 8)[0]
                if not torch.equal(self.bmax[b], bm):
                    worst = (math.inf, math.inf)
        return worst

    def working_set(self) -> float:
        return self.keys.numel() + self.out.numel() * 4


def fam_indexer(ctx: Ctx) -> Iterator[dict]:
    gr = ctx.grid
    for model, kind in gr.indexer_kinds:
        tune = tuned(ctx.tune, "indexer", MODELS[model].index_key_fmt)
        for L in gr.contexts:
            for B in gr.batches:
                if B * L > gr.max_batch_context:
                    continue
                heads, fmt, n, _, bmax, _ = _index_spec(model, kind, L)
                base = dict(
                    family="indexer",
                    kernel="indexer_decode",
                    impl="triton",
                    model=model,
                    layer_kind=kind,
                    fmt=fmt,
                    batch=B,
                    context_tokens=L,
                    chunk_tokens=0,
                    rows=B,
                    n=n,
                    flops=shapes.indexer_flops(heads, n, B),
                    bytes=shapes.indexer_bytes(fmt, n, B),
                    compute_ceiling_TFLOPs=FP8_TFLOPS,
                )

                def body(model=model, kind=kind, L=L, B=B, tune=tune):
                    cases = [IndexerCase(ctx, model, kind, B, L, seed=17)]
                    c0 = cases[0]
                    c0.run(tune)
                    mx, rel = c0.check([0, B - 1])
                    ok = rel < 5e-3
                    res = {"max_abs_err": mx, "rel_err": rel, "check_passed": ok}
                    if ok:
                        nbuf = rotation_count(c0.working_set(), max_sets=16)
                        cases += [IndexerCase(ctx, model, kind, B, L, seed=17 + i) for i in range(1, nbuf)]
                        res.update(_time(ctx, [lambda c=c: c.run(tune) for c in cases]))
                    return res

                yield guarded(ctx, base, body)


def fam_indexer_prefill(ctx: Ctx) -> Iterator[dict]:
    """Indexer over a prefill chunk of T rows after L cached tokens (causal, one shared key cache)."""
    from kernels_bench.indexer_triton import indexer_logits

    gr = ctx.grid
    for model, kind, ratio in (("V4", "CSA", 4), ("V4.1", "Full-enc", 2)):
        dims = MODELS[model]
        for T in gr.prefill_chunks:
            for Lp in gr.prefill_prev:
                n = (Lp + T) // ratio
                if 4.0 * T * n > gr.prefill_max_logits_bytes:
                    continue
                visible = (Lp + T / 2) / ratio
                base = dict(
                    family="indexer",
                    kernel="indexer_prefill",
                    impl="triton",
                    model=model,
                    layer_kind=kind,
                    fmt=dims.index_key_fmt,
                    batch=1,
                    context_tokens=Lp,
                    chunk_tokens=T,
                    rows=T,
                    n=n,
                    flops=shapes.indexer_flops(dims.index_heads, int(visible), T),
                    bytes=n * formats.ROW_BYTES[dims.index_key_fmt] + 4.0 * T * n,
                    compute_ceiling_TFLOPs=FP8_TFLOPS,
                )

                def body(dims=dims, T=T, Lp=Lp, n=n, ratio=ratio):
                    g = _gen(ctx, 5)
                    keys = tiled_rows(dims.index_key_fmt, n, ctx, 5)
                    q = torch.randn(T, dims.index_heads, 128, generator=g, device=ctx.device)
                    qc, qs, qd = indexer.quant_queries(dims.index_key_fmt, q)
                    w = torch.rand(T, dims.index_heads, generator=g, device=ctx.device) / dims.index_heads
                    out = torch.empty(T, n, dtype=torch.float32, device=ctx.device)
                    tune = dict(ctx.tune.get("indexer_prefill", {"block_n": 128, "bq": 4, "num_warps": 8}))

                    def call():
                        indexer_logits(
                            dims.index_key_fmt,
                            qc,
                            qs,
                            w,
                            keys,
                            n,
                            q_per_seq=T,
                            rows_per_seq=0,
                            causal_base=Lp,
                            ratio=ratio,
                            out=out,
                            **tune,
                        )

                    call()
                    rows = [0, T - 1]
                    nchk = min(n, 65536)
                    kd = indexer.dequant_keys(dims.index_key_fmt, keys[:nchk]).float()
                    vis = (Lp + torch.tensor(rows, device=ctx.device) + 1) // ratio
                    ref = indexer.indexer_logits_ref(qd[rows].float(), w[rows].float(), kd[None], visible=vis)
                    mx, rel = rel_err(out[rows, :nchk], ref)
                    res = {"max_abs_err": mx, "rel_err": rel, "check_passed": rel < 5e-3}
                    if res["check_passed"]:
                        res.update(_time(ctx, [call]))
                    return res

                yield guarded(ctx, base, body)


# ---- top-k ------------------------------------------------------------------------------------------


def fam_topk(ctx: Ctx) -> Iterator[dict]:
    from kernels_bench.topk_triton import RadixTopK

    gr = ctx.grid
    cases = [(r, n, shapes.TOPK) for r in gr.topk_rows for n in gr.topk_cols if r * n <= gr.topk_max_elems]
    # V4.1 layer-20 block selection: top-2048 blocks over L/8 block scores (kernels.md §3.2)
    cases += [
        (r, n // 8, shapes.REINDEX_BLOCKS) for r in gr.topk_rows[:2] for n in gr.topk_cols if n // 8 > 2048
    ]
    for rows, n, k in cases:
        for impl in ("triton", "torch"):
            base = dict(
                family="topk",
                kernel="radix_topk" if impl == "triton" else "torch_topk",
                impl=impl,
                model="-",
                fmt="fp32",
                batch=rows,
                rows=rows,
                n=n,
                k=k,
                bytes=shapes.topk_bytes(n, rows),
            )

            def body(rows=rows, n=n, k=k, impl=impl):
                nbuf = rotation_count(4.0 * rows * n, max_sets=32)
                xs = [
                    torch.randn(rows, n, generator=_gen(ctx, 3 + i), device=ctx.device) for i in range(nbuf)
                ]
                if impl == "triton":
                    sels = [RadixTopK(rows, n, k, ctx.device) for _ in xs]
                    calls = [lambda s=s, x=x: s(x) for s, x in zip(sels, xs, strict=True)]
                    idx = calls[0]()
                else:
                    calls = [lambda x=x: torch.topk(x, k, dim=1, sorted=False) for x in xs]
                    idx = calls[0]().indices
                ok = topk.topk_values_match(xs[0], idx, k)
                res = {"check_passed": ok}
                if ok:
                    res.update(_time(ctx, calls))
                return res

            yield guarded(ctx, base, body)


# ---- sparse attention -------------------------------------------------------------------------------


def _pool_rows(ctx: Ctx, fmt: str, needed: int) -> int:
    """Pool rows: what the config needs, and (timed runs) at least 4 × L2 of bytes so that gathers miss L2."""
    if not ctx.timed:
        return needed
    return max(needed, int(4 * shapes.L2_BYTES // formats.ROW_BYTES[fmt]) + 1)


class AttnCase:
    """Q queries attending to NA window rows (fmt_a) + NB compressed rows (fmt_b) gathered from pools."""

    def __init__(
        self,
        ctx: Ctx,
        Q: int,
        fmt_a: str,
        na: int,
        fmt_b: str,
        nb: int,
        seed: int,
        *,
        dense_b: bool = False,
        tune: dict | None = None,
        no_dequant: bool = False,
    ):
        from kernels_bench.attention_triton import SparseMLA

        g = _gen(ctx, seed)
        dev = ctx.device
        self.fmt_a, self.fmt_b, self.na, self.nb = fmt_a, fmt_b, na, nb
        self.pool_a = tiled_rows(fmt_a, _pool_rows(ctx, fmt_a, Q * na), ctx, seed)
        self.idx_a = torch.randint(
            0, self.pool_a.shape[0], (Q, na), generator=g, device=dev, dtype=torch.int32
        )
        self.rows_per_seq_b = 0
        if nb:
            if dense_b:  # HCA: every compressed entry of the sequence, contiguous per sequence
                self.pool_b = tiled_rows(fmt_b, Q * nb, ctx, seed + 1)
                self.idx_b = torch.arange(nb, device=dev, dtype=torch.int32).repeat(Q, 1).contiguous()
                self.rows_per_seq_b = nb
            else:
                self.pool_b = tiled_rows(fmt_b, _pool_rows(ctx, fmt_b, Q * nb), ctx, seed + 1)
                self.idx_b = torch.randint(
                    0, self.pool_b.shape[0], (Q, nb), generator=g, device=dev, dtype=torch.int32
                )
        else:
            self.pool_b, self.idx_b = self.pool_a, self.idx_a
        self.q = (torch.randn(Q, 64, 512, generator=g, device=dev) * 0.5).to(torch.bfloat16)
        self.sink = torch.randn(64, generator=g, device=dev)
        self.op = SparseMLA(Q, fmt_a, na, fmt_b, nb, dev, no_dequant=no_dequant, **(tune or {}))

    def run(self):
        return self.op(
            self.q,
            self.pool_a,
            self.idx_a,
            self.pool_b,
            self.idx_b,
            self.sink,
            rows_per_seq_b=self.rows_per_seq_b,
        )

    def check(self, rows: list[int]) -> tuple[float, float]:
        out = self.run()
        srcs = [(self.fmt_a, self.pool_a, self.idx_a[rows])]
        if self.nb:
            ib = (
                self.idx_b[rows] + torch.tensor(rows, device=self.idx_b.device)[:, None] * self.rows_per_seq_b
            )
            srcs.append((self.fmt_b, self.pool_b, ib))
        ref = attn_ref.sparse_mla_ref_from_pools(self.q[rows], self.sink, 1.0 / math.sqrt(512), srcs)
        return rel_err(out[rows], ref)

    def working_set(self) -> float:
        q = self.q.shape[0]
        return q * (
            self.na * formats.ROW_BYTES[self.fmt_a]
            + self.nb * formats.ROW_BYTES[self.fmt_b]
            + 2 * 64 * 512 * 2
        )


def attention_row(ctx: Ctx, base: dict, make: Callable[[int], AttnCase], check: bool = True) -> dict:
    def body():
        c0 = make(23)
        q = c0.q.shape[0]
        res = {}
        if check:
            mx, rel = c0.check(sorted({0, q - 1}))
            res = {"max_abs_err": mx, "rel_err": rel, "check_passed": rel < 1e-2}
        else:
            c0.run()
            res = {"check_passed": "", "note": "timing-only control (no dequantisation, values meaningless)"}
        if res["check_passed"] is not False:
            nbuf = rotation_count(c0.working_set(), max_sets=16)
            cases = [c0] + [make(23 + 2 * i) for i in range(1, nbuf)]
            res.update(_time(ctx, [c.run for c in cases]))
        return res

    return guarded(ctx, base, body)


def _attn_base(kernel, model, kind, fmt_a, na, fmt_b, nb, Q, L=0, T=0, extra_note=""):
    ent = {fmt_a: na}
    if nb:
        ent[fmt_b] = ent.get(fmt_b, 0) + nb
    fmt = fmt_a if not nb or fmt_b == fmt_a else f"{fmt_a}+{fmt_b}"
    return dict(
        family="attention",
        kernel=kernel,
        impl="triton",
        model=model,
        layer_kind=kind,
        fmt=fmt,
        batch=Q,
        context_tokens=L,
        chunk_tokens=T,
        rows=Q,
        n=na + nb,
        flops=shapes.attention_flops(na + nb, Q),
        bytes=shapes.attention_bytes(ent, Q),
        compute_ceiling_TFLOPs=BF16_TFLOPS,
        note=extra_note,
    )


def fam_attention(ctx: Ctx) -> Iterator[dict]:
    gr = ctx.grid
    W, TOPK = shapes.WINDOW, shapes.TOPK

    def tune_of(fa: str, fb: str) -> dict:
        return tuned(ctx.tune, "attention", f"{fa}+{fb}")

    # decode, per layer kind (entries do not depend on L once L >= 2048, except HCA)
    kinds = [
        ("V4", "CSA", "fp8_584", "fp8_584", TOPK),
        ("V4", "SWA", "fp8_584", "fp8_584", 0),
        ("V4.1", "CSA2", "fp8_528", "nvfp4_288", TOPK),
    ]
    for model, kind, fa, fb, nb in kinds:
        for B in gr.attn_batches:
            base = _attn_base("sparse_mla_decode", model, kind, fa, W, fb, nb, B)
            yield attention_row(
                ctx,
                base,
                lambda s, B=B, fa=fa, fb=fb, nb=nb: AttnCase(ctx, B, fa, W, fb, nb, s, tune=tune_of(fa, fb)),
            )
    for L in gr.contexts:  # HCA: dense over L/128 compressed entries
        for B in gr.batches:
            nb = L // 128
            base = _attn_base("sparse_mla_decode", "V4", "HCA", "fp8_584", W, "fp8_584", nb, B, L=L)
            yield attention_row(
                ctx,
                base,
                lambda s, B=B, nb=nb: AttnCase(
                    ctx, B, "fp8_584", W, "fp8_584", nb, s, dense_b=True, tune=tune_of("fp8_584", "fp8_584")
                ),
            )
    # KV format study (kernels.md §4.3): 640 entries all in one format, plus the FP4 no-dequant control
    for B in gr.attn_fmt_batches:
        for fmt in ("fp8_584", "fp8_528", "nvfp4_288", "bf16_1024"):
            base = _attn_base("sparse_mla_fmt", "-", "fmt-study", fmt, W, fmt, TOPK, B)
            yield attention_row(
                ctx,
                base,
                lambda s, B=B, fmt=fmt: AttnCase(ctx, B, fmt, W, fmt, TOPK, s, tune=tune_of(fmt, fmt)),
            )
        base = _attn_base("sparse_mla_fmt_nodeq", "-", "fmt-study", "nvfp4_288", W, "nvfp4_288", TOPK, B)
        yield attention_row(
            ctx,
            base,
            lambda s, B=B: AttnCase(
                ctx,
                B,
                "nvfp4_288",
                W,
                "nvfp4_288",
                TOPK,
                s,
                tune=tune_of("nvfp4_288", "nvfp4_288"),
                no_dequant=True,
            ),
            check=False,
        )
    # prefill: T query tokens of one sequence, each with its own 640 entries (compute-bound)
    for T in gr.attn_prefill_chunks:
        for model, kind, fa, fb in (
            ("V4", "CSA", "fp8_584", "fp8_584"),
            ("V4.1", "CSA2", "fp8_528", "nvfp4_288"),
        ):
            base = _attn_base("sparse_mla_prefill", model, kind, fa, W, fb, TOPK, T, T=T)
            base["batch"] = 1
            yield attention_row(
                ctx,
                base,
                lambda s, T=T, fa=fa, fb=fb: AttnCase(ctx, T, fa, W, fb, TOPK, s, tune=tune_of(fa, fb)),
            )


# ---- KV quantise-on-write and bulk dequant ----------------------------------------------------------


def fam_kvquant(ctx: Ctx) -> Iterator[dict]:
    from kernels_bench.kvquant_triton import bulk_dequant, quantize_on_write

    gr = ctx.grid
    for fmt in ("nvfp4_288", "fp8_584", "fp8_528", "mxfp4_68", "fp8_132"):
        for R in gr.quant_rows:
            base = dict(
                family="kvquant",
                kernel="quantize_on_write",
                impl="triton",
                model="-",
                fmt=fmt,
                rows=R,
                n=formats.ROW_DIM[fmt],
                bytes=shapes.quant_bytes(fmt, R),
                note="contiguous slots" if R > 64 else "random slots in a 256 MB cache",
            )

            def body(fmt=fmt, R=R, base=base):
                dim, rb = formats.ROW_DIM[fmt], formats.ROW_BYTES[fmt]
                nbuf = rotation_count(R * (2 * dim + rb), max_sets=32)
                sets = []
                for i in range(nbuf):
                    g = _gen(ctx, 40 + i)
                    x = (
                        torch.randn(R, dim, generator=g, device=ctx.device)
                        * torch.rand(R, 1, generator=g, device=ctx.device)
                        * 4
                    ).to(torch.bfloat16)
                    if R > 64:
                        cache = torch.empty(R, rb, dtype=torch.uint8, device=ctx.device)
                        slots = torch.arange(R, device=ctx.device, dtype=torch.int64)
                    else:
                        cache = torch.zeros(_pool_rows(ctx, fmt, R), rb, dtype=torch.uint8, device=ctx.device)
                        slots = torch.randperm(cache.shape[0], generator=g, device=ctx.device)[:R]
                    sets.append((x, slots, cache))
                x, slots, cache = sets[0]
                qt = tuned(ctx.tune, "kvquant", fmt)
                quantize_on_write(fmt, x, slots, cache, **qt)
                nchk = min(R, 8192)
                want = formats.quant_rows(fmt, x[:nchk])
                got = cache[slots[:nchk]]
                mismatch = (got != want).float().mean().item()
                # bytes must match the reference; fp8_132's per-key fp32 scale leaves ~0.5 % of codes one
                # e4m3 step apart (rounding of x / scale at code boundaries), so judge it on the values
                dq_got, dq_want = formats.dequant_rows(fmt, got), formats.dequant_rows(fmt, want)
                _, rel = rel_err(dq_got, dq_want)
                ok = mismatch == 0.0 or (fmt == "fp8_132" and mismatch < 1e-2 and rel < 1e-2)
                res = {
                    "check_passed": ok,
                    "max_abs_err": mismatch,
                    "rel_err": rel,
                    "note": base["note"] + f"; byte mismatch fraction {mismatch:.2e}",
                }
                if res["check_passed"]:
                    res.update(_time(ctx, [lambda s=s: quantize_on_write(fmt, *s, **qt) for s in sets]))
                return res

            yield guarded(ctx, base, body)
    for fmt in ("nvfp4_288", "fp8_584"):
        for R in gr.dequant_rows:
            base = dict(
                family="kvquant",
                kernel="bulk_dequant_bf16",
                impl="triton",
                model="-",
                fmt=fmt,
                rows=R,
                n=512,
                bytes=R * (formats.ROW_BYTES[fmt] + 1024.0),
            )

            def body(fmt=fmt, R=R):
                nbuf = rotation_count(R * (formats.ROW_BYTES[fmt] + 1024.0), max_sets=32)
                sets = [
                    (
                        tiled_rows(fmt, R, ctx, 60 + i),
                        torch.empty(R, 512, dtype=torch.bfloat16, device=ctx.device),
                    )
                    for i in range(nbuf)
                ]
                rows, out = sets[0]
                bulk_dequant(fmt, rows, out)
                mx, rel = rel_err(out[:8192], formats.dequant_rows(fmt, rows[:8192]).to(torch.bfloat16))
                res = {"max_abs_err": mx, "rel_err": rel, "check_passed": mx == 0.0}
                if res["check_passed"]:
                    res.update(_time(ctx, [lambda s=s: bulk_dequant(fmt, s[0], s[1]) for s in sets]))
                return res

            yield guarded(ctx, base, body)


# ---- mHC --------------------------------------------------------------------------------------------


def fam_mhc(ctx: Ctx) -> Iterator[dict]:
    from kernels_bench.mhc_triton import MhcBoundary

    gr = ctx.grid
    for H, model in ((4096, "V4"), (5120, "V4.1")):
        for T in gr.mhc_tokens:
            impls = ["fused", "unfused"] + (["eager"] if T in gr.mhc_eager_tokens else [])
            for impl in impls:
                fused = impl == "fused"
                base = dict(
                    family="mhc",
                    kernel=f"mhc_{impl}",
                    impl="torch" if impl == "eager" else "triton",
                    model=model,
                    layer_kind="boundary",
                    fmt="bf16+fp32",
                    batch=T,
                    rows=T,
                    n=H,
                    flops=shapes.mhc_flops(H, T),
                    bytes=shapes.mhc_bytes(H, T, fused=True),
                    compute_ceiling_TFLOPs=TF32_TFLOPS,
                    note="bytes = fused floor (20H/token + fn); the unfused sequence moves ~2x",
                )

                def body(H=H, T=T, impl=impl, fused=fused):
                    p = mhc.make_params(H, device=ctx.device, generator=_gen(ctx, 7))
                    ws = T * 20.0 * H + 24 * 4 * H * 4
                    nbuf = rotation_count(ws, max_sets=32)
                    states = [
                        mhc.make_state(T, H, device=ctx.device, generator=_gen(ctx, 8 + i))
                        for i in range(nbuf)
                    ]
                    if impl == "eager":
                        calls = [
                            lambda s=s: mhc.mhc_boundary_ref(*s, p, shifted=False, dtype=torch.float32)
                            for s in states
                        ]
                        return {
                            "check_passed": True,
                            "note": "eager torch-op chain (float32)",
                            **_time(ctx, calls),
                        }
                    tune = tuned(ctx.tune, "mhc", "fused") if fused else dict(ctx.tune.get("mhc", {}))
                    ops = [MhcBoundary(T, H, p, ctx.device, **tune) for _ in states]
                    fn = (lambda o, s: o.fused(*s)) if fused else (lambda o, s: o.unfused(*s))
                    outs = fn(ops[0], states[0])
                    nchk = min(T, 64)
                    sl = [s[:nchk] for s in states[0]]
                    ref = mhc.mhc_boundary_ref(*sl, p, shifted=fused)
                    worst = (0.0, 0.0)
                    for got, want in zip(outs, ref, strict=True):
                        e = rel_err(got[:nchk].reshape(want.shape), want)
                        worst = (max(worst[0], e[0]), max(worst[1], e[1]))
                    res = {"max_abs_err": worst[0], "rel_err": worst[1], "check_passed": worst[1] < 2e-2}
                    if res["check_passed"]:
                        res.update(
                            _time(ctx, [lambda o=o, s=s: fn(o, s) for o, s in zip(ops, states, strict=True)])
                        )
                    return res

                yield guarded(ctx, base, body)


# ---- GEMMs ------------------------------------------------------------------------------------------


def dense_projections(model: str) -> list[tuple[str, int, int]]:
    """(name, K, N) per token per layer (kernels.md §6.2); wo_a (8 groups) runs in the grouped family."""
    if model == "V4":
        return [
            ("wq_a", 4096, 1024),
            ("wq_b", 1024, 32768),
            ("wkv", 4096, 512),
            ("wo_b", 8192, 4096),
            ("compressor_csa", 4096, 2048),
            ("index_q", 1024, 8192),
            ("router", 4096, 256),
            ("shared_gate_up", 4096, 4096),
            ("shared_down", 2048, 4096),
        ]
    return [
        ("wq_a", 5120, 1280),
        ("wq_b", 1280, 32768),
        ("wkv", 5120, 512),
        ("wo_b", 8192, 5120),
        ("compressor_r2", 5120, 1024),
        ("index_q", 1280, 4096),
        ("router", 5120, 384),
        ("shared_gate_up", 5120, 4608),
        ("shared_down", 2304, 5120),
    ]


def _fp8_rowwise(x: torch.Tensor):
    s = (x.float().abs().amax(dim=1, keepdim=True) / formats.E4M3_MAX).clamp_min(1e-12)
    return (x.float() / s).to(torch.float8_e4m3fn), s


def _fp8_blockwise_act(x: torch.Tensor):
    m, k = x.shape
    xf = x.float().reshape(m, k // 128, 128)
    s = (xf.abs().amax(dim=2) / formats.E4M3_MAX).clamp_min(1e-12)
    return (xf / s[:, :, None]).reshape(m, k).to(torch.float8_e4m3fn), s


def _fp8_blockwise_w(w: torch.Tensor):
    n, k = w.shape
    wf = w.float().reshape(n // 128, 128, k // 128, 128)
    s = (wf.abs().amax(dim=(1, 3)) / formats.E4M3_MAX).clamp_min(1e-12)
    return (wf / s[:, None, :, None]).reshape(n, k).to(torch.float8_e4m3fn), s


def _blockwise_scale_b(xq, wq, xs_t, wsc):
    """The weight-scale layout this torch build accepts for 128×128 blocks ((K/128, N/128) per kernels.md §6.1)."""
    err = None
    for sb in (wsc.t(), wsc.t().contiguous(), wsc):
        try:
            torch._scaled_mm(xq, wq.t(), scale_a=xs_t, scale_b=sb, out_dtype=torch.bfloat16)
            return sb
        except RuntimeError as e:
            err = e
    raise RuntimeError(f"no accepted blockwise scale layout: {str(err).splitlines()[0][:120]}")


def fam_gemm_dense(ctx: Ctx) -> Iterator[dict]:
    """bf16 / FP8 rowwise / FP8 1×128-128×128 blockwise projections through torch (cuBLAS / cuBLASLt)."""
    gr = ctx.grid
    for model in ("V4", "V4.1"):
        for name, K, N in dense_projections(model):
            for M in gr.dense_m:
                for recipe in ("bf16", "fp8_rowwise", "fp8_blockwise"):
                    wb = 2 if recipe == "bf16" else 1
                    peak = {
                        "bf16": BF16_TFLOPS,
                        "fp8_rowwise": FP8_TFLOPS,
                        "fp8_blockwise": FP8_BLOCKWISE_TFLOPS,
                    }
                    base = dict(
                        family="gemm_dense",
                        kernel=f"proj_{name}",
                        impl="cublas",
                        model=model,
                        layer_kind=name,
                        fmt=recipe,
                        batch=M,
                        rows=M,
                        n=N,
                        k=K,
                        flops=shapes.gemm_flops(M, N, K),
                        bytes=shapes.gemm_bytes(M, N, K, wb, wb, 2),
                        compute_ceiling_TFLOPs=peak[recipe],
                    )

                    def body(K=K, N=N, M=M, recipe=recipe):
                        mp = max(16, -(-M // 16) * 16)  # cuBLASLt FP8 needs M % 16 == 0: pad decode batches
                        ws = N * K * (2 if recipe == "bf16" else 1) + mp * K * 2
                        nbuf = rotation_count(ws, max_sets=32)
                        calls, checks = [], []
                        for i in range(nbuf):
                            g = _gen(ctx, 80 + i)
                            x = torch.randn(mp, K, generator=g, device=ctx.device).to(torch.bfloat16)
                            w = (torch.randn(N, K, generator=g, device=ctx.device) / math.sqrt(K)).to(
                                torch.bfloat16
                            )
                            if recipe == "bf16":
                                call = lambda x=x, w=w: x @ w.t()  # noqa: E731
                                ref = lambda x=x, w=w: x[:16].float() @ w.float().t()  # noqa: E731
                            elif recipe == "fp8_rowwise":
                                xq, xs = _fp8_rowwise(x)
                                wq, wsc = _fp8_rowwise(w)
                                wsc = wsc.t().contiguous()
                                call = lambda xq=xq, wq=wq, xs=xs, wsc=wsc: torch._scaled_mm(  # noqa: E731
                                    xq, wq.t(), scale_a=xs, scale_b=wsc, out_dtype=torch.bfloat16
                                )
                                ref = (  # noqa: E731
                                    lambda xq=xq, wq=wq, xs=xs, wsc=wsc: (  # noqa: E731
                                        (xq[:16].float() * xs[:16]) @ (wq.float() * wsc.t()).t()
                                    )
                                )
                            else:
                                xq, xs = _fp8_blockwise_act(x)
                                wq, wsc = _fp8_blockwise_w(w)
                                xs_t = xs.t().contiguous().t()  # outer-dim-major activation scales
                                sb = _blockwise_scale_b(xq, wq, xs_t, wsc)
                                call = lambda xq=xq, wq=wq, xs_t=xs_t, sb=sb: torch._scaled_mm(  # noqa: E731
                                    xq, wq.t(), scale_a=xs_t, scale_b=sb, out_dtype=torch.bfloat16
                                )
                                ref = (  # noqa: E731
                                    lambda xq=xq, wq=wq, xs=xs, wsc=wsc, K=K, N=N: (  # noqa: E731
                                        (
                                            xq[:16].float().reshape(16, K // 128, 128) * xs[:16, :, None]
                                        ).reshape(16, K)
                                        @ (
                                            wq.float().reshape(N // 128, 128, K // 128, 128)
                                            * wsc[:, None, :, None]
                                        )
                                        .reshape(N, K)
                                        .t()
                                    )
                                )
                            calls.append(call)
                            checks.append(ref)
                        out = calls[0]()
                        mx, rel = rel_err(out[:16], checks[0]())
                        note = f"M padded to {mp}" if mp != M else ""
                        if rel >= 2e-2 and recipe == "fp8_blockwise" and (K // 128) % 4:
                            note += "; wrong result when K/128 is not a multiple of 4 (cuBLASLt blockwise)"
                        res = {"max_abs_err": mx, "rel_err": rel, "check_passed": rel < 2e-2, "note": note}
                        if res["check_passed"]:
                            res.update(_time(ctx, calls))
                        return res

                    yield guarded(ctx, base, body)


def fam_gemm_grouped(ctx: Ctx) -> Iterator[dict]:
    """MoE expert GEMMs: torch._scaled_grouped_mm (FP8 rowwise) and torch._grouped_mm (bf16), 2d × 3d."""
    gr = ctx.grid
    for model in ("V4", "V4.1"):
        dims = MODELS[model]
        cases = [
            (G0 or dims.experts, m, proj, K, N)
            for G0 in gr.grouped_groups
            for m in gr.grouped_m
            for proj, K, N in (
                ("gate_up", dims.hidden, 2 * dims.expert_inter),
                ("down", dims.expert_inter, dims.hidden),
            )
        ]
        # wo_a: 8 output groups, each 4096 -> 1024 per token (kernels.md §6.2): a grouped GEMM with m = tokens
        cases += [(8, m, "wo_a", 4096, 1024) for m in gr.dense_m]
        for G, m, proj, K, N in cases:
            if G * m > gr.grouped_max_rows:
                continue
            for recipe in ("fp8_rowwise", "bf16"):
                wb = 1 if recipe == "fp8_rowwise" else 2
                M = G * m
                base = dict(
                    family="gemm_grouped",
                    kernel=f"moe_{proj}" if proj != "wo_a" else "proj_wo_a",
                    impl="cutlass",
                    model=model,
                    layer_kind=proj,
                    fmt=recipe,
                    batch=m,
                    rows=M,
                    n=N,
                    k=K,
                    groups=G,
                    flops=shapes.gemm_flops(M, N, K),
                    bytes=G * N * K * wb + M * K * wb + M * N * 2,
                    compute_ceiling_TFLOPs=FP8_TFLOPS if wb == 1 else BF16_TFLOPS,
                )

                def body(G=G, m=m, K=K, N=N, recipe=recipe):
                    return _grouped_body(ctx, G, m, K, N, recipe)

                yield guarded(ctx, base, body)


def _grouped_body(ctx: Ctx, G: int, m: int, K: int, N: int, recipe: str) -> dict:
    dev = ctx.device
    wbytes = 1 if recipe == "fp8_rowwise" else 2
    nbuf = rotation_count(G * N * K * wbytes, max_sets=8)
    note = ""
    for pad in (m, max(16, -(-m // 16) * 16)):
        try:
            calls, refs = [], []
            offs = torch.arange(1, G + 1, device=dev, dtype=torch.int32) * pad
            for i in range(nbuf):
                g = _gen(ctx, 90 + i)
                x = torch.randn(G * pad, K, generator=g, device=dev).to(torch.bfloat16)
                # 8 distinct random experts, repeated: GB-sized weight sets without a fp32 copy of all of them
                w8 = (torch.randn(min(G, 8), N, K, generator=g, device=dev) / math.sqrt(K)).to(torch.bfloat16)
                w = w8.repeat(-(-G // w8.shape[0]), 1, 1)[:G].contiguous()
                if recipe == "bf16":
                    calls.append(
                        lambda x=x, w=w, offs=offs, pad=pad: torch._grouped_mm(
                            x, w.transpose(1, 2), offs=offs, out_dtype=torch.bfloat16
                        )
                    )
                    refs.append(lambda x=x, w=w, pad=pad: x[:pad].float() @ w[0].float().t())
                else:
                    xq, xs = _fp8_rowwise(x)
                    wf = w8.float()
                    ws8 = (wf.abs().amax(dim=2) / formats.E4M3_MAX).clamp_min(1e-12)  # [8, N]
                    reps = -(-G // w8.shape[0])
                    wq = (wf / ws8[:, :, None]).to(torch.float8_e4m3fn).repeat(reps, 1, 1)[:G].contiguous()
                    ws = ws8.repeat(reps, 1)[:G].contiguous()
                    del w
                    xs1 = xs.reshape(-1).contiguous()
                    calls.append(
                        lambda xq=xq, wq=wq, xs1=xs1, ws=ws, offs=offs: torch._scaled_grouped_mm(
                            xq, wq.transpose(1, 2), xs1, ws, offs=offs, out_dtype=torch.bfloat16
                        )
                    )
                    refs.append(
                        lambda xq=xq, xs=xs, wq=wq, ws=ws, pad=pad: (
                            (xq[:pad].float() * xs[:pad]) @ (wq[0].float() * ws[0][:, None]).t()
                        )
                    )
            out = calls[0]()
            mx, rel = rel_err(out[:pad], refs[0]())
            if pad != m:
                note = f"rows per expert padded {m} -> {pad}"
            res = {"max_abs_err": mx, "rel_err": rel, "check_passed": rel < 2e-2, "note": note}
            if res["check_passed"]:
                res.update(_time(ctx, calls))
            return res
        except RuntimeError as e:
            if pad != m:
                raise
            note = f"unpadded failed ({str(e).splitlines()[0][:80]})"
    raise RuntimeError(note)


# ---- whole decode layers (CSA / CSA2 pipelines) ------------------------------------------------------


class LayerPipeline:
    """One decode layer for B sequences at context L: cache writes, scoring, top-k, sparse attention.

    V4 CSA: FP8 indexer over L/4 keys -> top-512 -> attention over 128 window + 512 rows (FP8 584 B).
    V4 HCA: attention over 128 window + all L/128 compressed rows. SWA: attention over the window.
    V4.1 Full-enc / Full-L20: MXFP4 indexer over L/2 / L keys (L20 also: block-of-8 max and top-2048
    blocks) -> top-512 -> attention over 128 FP8-528 window + 512 NVFP4 rows. Reindex: indexer over the
    16,384 candidates of layer 20's block table -> top-512 -> attention through the block table.
    Reuse: attention only, with the owner's selection. Owners quantise-on-write their new compressed row
    and index key; every layer writes its window row.
    """

    def __init__(self, ctx: Ctx, model: str, kind: str, B: int, L: int, seed: int):
        from kernels_bench.attention_triton import SparseMLA
        from kernels_bench.topk_triton import RadixTopK

        dev = ctx.device
        g = _gen(ctx, seed)
        sk = {"CSA2": "Reuse"}.get(kind, kind)
        self.shape = shapes.layer_shape(model, sk, L)
        sh = self.shape
        self.B, self.kind, self.model = B, kind, model
        self.tune = ctx.tune
        W = shapes.WINDOW
        self.wfmt, self.cfmt = sh.window_fmt, sh.compressed_fmt
        # caches: window ring per sequence, compressed rows per sequence
        self.win = tiled_rows(self.wfmt, B * W, ctx, seed)
        self.win_idx = torch.arange(W, device=dev, dtype=torch.int32).repeat(B, 1).contiguous()
        comp_rows = {"CSA": L // 4, "HCA": L // 128, "Full-enc": L // 2}.get(kind, L)
        self.comp_rows = comp_rows if sh.compressed_entries else 0
        self.comp = tiled_rows(self.cfmt, max(1, B * self.comp_rows), ctx, seed + 1)
        self.index = None
        self.block_table = None
        self.topk = self.btopk = None
        self.sel = None
        if sh.index_keys:
            self.index = IndexerCase(ctx, model, {"CSA": "CSA"}.get(kind, kind), B, L, seed + 2)
            if kind == "Reindex":
                self.block_table = self.index.block_table
            n = self.index.n
            if n > shapes.TOPK:
                self.topk = RadixTopK(B, n, shapes.TOPK, dev)
            else:
                self.sel = torch.arange(n, device=dev, dtype=torch.int32).repeat(B, 1).contiguous()
            if kind == "Full-L20" and n // 8 > shapes.REINDEX_BLOCKS:
                self.btopk = RadixTopK(B, n // 8, shapes.REINDEX_BLOCKS, dev)
        elif sh.dense_compressed:
            self.sel = (
                torch.arange(sh.compressed_entries, device=dev, dtype=torch.int32).repeat(B, 1).contiguous()
            )
        elif sh.compressed_entries:  # Reuse: the owner's top-512 positions
            self.sel = torch.randint(
                0, self.comp_rows, (B, sh.compressed_entries), generator=g, device=dev, dtype=torch.int32
            )
        self.attn = SparseMLA(
            B,
            self.wfmt,
            sh.window_entries,
            self.cfmt,
            sh.compressed_entries,
            dev,
            **tuned(ctx.tune, "attention", f"{self.wfmt}+{self.cfmt}"),
        )
        self.q = (torch.randn(B, 64, 512, generator=g, device=dev) * 0.5).to(torch.bfloat16)
        self.sink = torch.randn(64, generator=g, device=dev)
        # this step's new rows, quantised on write
        owner = kind in ("CSA", "HCA", "Full-enc", "Full-L20")
        self.writes = [
            (
                self.wfmt,
                torch.randn(B, 512, generator=g, device=dev).to(torch.bfloat16),
                torch.arange(B, device=dev) * W,
                self.win,
            )
        ]
        if owner and self.comp_rows:
            self.writes.append(
                (
                    self.cfmt,
                    torch.randn(B, 512, generator=g, device=dev).to(torch.bfloat16),
                    torch.arange(B, device=dev) * self.comp_rows + self.comp_rows - 1,
                    self.comp,
                )
            )
        if owner and self.index is not None:
            self.writes.append(
                (
                    self.index.fmt,
                    torch.randn(B, 128, generator=g, device=dev).to(torch.bfloat16),
                    torch.arange(B, device=dev) * self.index.rows_per_seq + self.index.rows_per_seq - 1,
                    self.index.keys,
                )
            )

    def run(self):
        from kernels_bench.kvquant_triton import quantize_on_write

        for fmt, x, slots, cache in self.writes:
            quantize_on_write(fmt, x, slots, cache, **tuned(self.tune, "kvquant", fmt))
        sel = self.sel
        if self.index is not None:
            logits, bmax = self.index.run(tuned(self.tune, "indexer", self.index.fmt))
            if self.topk is not None:
                sel = self.topk(logits)
            if self.btopk is not None:
                self.btopk(bmax)
        return self.attn(
            self.q,
            self.win,
            self.win_idx,
            self.comp,
            sel,
            self.sink,
            rows_per_seq_a=shapes.WINDOW,
            rows_per_seq_b=self.comp_rows,
            block_table=self.block_table,
        ), sel

    def check(self) -> tuple[float, float, bool]:
        out, sel = self.run()
        ok_topk = True
        if self.topk is not None:
            ok_topk = topk.topk_values_match(self.index.out[:1], sel[:1], shapes.TOPK)
        mx, rel = 0.0, 0.0
        if self.index is not None:
            mx, rel = self.index.check([0])
        srcs = [(self.wfmt, self.win, self.win_idx[:1])]
        if self.shape.compressed_entries:
            rows = sel[:1].long()
            if self.block_table is not None:
                rows = indexer.reindex_rows(self.block_table[:1], 8)[0][rows]
            srcs.append((self.cfmt, self.comp, rows))
        ref = attn_ref.sparse_mla_ref_from_pools(self.q[:1], self.sink, 1.0 / math.sqrt(512), srcs)
        amx, arel = rel_err(out[:1], ref)
        return max(mx, amx), max(rel, arel), ok_topk

    def allocated_bytes(self) -> float:
        b = self.win.numel() + self.comp.numel()
        if self.index is not None:
            b += self.index.keys.numel() + self.index.out.numel() * 4
        if self.topk is not None:
            b += self.topk.ckey.numel() * 8
        return float(b)

    def working_set(self) -> float:
        b = attn_ref.HEADS * 512 * 4.0 * self.B
        b += self.B * (
            self.shape.window_entries * formats.ROW_BYTES[self.wfmt]
            + self.shape.compressed_entries * formats.ROW_BYTES[self.cfmt]
        )
        if self.index is not None:
            b += self.index.working_set()
        return b


def pipeline_floor_us(shape, B: int) -> tuple[float, float, float]:
    """FLOPs, bytes and the sum of per-kernel roofline floors of one decode layer (kernels.md §3.3)."""
    ent = shape.window_entries + shape.compressed_entries
    af, ab = shapes.attention_flops(ent, B), shapes.attention_bytes(shapes.layer_entries_by_fmt(shape), B)
    floor = shapes.roofline_floor_us(af, ab, BF16_TFLOPS)
    flops, nbytes = af, ab
    if shape.index_keys:
        dims = MODELS[shape.model]
        f = shapes.indexer_flops(dims.index_heads, shape.index_keys, B)
        b = shapes.indexer_bytes(dims.index_key_fmt, shape.index_keys, B)
        tb = shapes.topk_bytes(shape.index_keys, B)
        floor += shapes.roofline_floor_us(f, b, FP8_TFLOPS) + shapes.roofline_floor_us(0, tb, FP8_TFLOPS)
        flops, nbytes = flops + f, nbytes + b + tb
    return flops, nbytes, floor


def fam_pipeline(ctx: Ctx) -> Iterator[dict]:
    gr = ctx.grid
    for model, kind in gr.pipeline_kinds:
        for L in gr.contexts:
            for B in gr.pipeline_batches:
                if B * L > gr.max_batch_context:
                    continue
                sk = {"CSA2": "Reuse"}.get(kind, kind)
                shape = shapes.layer_shape(model, sk, L)
                flops, nbytes, floor = pipeline_floor_us(shape, B)
                fmt = (
                    shape.window_fmt
                    if not shape.compressed_entries
                    else f"{shape.window_fmt}+{shape.compressed_fmt}"
                )
                base = dict(
                    family="pipeline",
                    kernel="decode_layer",
                    impl="triton",
                    model=model,
                    layer_kind=kind,
                    fmt=fmt,
                    batch=B,
                    context_tokens=L,
                    chunk_tokens=0,
                    rows=B,
                    n=shape.window_entries + shape.compressed_entries,
                    k=shape.index_keys,
                    flops=flops,
                    bytes=nbytes,
                    floor_us=floor,
                    compute_ceiling_TFLOPs=BF16_TFLOPS,
                    note="floor = sum of per-kernel floors (scoring, top-k, attention)",
                )

                def body(model=model, kind=kind, B=B, L=L):
                    p0 = LayerPipeline(ctx, model, kind, B, L, seed=101)
                    mx, rel, ok_topk = p0.check()
                    res = {"max_abs_err": mx, "rel_err": rel, "check_passed": bool(ok_topk and rel < 1e-2)}
                    if not ok_topk:
                        res["note"] = "top-k selection differs from torch.topk"
                    if res["check_passed"]:
                        # rotate, but never hold more than ~24 GB of caches at once
                        nbuf = min(
                            rotation_count(p0.working_set(), max_sets=8),
                            max(1, int(24e9 // p0.allocated_bytes())),
                        )
                        ps = [p0] + [
                            LayerPipeline(ctx, model, kind, B, L, seed=101 + 7 * i) for i in range(1, nbuf)
                        ]
                        res.update(_time(ctx, [p.run for p in ps]))
                    return res

                yield guarded(ctx, base, body)


FAMILIES = {
    "ceiling": fam_ceiling,
    "indexer": fam_indexer,
    "indexer_prefill": fam_indexer_prefill,
    "topk": fam_topk,
    "attention": fam_attention,
    "kvquant": fam_kvquant,
    "mhc": fam_mhc,
    "gemm_dense": fam_gemm_dense,
    "gemm_grouped": fam_gemm_grouped,
    "pipeline": fam_pipeline,
}
