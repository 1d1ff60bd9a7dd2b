"""The forward pass's routed experts against DeepGEMM's at the same shapes (issue 29: the forward-pass term's MoE).

`kernels_bench.production.forward` runs a layer's routed experts through `torch._scaled_grouped_mm` (rowwise
FP8, every resident expert a group), and the pass measures them at 1.5-3.3x what sim composes from its
DeepGEMM grouped tables at the same shapes (docs/engines_and_validation.md, section 8). The forward-pass
term (sim.timing.forward) carries that excess into every step. This benchmark times both kernels on the
pass's own MoE inputs: the pass's router and routing (`route_tokens`, its seed), 32 resident experts of
V4-Flash's shape (hidden 4096, inter 2048), top-6, at the pass's decode batches and prefill chunks, and
writes one row per point and kernel:

- `torch_grouped`: gate_up + down through `torch._scaled_grouped_mm` on the rows sorted by expert, as the
  pass runs them (activations quantised beforehand: only the two GEMMs are timed);
- `torch_grouped_in_call`: the same through `GpuKernels.grouped` itself, what the pass books under `moe`:
  each call's rowwise activation quantisation (separate torch ops) and offsets, then the GEMM;
- `deepgemm`: gate_up + down through DeepGEMM, the layout a serving engine hands it: `m_grouped_fp8_gemm_nt_masked`
  (DeepEP low-latency layout, each expert's rows padded to a common `max_m`) for decode batches,
  `m_grouped_fp8_gemm_nt_contiguous` (each expert's rows aligned to DeepGEMM's M alignment) for prefill chunks;
  per-token 1x128 activation and 128x128 weight scales.

Each result is checked against a float64 reference of the same quantised operands before it is timed.

    python3 -m kernels_bench.production.moe_grouped --out DIR [--commit SHA]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import torch

from kernels_bench.production.forward import Dims, act_quant_rowwise, quant_weight_grouped, route_tokens
from kernels_bench.timing import time_calls

EXPERTS, TOP_K = 32, 6  # the forward pass's resident experts and V4-Flash's top-k (production.forward)
POINTS = (("decode", 1), ("decode", 8), ("decode", 64), ("decode", 256), ("prefill", 512), ("prefill", 4096))
COLUMNS = ("mode", "rows", "routed_rows", "experts_touched", "kernel", "gemm_us_p50", "gemm_us_p10", "gemm_us_p90",
           "rel_err", "timing_method")  # fmt: skip


def _routing(rows: int, d: Dims, seed: int, device: str):
    """The pass's routing of `rows` random tokens: (gathered rows [R, H], counts per expert [E])."""
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(rows, d.hidden, generator=g, device=device, dtype=torch.bfloat16)
    w_router = (
        torch.randn(d.hidden, EXPERTS, generator=g, device=device, dtype=torch.bfloat16) / d.hidden**0.5
    )
    _tok, _w, counts, xs = route_tokens(x, w_router, EXPERTS, TOP_K)
    return xs, counts


def _torch_case(xs, counts, gate_up, down, inter: int, *, in_call: bool = False):
    """The pass's two grouped GEMMs. `in_call`: each with its rowwise activation quantisation and offsets in
    one call (`GpuKernels.grouped`, as the pass booked them under `moe` until its quantisation became an op of
    its own); else the operands are quantised once outside the timed call."""
    from kernels_bench.production.forward import GpuKernels

    offs = torch.cumsum(counts, 0).to(torch.int32)
    xq, xsc = act_quant_rowwise(xs)
    gu = torch._scaled_grouped_mm(
        xq, gate_up.q.transpose(1, 2), xsc.view(-1), gate_up.s, offs=offs, out_dtype=torch.bfloat16
    )
    a = gu[:, :inter].contiguous()
    aq, asc = act_quant_rowwise(a)

    k = GpuKernels.__new__(GpuKernels)  # grouped reads nothing of the instance: no FlashMLA / DeepGEMM import

    def run():
        if in_call:  # quantisation and GEMM as one call (the pass before its quantisation became an op)
            k.grouped(xs, gate_up, counts)
            return k.grouped(a, down, counts)
        torch._scaled_grouped_mm(xq, gate_up.q.transpose(1, 2), xsc.view(-1), gate_up.s, offs=offs,
                                 out_dtype=torch.bfloat16)  # fmt: skip
        return torch._scaled_grouped_mm(aq, down.q.transpose(1, 2), asc.view(-1), down.s, offs=offs,
                                        out_dtype=torch.bfloat16)  # fmt: skip

    def ref() -> tuple[torch.Tensor, torch.Tensor]:
        got = run().float()
        a = aq.double() * asc.double()
        out, start = torch.empty_like(got, dtype=torch.float64), 0
        for e, c in enumerate(counts.tolist()):
            w = down.q[e].double() * down.s[e].double()[:, None]
            out[start : start + c] = a[start : start + c] @ w.t()
            start += c
        return got, out

    return run, ref


def _deepgemm_case(xs, counts, gate_up_w, down_w, mode: str, inter: int):
    """DeepGEMM's two grouped GEMMs in the layout a serving engine hands them (module doc)."""
    from kernels_bench.production.deepgemm import _deq_block, _deq_token, _dg, _per_block_fp8, _per_token_fp8

    dg = _dg()
    E, H = EXPERTS, xs.shape[1]
    bg = _per_block_fp8(gate_up_w)  # [E, 2I, H]
    bd = _per_block_fp8(down_w)  # [E, H, I]
    cl = counts.tolist()
    if mode == "decode":
        max_m = max(64, -(-max(cl) // 64) * 64)
        x = torch.zeros(E, max_m, H, dtype=torch.bfloat16, device=xs.device)
        start = 0
        for e, c in enumerate(cl):
            x[e, :c] = xs[start : start + c]
            start += c
        masked = counts.to(torch.int32)
        expected = max(1, -(-sum(cl) // E))
        a = _per_token_fp8(x)
        gu = torch.empty(E, max_m, bg[0].shape[1], dtype=torch.bfloat16, device=xs.device)
        dg.m_grouped_fp8_gemm_nt_masked(a, bg, gu, masked, expected)
        a2 = _per_token_fp8(gu[..., :inter].contiguous())
        out = torch.empty(E, max_m, H, dtype=torch.bfloat16, device=xs.device)

        def run():
            dg.m_grouped_fp8_gemm_nt_masked(a, bg, gu, masked, expected)
            dg.m_grouped_fp8_gemm_nt_masked(a2, bd, out, masked, expected)
            return out

        def rows_of(t, e):
            return t[e, : cl[e]]

    else:
        align = dg.get_mk_alignment_for_contiguous_layout()
        steps = [-(-c // align) * align for c in cl]
        M = sum(steps)
        x = torch.zeros(M, H, dtype=torch.bfloat16, device=xs.device)
        layout = torch.full((M,), -1, dtype=torch.int32, device=xs.device)
        starts, pos, src = [], 0, 0
        for e, (c, s) in enumerate(zip(cl, steps, strict=True)):
            x[pos : pos + c] = xs[src : src + c]
            layout[pos : pos + c] = e
            starts.append(pos)
            pos, src = pos + s, src + c
        a = _per_token_fp8(x)
        gu = torch.empty(M, bg[0].shape[1], dtype=torch.bfloat16, device=xs.device)
        dg.m_grouped_fp8_gemm_nt_contiguous(a, bg, gu, layout)
        a2 = _per_token_fp8(gu[:, :inter].contiguous())
        out = torch.empty(M, H, dtype=torch.bfloat16, device=xs.device)

        def run():
            dg.m_grouped_fp8_gemm_nt_contiguous(a, bg, gu, layout)
            dg.m_grouped_fp8_gemm_nt_contiguous(a2, bd, out, layout)
            return out

        def rows_of(t, e):
            return t[starts[e] : starts[e] + cl[e]]

    def ref() -> tuple[torch.Tensor, torch.Tensor]:
        got = run()
        g_rows, r_rows = [], []
        for e in (i for i, c in enumerate(cl) if c):
            act = _deq_token(rows_of(a2[0], e), rows_of(a2[1], e)).double()
            r_rows.append(act @ _deq_block(bd[0][e], bd[1][e]).double().t())
            g_rows.append(rows_of(got, e).float())
        return torch.cat(g_rows), torch.cat(r_rows)

    return run, ref


def _rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    return float((got.double() - ref).norm() / ref.norm().clamp_min(1e-30))


def measure(out: Path, commit: str | None, seed: int = 7) -> list[dict]:
    from kernels_bench.production.run import production_provenance

    device, d = "cuda", Dims()
    g = torch.Generator(device=device).manual_seed(seed)
    gate_up_w = torch.randn(EXPERTS, 2 * d.inter, d.hidden, generator=g, device=device) / d.hidden**0.5
    down_w = torch.randn(EXPERTS, d.hidden, d.inter, generator=g, device=device) / d.inter**0.5
    gate_up, down = quant_weight_grouped(gate_up_w), quant_weight_grouped(down_w)
    rows = []
    for mode, n in POINTS:
        xs, counts = _routing(n, d, seed + n, device)
        for kernel, (run, ref) in (
            ("torch_grouped", _torch_case(xs, counts, gate_up, down, d.inter)),
            ("torch_grouped_in_call", _torch_case(xs, counts, gate_up, down, d.inter, in_call=True)),
            ("deepgemm", _deepgemm_case(xs, counts, gate_up_w, down_w, mode, d.inter)),
        ):
            err = _rel_err(*ref())
            t = time_calls([run])
            rows.append(
                {
                    "mode": mode,
                    "rows": n,
                    "routed_rows": int(counts.sum()),
                    "kernel": kernel,
                    "experts_touched": int((counts > 0).sum()),
                    "gemm_us_p50": round(t.median_us, 2),
                    "gemm_us_p10": round(t.p10_us, 2),
                    "gemm_us_p90": round(t.p90_us, 2),
                    "rel_err": f"{err:.2e}",
                    "timing_method": t.method,
                }  # fmt: skip
            )
            print(f"{mode:7s} {n:5d} {kernel:14s} {t.median_us:9.1f} us  rel_err {err:.1e}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "moe_grouped_results.csv"
    with path.open("w", newline="") as f:
        for k, v in production_provenance(commit).items():
            f.write(f"# {k}: {json.dumps(v) if isinstance(v, dict | list) else v}\n")
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="kernels_bench.production.moe_grouped", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--commit", default=None)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA GPU and DeepGEMM (README, Kernels)", file=sys.stderr)
        return 2
    measure(args.out, args.commit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
