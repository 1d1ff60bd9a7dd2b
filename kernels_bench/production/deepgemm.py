"""DeepGEMM's production kernels on SM90, checked and timed as production-stack rows.

What vLLM and SGLang run on Hopper for DeepSeek V3.2 / V4 (kernels.md §3.1, §6.1):

* lightning indexer: ``fp8_mqa_logits`` over a prefill chunk (one contiguous FP8 key cache, per-row
  causal key ranges, logits cleaned to -inf outside them) and ``fp8_paged_mqa_logits`` for decode
  (paged FP8 keys, 64-token blocks of 64·128 FP8 bytes then 64 fp32 scales, i.e. 132 B per key).
  On SM90 these are FP8 only, 32 or 64 heads, head dim 128 (kernels.md §3.1), so V4.1's MXFP4 keys
  run as FP8 keys there (rows say ``fp8_132``);
* MoE experts: ``m_grouped_fp8_gemm_nt_masked`` (decode, DeepEP low-latency layout: G groups of up to
  ``max_m`` rows, ``masked_m`` valid) and ``m_grouped_fp8_gemm_nt_contiguous`` (prefill, rows of all
  experts concatenated, each expert's block aligned to the M alignment);
* dense projections: ``fp8_gemm_nt`` (1×128 activation / 128×128 weight scales, bf16 out);
* mHC pre-norm GEMM: ``tf32_hc_prenorm_gemm`` (x·fnᵀ and Σx² in one pass, kernels.md §5).

The package is built from source on the device (``build_deepgemm.sh``); its JIT compiles each kernel
with nvcc at first use, so every configuration is run once before it is timed (the check does that).
References are float64 on the dequantised inputs (``kernels_bench.indexer.indexer_logits_ref`` for the
indexer), computed on the GPU at a few rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from kernels_bench import indexer, shapes
from kernels_bench.families import Ctx, _time, rel_err
from kernels_bench.production.families import _guard, prod
from kernels_bench.shapes import FP8_BLOCKWISE_TFLOPS, FP8_TFLOPS, TF32_TFLOPS
from kernels_bench.timing import rotation_count

BLOCK_KV = 64  # SM90 paged MQA logits take 64-token blocks only (DeepGEMM csrc/apis/attention.hpp)
KEY_BYTES = 128 + 4  # FP8 key + fp32 scale
KEY_FMT = "fp8_132"
INDEX_HEADS = {"V4": 64, "V4.1": 32}  # kernels.md §2
PREFILL_CHUNKS = (512, 2048, 8192)  # kernels.md §8 K1a'
PREFILL_PREV = (0, 131072, 1048576)
# layer kind -> (compression ratio of the keys it scores, models); Reindex is left to the stacks' rule 3:
# SM90 DeepGEMM has no sparse (candidate-block) MQA logits kernel (kernels.md §3.1)
DECODE_KINDS = (("V4", "CSA", 4), ("V4.1", "Full-enc", 2), ("V4.1", "Full-L20", 1))
PREFILL_KINDS = (("V4", "CSA", 4), ("V4.1", "Full-enc", 2))
TOL = 5e-3  # FP8 inputs, fp32 accumulation: the float64 reference on the dequantised inputs is ~1e-6 away


def _dg():
    from kernels_bench.production import require

    return require("deep_gemm")


def random_fp8(shape: tuple[int, ...], g: torch.Generator, device: str, scale: float = 1.0) -> torch.Tensor:
    """Random e4m3 values (never NaN codes) from a normal draw."""
    return (torch.randn(*shape, generator=g, device=device) * scale).to(torch.float8_e4m3fn)


def tiled_fp8(n_rows: int, dim: int, g: torch.Generator, device: str, block: int = 65536) -> torch.Tensor:
    """[n_rows, dim] random e4m3: one random block repeated (fast for GB-sized caches)."""
    blk = random_fp8((min(n_rows, block), dim), g, device)
    out = torch.empty(n_rows, dim, dtype=torch.float8_e4m3fn, device=device)
    for s in range(0, n_rows, blk.shape[0]):
        m = min(blk.shape[0], n_rows - s)
        out[s : s + m] = blk[:m]
    return out


# ---- indexer: prefill ----------------------------------------------------------------------------------


class PrefillCase:
    """One chunk of T query rows after Lp cached tokens; keys compressed by `ratio` (L/ratio of them)."""

    def __init__(self, heads: int, T: int, Lp: int, ratio: int, device: str, seed: int = 5):
        g = _gen_dev(device, seed)
        self.n = (Lp + T) // ratio
        self.q = random_fp8((T, heads, 128), g, device)
        self.k = tiled_fp8(self.n, 128, g, device)
        self.k_scale = torch.rand(self.n, generator=g, device=device) + 0.5
        self.w = torch.rand(T, heads, generator=g, device=device) / heads
        t = torch.arange(T, device=device, dtype=torch.int64)
        self.ks = torch.zeros(T, dtype=torch.int32, device=device)
        self.ke = ((Lp + t + 1) // ratio).to(torch.int32)  # causal: row t sees keys of tokens <= Lp + t

    def run(self) -> torch.Tensor:
        return _dg().fp8_mqa_logits(
            self.q, (self.k, self.k_scale), self.w, self.ks, self.ke, clean_logits=True
        )

    def check(self, rows: list[int], max_cols: int = 65536) -> tuple[float, float]:
        out = self.run()
        nchk = min(self.n, max_cols)
        kd = self.k[:nchk].float() * self.k_scale[:nchk, None]
        ref = indexer.indexer_logits_ref(
            self.q[rows].float(), self.w[rows], kd[None], visible=self.ke[rows].long()
        )
        return rel_err(out[rows, :nchk], ref)


def _gen_dev(device: str, seed: int) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def fam_indexer_prefill(ctx: Ctx) -> Iterator[dict]:
    for model, kind, ratio in PREFILL_KINDS:
        heads = INDEX_HEADS[model]
        for T in PREFILL_CHUNKS:
            for Lp in PREFILL_PREV:
                n = (Lp + T) // ratio
                visible = (Lp + T / 2) / ratio
                base = prod(
                    dict(
                        family="indexer",
                        kernel="indexer_prefill",
                        impl="deepgemm",
                        model=model,
                        layer_kind=kind,
                        fmt=KEY_FMT,
                        batch=1,
                        context_tokens=Lp,
                        chunk_tokens=T,
                        rows=T,
                        n=n,
                        flops=shapes.indexer_flops(heads, int(visible), T),
                        bytes=n * KEY_BYTES + 4.0 * T * n,
                        compute_ceiling_TFLOPs=FP8_TFLOPS,
                        note=f"fp8_mqa_logits, {heads} heads, causal ranges, clean_logits (2 kernels)",
                    ),
                    "deep_gemm",
                )

                def body(heads=heads, T=T, Lp=Lp, ratio=ratio):
                    c = PrefillCase(heads, T, Lp, ratio, ctx.device)
                    mx, rel = c.check(sorted({T // 2, T - 1}))
                    res = {"max_abs_err": mx, "rel_err": rel, "check_passed": rel < TOL}
                    if res["check_passed"]:
                        res.update(_time(ctx, [c.run]))
                    return res

                yield _guard(ctx, base, body)


# ---- indexer: paged decode -----------------------------------------------------------------------------


class PagedPool:
    """A fused paged FP8 key cache shared by every decode case: [blocks, 64, 1, 132] bytes, per block 64·128
    FP8 keys then 64 fp32 scales (DeepGEMM's layout). At least 4x L2 so that random blocks miss the cache."""

    def __init__(self, blocks: int, device: str, seed: int = 11):
        g = _gen_dev(device, seed)
        self.blocks = blocks
        flat = torch.empty(blocks, BLOCK_KV * KEY_BYTES, dtype=torch.uint8, device=device)
        data = tiled_fp8(blocks * BLOCK_KV, 128, g, device).view(torch.uint8).view(blocks, BLOCK_KV * 128)
        flat[:, : BLOCK_KV * 128] = data
        scales = (torch.rand(blocks, BLOCK_KV, generator=g, device=device) + 0.5).contiguous()
        flat[:, BLOCK_KV * 128 :] = scales.view(torch.uint8).view(blocks, BLOCK_KV * 4)
        self.flat = flat
        self.cache = flat.view(blocks, BLOCK_KV, 1, KEY_BYTES)

    def keys(self, block_ids: torch.Tensor, n: int) -> torch.Tensor:
        """Dequantised float32 [n, 128] keys of one sequence's blocks."""
        rows = self.flat[block_ids.long()]
        k = rows[:, : BLOCK_KV * 128].contiguous().view(torch.float8_e4m3fn).float().view(-1, 128)
        s = rows[:, BLOCK_KV * 128 :].contiguous().view(torch.float32).reshape(-1)
        return (k * s[:, None])[:n]


class PagedCase:
    """B sequences of n keys each, next_n query rows per sequence, random block tables over the pool."""

    def __init__(
        self,
        pool: PagedPool,
        heads: int,
        B: int,
        n: int,
        device: str,
        seed: int,
        next_n: int = 1,
        block_table: torch.Tensor | None = None,
    ):
        g = _gen_dev(device, seed)
        self.pool, self.n, self.B, self.next_n = pool, n, B, next_n
        nb = -(-n // BLOCK_KV)
        if block_table is None:
            perm = torch.randperm(pool.blocks, generator=g, device=device)[: B * nb]
            block_table = perm.view(B, nb).to(torch.int32)
        self.block_table = block_table
        self.q = random_fp8((B, next_n, heads, 128), g, device)
        self.w = torch.rand(B * next_n, heads, generator=g, device=device) / heads
        self.context_lens = torch.full((B, next_n), n, dtype=torch.int32, device=device)
        dg = _dg()
        self.meta = dg.get_paged_mqa_logits_metadata(self.context_lens, BLOCK_KV, dg.get_num_sms())
        self.max_context = nb * BLOCK_KV

    def run(self) -> torch.Tensor:
        return _dg().fp8_paged_mqa_logits(
            self.q, self.pool.cache, self.w, self.context_lens, self.block_table, self.meta, self.max_context
        )

    def check(self, seqs: list[int]) -> tuple[float, float]:
        out = self.run().view(self.B, self.next_n, -1)
        got, ref = [], []
        for b in seqs:
            kd = self.pool.keys(self.block_table[b], self.n)
            ref.append(
                indexer.indexer_logits_ref(
                    self.q[b].float(), self.w[b * self.next_n : (b + 1) * self.next_n], kd[None]
                )
            )
            got.append(out[b, :, : self.n])
        return rel_err(torch.cat(got), torch.cat(ref))


def fam_indexer_decode(ctx: Ctx) -> Iterator[dict]:
    gr = ctx.grid
    pool: PagedPool | None = None
    need = max(
        B * -(-L // ratio // BLOCK_KV)
        for _m, _k, ratio in DECODE_KINDS
        for L in gr.contexts
        for B in gr.batches
        if B * L <= gr.max_batch_context
    )
    for model, kind, ratio in DECODE_KINDS:
        heads = INDEX_HEADS[model]
        for L in gr.contexts:
            for B in gr.batches:
                if B * L > gr.max_batch_context:
                    continue
                n = L // ratio
                base = prod(
                    dict(
                        family="indexer",
                        kernel="indexer_decode",
                        impl="deepgemm",
                        model=model,
                        layer_kind=kind,
                        fmt=KEY_FMT,
                        batch=B,
                        context_tokens=L,
                        chunk_tokens=0,
                        rows=B,
                        n=n,
                        flops=shapes.indexer_flops(heads, n, B),
                        bytes=float(B) * n * (KEY_BYTES + 4),
                        compute_ceiling_TFLOPs=FP8_TFLOPS,
                        note=f"fp8_paged_mqa_logits, {heads} heads, next_n 1, 64-token blocks at random",
                    ),
                    "deep_gemm",
                )

                def body(heads=heads, B=B, n=n):
                    nonlocal pool
                    if pool is None:
                        blocks = max(need, int(4 * shapes.L2_BYTES // (BLOCK_KV * KEY_BYTES)) + 1)
                        pool = PagedPool(blocks, ctx.device)
                    c0 = PagedCase(pool, heads, B, n, ctx.device, seed=31)
                    mx, rel = c0.check(sorted({0, B - 1}))
                    res = {"max_abs_err": mx, "rel_err": rel, "check_passed": rel < TOL}
                    if res["check_passed"]:
                        nbuf = rotation_count(B * n * KEY_BYTES, max_sets=8)
                        cases = [c0] + [
                            PagedCase(pool, heads, B, n, ctx.device, seed=31 + i) for i in range(1, nbuf)
                        ]
                        res.update(_time(ctx, [c.run for c in cases]))
                    return res

                yield _guard(ctx, base, body)


# ---- indexer: speculative decode (verify steps) -----------------------------------------------------------

SPEC_NEXT_N = (2, 4)  # V4 MTP verifies 2 rows per sequence, V4.1 DSpark 4 (sim/config/families.py defaults)
# the SM90 kernel asserts next_n in {1, 2} (csrc/jit_kernels/impls/sm90_fp8_mqa_logits.hpp, seen on the
# H200 2026-12-04; vLLM's next_n = 1 + drafts call stops there too): 4 verify rows run expanded only
SM90_MAX_NEXT_N = 2


def expanded(case: PagedCase, heads: int, device: str) -> PagedCase:
    """SGLang's form of a verify step (nsa_indexer, target_verify): the B·next_n rows as B·next_n sequences
    of next_n 1, each row reading its sequence's blocks again (the block table repeated per row)."""
    bt = case.block_table.repeat_interleave(case.next_n, dim=0)
    return PagedCase(case.pool, heads, case.B * case.next_n, case.n, device, seed=97, block_table=bt)


def fam_indexer_decode_spec(ctx: Ctx) -> Iterator[dict]:
    """``fp8_paged_mqa_logits`` with next_n query rows per sequence (vLLM's call in a verify step: q
    [B, next_n, H, D], each sequence's keys read once for its next_n rows; SM90 takes next_n <= 2), and
    beside it the same rows expanded to B·next_n sequences of next_n 1 (SGLang's call, impl
    ``deepgemm_expanded``, the only form for 4 rows on SM90)."""
    gr = ctx.grid
    pool: PagedPool | None = None
    need = max(  # the expanded form repeats a sequence's blocks per row: it needs no more
        B * -(-L // ratio // BLOCK_KV)
        for _m, _k, ratio in DECODE_KINDS
        for L in gr.contexts
        for B in gr.batches
        if B * L <= gr.max_batch_context
    )
    for next_n in SPEC_NEXT_N:
        for model, kind, ratio in DECODE_KINDS:
            heads = INDEX_HEADS[model]
            for L in gr.contexts:
                for B in gr.batches:
                    if B * L > gr.max_batch_context:
                        continue
                    n = L // ratio
                    rows = B * next_n
                    common = dict(
                        family="indexer",
                        kernel="indexer_decode_spec",
                        model=model,
                        layer_kind=kind,
                        fmt=KEY_FMT,
                        batch=B,
                        context_tokens=L,
                        chunk_tokens=0,
                        rows=rows,
                        n=n,
                        k=next_n,
                        flops=shapes.indexer_flops(heads, n, rows),
                        compute_ceiling_TFLOPs=FP8_TFLOPS,
                    )
                    state: dict = {}

                    def make_cases(heads=heads, B=B, n=n, next_n=next_n) -> list[PagedCase]:
                        nonlocal pool
                        if pool is None:
                            blocks = max(need, int(4 * shapes.L2_BYTES // (BLOCK_KV * KEY_BYTES)) + 1)
                            pool = PagedPool(blocks, ctx.device)
                        nbuf = rotation_count(B * n * KEY_BYTES, max_sets=8)
                        return [
                            PagedCase(pool, heads, B, n, ctx.device, seed=31 + i, next_n=next_n)
                            for i in range(nbuf)
                        ]

                    def native(B=B, make_cases=make_cases, state=state):
                        cases = state["cases"] = make_cases()
                        mx, rel = cases[0].check(sorted({0, B - 1}))
                        res = {"max_abs_err": mx, "rel_err": rel, "check_passed": rel < TOL}
                        if res["check_passed"]:
                            res.update(_time(ctx, [c.run for c in cases]))
                        return res

                    def flat(heads=heads, make_cases=make_cases, state=state):
                        # the expanded rows read the blocks of the same sequences (made here where the
                        # native call cannot run: next_n > 2; their queries are never run unexpanded)
                        cases = [
                            expanded(c, heads, ctx.device) for c in state.pop("cases", None) or make_cases()
                        ]
                        mx, rel = cases[0].check(sorted({0, cases[0].B - 1}))
                        res = {"max_abs_err": mx, "rel_err": rel, "check_passed": rel < TOL}
                        if res["check_passed"]:
                            res.update(_time(ctx, [c.run for c in cases]))
                        return res

                    if next_n <= SM90_MAX_NEXT_N:
                        yield _guard(
                            ctx,
                            prod(
                                dict(
                                    common,
                                    impl="deepgemm",
                                    bytes=float(B) * n * KEY_BYTES + 4.0 * rows * n,
                                    note=f"fp8_paged_mqa_logits, {heads} heads, next_n {next_n} (vLLM's verify "
                                    "call), 64-token blocks at random",
                                ),
                                "deep_gemm",
                            ),
                            native,
                        )
                    yield _guard(
                        ctx,
                        prod(
                            dict(
                                common,
                                impl="deepgemm_expanded",
                                # the same unique key bytes: a sequence's rows re-read its blocks from L2
                                bytes=float(B) * n * KEY_BYTES + 4.0 * rows * n,
                                note=f"fp8_paged_mqa_logits, {heads} heads, the B x next_n {next_n} rows as "
                                "sequences of next_n 1 (SGLang's verify call), the rows of a "
                                "sequence reading its blocks",
                            ),
                            "deep_gemm",
                        ),
                        flat,
                    )


# ---- GEMMs ---------------------------------------------------------------------------------------------


def _per_token_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[..., M, K] -> FP8 and fp32 scales per 1×128 (DeepGEMM's activation recipe on SM90)."""
    *lead, m, k = x.shape
    v = x.float().reshape(*lead, m, k // 128, 128)
    s = v.abs().amax(-1).clamp(min=1e-4) / 448.0
    return (v / s[..., None]).to(torch.float8_e4m3fn).reshape(*lead, m, k), s


def _per_block_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[..., N, K] -> FP8 and fp32 scales per 128×128 block (the checkpoints' weight recipe)."""
    *lead, n, k = x.shape
    v = x.float().reshape(*lead, n // 128, 128, k // 128, 128)
    s = v.abs().amax(dim=(-3, -1)).clamp(min=1e-4) / 448.0
    q = (v / s[..., None, :, None]).to(torch.float8_e4m3fn).reshape(*lead, n, k)
    return q, s


def _deq_token(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    *lead, m, k = q.shape
    return (q.float().reshape(*lead, m, k // 128, 128) * s[..., None]).reshape(*lead, m, k)


def _deq_block(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    *lead, n, k = q.shape
    v = q.float().reshape(*lead, n // 128, 128, k // 128, 128) * s[..., None, :, None]
    return v.reshape(*lead, n, k)


def _gemm_base(family, kernel, model, kind, M, N, K, G, m_per_group, note, impl="deepgemm"):
    flops = 2.0 * M * N * K
    weights = float(G or 1) * N * K
    return prod(
        dict(
            family=family,
            kernel=kernel,
            impl=impl,
            model=model,
            layer_kind=kind,
            fmt="fp8_blockwise",
            batch=m_per_group if G else M,
            rows=M,
            n=N,
            k=K,
            groups=G or "",
            flops=flops,
            bytes=weights + float(M) * K + 2.0 * M * N,
            compute_ceiling_TFLOPs=FP8_BLOCKWISE_TFLOPS,
            note=note,
        ),
        "deep_gemm",
    )


class DenseCase:
    def __init__(self, M: int, N: int, K: int, device: str, seed: int):
        g = _gen_dev(device, seed)
        self.a = _per_token_fp8(torch.randn(M, K, generator=g, device=device))
        self.b = _per_block_fp8(torch.randn(N, K, generator=g, device=device))
        self.d = torch.empty(M, N, dtype=torch.bfloat16, device=device)

    def run(self) -> None:
        _dg().fp8_gemm_nt(self.a, self.b, self.d)

    def check(self, rows: list[int]) -> tuple[float, float]:
        self.d.fill_(float("nan"))
        self.run()
        ref = _deq_token(self.a[0][rows], self.a[1][rows]).double() @ _deq_block(*self.b).double().T
        return rel_err(self.d[rows].float(), ref)

    def working_set(self) -> float:
        return float(self.b[0].numel() + self.a[0].numel() + 2 * self.d.numel())


class MaskedCase:
    """Decode experts: G groups, m valid rows each (DeepEP low-latency layout, max_m = the padded m)."""

    def __init__(self, G: int, m: int, N: int, K: int, device: str, seed: int):
        g = _gen_dev(device, seed)
        self.max_m = max(64, -(-m // 64) * 64)
        self.m = m
        self.a = _per_token_fp8(torch.randn(G, self.max_m, K, generator=g, device=device))
        self.b = _per_block_fp8(torch.randn(G, N, K, generator=g, device=device))
        self.d = torch.empty(G, self.max_m, N, dtype=torch.bfloat16, device=device)
        self.masked_m = torch.full((G,), m, dtype=torch.int32, device=device)

    def run(self) -> None:
        _dg().m_grouped_fp8_gemm_nt_masked(self.a, self.b, self.d, self.masked_m, self.m)

    def check(self, groups: list[int]) -> tuple[float, float]:
        self.d.fill_(float("nan"))
        self.run()
        got, ref = [], []
        for gi in groups:
            a = _deq_token(self.a[0][gi, : self.m], self.a[1][gi, : self.m]).double()
            ref.append(a @ _deq_block(self.b[0][gi], self.b[1][gi]).double().T)
            got.append(self.d[gi, : self.m].float())
        return rel_err(torch.cat(got), torch.cat(ref))

    def working_set(self) -> float:
        return float(self.b[0].numel() + self.a[0].numel() + 2 * self.d.numel())


class ContiguousCase:
    """Prefill experts: G groups of m rows each, concatenated, each block aligned to DeepGEMM's M alignment."""

    def __init__(self, G: int, m: int, N: int, K: int, device: str, seed: int):
        dg = _dg()
        g = _gen_dev(device, seed)
        align = dg.get_mk_alignment_for_contiguous_layout()
        self.m, self.step = m, -(-m // align) * align
        M = G * self.step
        x = torch.randn(M, K, generator=g, device=device)
        layout = torch.full((G, self.step), -1, dtype=torch.int32, device=device)
        layout[:, :m] = torch.arange(G, dtype=torch.int32, device=device)[:, None]
        x.view(G, self.step, K)[:, m:] = 0
        self.layout = layout.reshape(-1)
        self.a = _per_token_fp8(x)
        self.b = _per_block_fp8(torch.randn(G, N, K, generator=g, device=device))
        self.d = torch.empty(M, N, dtype=torch.bfloat16, device=device)

    def run(self) -> None:
        _dg().m_grouped_fp8_gemm_nt_contiguous(self.a, self.b, self.d, self.layout)

    def check(self, groups: list[int]) -> tuple[float, float]:
        self.d.fill_(float("nan"))
        self.run()
        got, ref = [], []
        for gi in groups:
            r = slice(gi * self.step, gi * self.step + self.m)
            a = _deq_token(self.a[0][r], self.a[1][r]).double()
            ref.append(a @ _deq_block(self.b[0][gi], self.b[1][gi]).double().T)
            got.append(self.d[r].float())
        return rel_err(torch.cat(got), torch.cat(ref))

    def working_set(self) -> float:
        return float(self.b[0].numel() + self.a[0].numel() + 2 * self.d.numel())


GEMM_TOL = 2e-2  # FP8 inputs both sides, bf16 output: ~4e-3 typical (kernels_bench's cuBLAS rows use 2e-2)


def _checked_timed(
    ctx: Ctx, make: Callable[[int], object], check_at: list[int], tol: float = GEMM_TOL
) -> dict:
    """Check one case against float64, then time it rotated over buffer sets spanning >= 4x L2."""
    c0 = make(41)
    mx, rel = c0.check(check_at)
    res = {"max_abs_err": mx, "rel_err": rel, "check_passed": rel < tol}
    if res["check_passed"]:
        nbuf = rotation_count(c0.working_set(), max_sets=8)
        cases = [c0] + [make(41 + i) for i in range(1, nbuf)]
        res.update(_time(ctx, [c.run for c in cases]))
    return res


# (kernel, layer kind, N, K) per model: routed expert SwiGLU, kernels.md §6.2
MOE_SHAPES = {
    "V4": (("moe_gate_up", "gate_up", 4096, 4096), ("moe_down", "down", 4096, 2048)),
    "V4.1": (("moe_gate_up", "gate_up", 4608, 5120), ("moe_down", "down", 5120, 2304)),
}
MOE_GROUPS = (6, 32, 128, 256)
MOE_M = (1, 8, 32, 128, 512, 2048)
MASKED_MAX_M = 128  # above this the prefill (contiguous) kernel is the one engines run
MAX_GEMM_BYTES = 24e9


def fam_moe(ctx: Ctx) -> Iterator[dict]:
    for model, kernels in MOE_SHAPES.items():
        for kernel, kind, N, K in kernels:
            for G in MOE_GROUPS:
                for m in MOE_M:
                    masked = m <= MASKED_MAX_M
                    rows = G * max(m, 64 if masked else m)
                    if float(G) * N * K + 3.0 * rows * max(N, K) > MAX_GEMM_BYTES:
                        continue
                    api = "m_grouped_fp8_gemm_nt_masked" if masked else "m_grouped_fp8_gemm_nt_contiguous"
                    base = _gemm_base("gemm_grouped", kernel, model, kind, G * m, N, K, G, m, api)
                    case = MaskedCase if masked else ContiguousCase

                    def body(G=G, m=m, N=N, K=K, case=case):
                        return _checked_timed(
                            ctx, lambda s: case(G, m, N, K, ctx.device, s), sorted({0, G - 1})
                        )

                    yield _guard(ctx, base, body)


# dense projections (kernels.md §6.2): layer kind -> (N, K) per model; the same names as kernels_bench's rows
DENSE_SHAPES = {
    "V4": {
        "wq_a": (1024, 4096),
        "wq_b": (32768, 1024),
        "wkv": (512, 4096),
        "wo_b": (4096, 8192),
        "index_q": (8192, 1024),
        "shared_gate_up": (4096, 4096),
        "shared_down": (4096, 2048),
        "compressor_csa": (2048, 4096),
    },
    "V4.1": {
        "wq_a": (1280, 5120),
        "wq_b": (32768, 1280),
        "wkv": (512, 5120),
        "wo_b": (5120, 8192),
        "index_q": (4096, 1280),
        "shared_gate_up": (4608, 5120),
        "shared_down": (5120, 2304),
        "compressor_r2": (1024, 5120),
    },
}
DENSE_M = (1, 8, 32, 128, 512, 2048, 8192)


def fam_dense(ctx: Ctx) -> Iterator[dict]:
    for model, projs in DENSE_SHAPES.items():
        for kind, (N, K) in projs.items():
            for M in DENSE_M:
                base = _gemm_base("gemm_dense", f"proj_{kind}", model, kind, M, N, K, None, M, "fp8_gemm_nt")

                def body(M=M, N=N, K=K):
                    return _checked_timed(
                        ctx, lambda s: DenseCase(M, N, K, ctx.device, s), sorted({0, M - 1})
                    )

                yield _guard(ctx, base, body)


# ---- wo_a: the grouped output projection ------------------------------------------------------------------

WO_A_GROUPS, WO_A_IN, WO_A_OUT = 8, 4096, 1024  # kernels.md §6.2: 8 groups, 4096 -> 1024 each, both models


class WoACase:
    """``fp8_einsum("bhr,hdr->bhd")``: M tokens x 8 groups, 1×128 activation and 128×128 weight scales
    (the shape DeepGEMM's own test of this expression uses: h, r, d = 8, 4096, 1024)."""

    def __init__(self, M: int, device: str, seed: int):
        g = _gen_dev(device, seed)
        self.a = _per_token_fp8(torch.randn(M, WO_A_GROUPS, WO_A_IN, generator=g, device=device))
        self.b = _per_block_fp8(torch.randn(WO_A_GROUPS, WO_A_OUT, WO_A_IN, generator=g, device=device))
        self.d = torch.empty(M, WO_A_GROUPS, WO_A_OUT, dtype=torch.bfloat16, device=device)

    def run(self) -> None:
        _dg().fp8_einsum("bhr,hdr->bhd", self.a, self.b, self.d)

    def check(self, rows: list[int]) -> tuple[float, float]:
        self.d.fill_(float("nan"))
        self.run()
        a = _deq_token(self.a[0][rows], self.a[1][rows]).double()  # [R, h, r]
        ref = torch.einsum("bhr,hdr->bhd", a, _deq_block(*self.b).double())
        return rel_err(self.d[rows].float(), ref)

    def working_set(self) -> float:
        return float(self.b[0].numel() + self.a[0].numel() + 2 * self.d.numel())


def fam_wo_a(ctx: Ctx) -> Iterator[dict]:
    for model in ("V4", "V4.1"):
        for M in DENSE_M:
            base = _gemm_base(
                "gemm_grouped",
                "proj_wo_a",
                model,
                "wo_a",
                M * WO_A_GROUPS,
                WO_A_OUT,
                WO_A_IN,
                WO_A_GROUPS,
                M,
                "fp8_einsum bhr,hdr->bhd (1x128 / 128x128 scales)",
            )

            def body(M=M):
                return _checked_timed(ctx, lambda s: WoACase(M, ctx.device, s), sorted({0, M - 1}))

            yield _guard(ctx, base, body)


# ---- mHC pre-norm GEMM ---------------------------------------------------------------------------------

HC_K = {"V4": 4 * 4096, "V4.1": 4 * 5120}  # kernels.md §6.2: the fn input is the n = 4 streams
HC_N = 24
HC_M = (1, 8, 64, 512, 4096, 32768)
HC_SPLITS = 16  # split-K below HC_SPLIT_MAX_M rows (DeepGEMM's test case); the split partials are summed
HC_SPLIT_MAX_M = 4096


class PrenormCase:
    """x·fnᵀ and Σx² for M rows of K = 4·hidden; split-K (then a sum over the splits) for small M, where one
    CTA per 64 rows would leave the GPU idle."""

    def __init__(self, M: int, K: int, device: str, seed: int):
        g = _gen_dev(device, seed)
        self.splits = HC_SPLITS if M <= HC_SPLIT_MAX_M else None
        lead = (self.splits,) if self.splits else ()
        self.a = torch.randn(M, K, generator=g, device=device).to(torch.bfloat16)
        self.b = torch.randn(HC_N, K, generator=g, device=device)
        self.d = torch.empty(*lead, M, HC_N, device=device)
        self.s = torch.empty(*lead, M, device=device)

    def run(self) -> tuple[torch.Tensor, torch.Tensor]:
        _dg().tf32_hc_prenorm_gemm(self.a, self.b, self.d, self.s, num_splits=self.splits)
        if self.splits:
            return self.d.sum(0), self.s.sum(0)
        return self.d, self.s

    def check(self, rows: list[int]) -> tuple[float, float]:
        self.d.fill_(float("nan"))
        d, s = self.run()
        a = self.a[rows].double()
        ref = torch.cat([a @ self.b.double().T, a.square().sum(-1, keepdim=True)], dim=1)
        got = torch.cat([d[rows], s[rows, None]], dim=1)
        return rel_err(got, ref)

    def working_set(self) -> float:
        return float(self.a.numel() * 2 + self.b.numel() * 4 + self.d.numel() * 4)


def fam_hc_prenorm(ctx: Ctx) -> Iterator[dict]:
    for model, K in HC_K.items():
        for M in HC_M:
            split = f"{HC_SPLITS} K-splits summed by torch" if M <= HC_SPLIT_MAX_M else "no split"
            base = prod(
                dict(
                    family="mhc",
                    kernel="mhc_prenorm_gemm",
                    impl="deepgemm",
                    model=model,
                    layer_kind="boundary-part",
                    fmt="bf16+fp32",
                    batch=M,
                    rows=M,
                    n=HC_N,
                    k=K,
                    flops=2.0 * M * HC_N * K,
                    bytes=2.0 * M * K + 4.0 * HC_N * K + 4.0 * M * (HC_N + 1),
                    compute_ceiling_TFLOPs=TF32_TFLOPS,
                    note=f"tf32_hc_prenorm_gemm (x·fnᵀ and Σx² in one pass), {split}",
                ),
                "deep_gemm",
            )

            def body(M=M, K=K):
                return _checked_timed(
                    ctx, lambda s: PrenormCase(M, K, ctx.device, s), sorted({0, M - 1}), 1e-3
                )

            yield _guard(ctx, base, body)


FAMILIES = {
    "dg_indexer_prefill": fam_indexer_prefill,
    "dg_indexer_decode": fam_indexer_decode,
    "dg_indexer_decode_spec": fam_indexer_decode_spec,
    "dg_moe": fam_moe,
    "dg_dense": fam_dense,
    "dg_wo_a": fam_wo_a,
    "dg_hc_prenorm": fam_hc_prenorm,
}


def warm(names: list[str], device: str = "cuda") -> None:
    """Run each kernel family once at a small shape so that its JIT kernels are compiled into the cache
    (one process per family in parallel, see device_call_deepgemm.sh)."""
    for name in names:
        if name == "dg_indexer_prefill":
            for heads in set(INDEX_HEADS.values()):
                PrefillCase(heads, 512, 4096, 4, device).run()
        elif name in ("dg_indexer_decode", "dg_indexer_decode_spec"):
            pool = PagedPool(256, device)
            for heads in set(INDEX_HEADS.values()):
                for next_n in (1,) if name == "dg_indexer_decode" else (SM90_MAX_NEXT_N,):
                    PagedCase(pool, heads, 2, 1024, device, 1, next_n=next_n).run()
        elif name.startswith("dg_moe:"):
            _, model, kernel = name.split(":")
            for k_, _kind, N, K in MOE_SHAPES[model]:
                if k_ == kernel:
                    for m in (1, 8, 32, 128):
                        MaskedCase(4, m, N, K, device, 1).run()
                    for m in (512, 2048):
                        ContiguousCase(4, m, N, K, device, 1).run()
        elif name.startswith("dg_dense:"):
            _, model, kind = name.split(":")
            N, K = DENSE_SHAPES[model][kind]
            for M in DENSE_M:
                DenseCase(M, N, K, device, 1).run()
        elif name == "dg_wo_a":
            for M in DENSE_M:
                WoACase(M, device, 1).run()
        elif name == "dg_hc_prenorm":
            for K in HC_K.values():
                for M in HC_M:
                    PrenormCase(M, K, device, 1).run()
        torch.cuda.synchronize()


def warm_units() -> list[str]:
    """The independent warm-up units (one JIT family each), for parallel compilation."""
    units = ["dg_indexer_prefill", "dg_indexer_decode", "dg_indexer_decode_spec", "dg_wo_a", "dg_hc_prenorm"]
    units += [f"dg_moe:{m}:{k[0]}" for m, ks in MOE_SHAPES.items() for k in ks]
    units += [f"dg_dense:{m}:{kind}" for m, projs in DENSE_SHAPES.items() for kind in projs]
    return units
