"""FlashInfer's SM90 W4A16 MXFP4 MoE (the CUTLASS mixed-input grouped GEMM), timed as one MoE layer on one GPU
(issue 29, docs/engines_and_validation.md section 59).

What runs the MXFP4 experts on Hopper where an engine does not pick Marlin: SGLang `--moe-runner-backend
flashinfer_mxfp4` (SM90: `Mxfp4FlashinferCutlassMoEMethod`) and vLLM `--moe-backend flashinfer_cutlass`
(`FLASHINFER_CUTLASS_MXFP4_BF16`) both call FlashInfer's `cutlass_fused_moe(..., use_w4_group_scaling=True)`: BF16
activations, MXFP4 weights (E2M1 values, one UE8M0 scale per 32) up-converted in registers, BF16 WGMMAs, the
routing's permutation, SwiGLU and the weighted combine fused around the two grouped GEMMs. sim times those experts
as the measured module of this kernel (sim.timing.engine_moe, `cluster.pools[].moe_runner: flashinfer_cutlass`)
from the rows this writes, at the shapes sim serves (V4-Flash and V4.1-Flash) and the EP sizes of the deployments.

Per point: `tokens` tokens of the whole EP group, each routed to `top_k` experts, spread evenly over all experts
(balanced, as sim routes); the GPU is EP rank 0 and holds `experts / ep` of them, running the pairs routed there,
or with expert TP (`tp` > 1, TP without EP) a 1/`tp` slice of every expert's intermediate dimension.
Weights and scales are random (bits do not change a GEMM's time), prepared as the engines prepare them at load
(`interleave_moe_weights_for_sm90_mixed_gemm`, `interleave_moe_scales_for_sm90_mixed_gemm`). FlashInfer's autotuner
picks the tactics first (SGLang tunes at start-up unless `--disable-flashinfer-autotune`), then the call is
captured in a CUDA graph (decode runs it so) and the median of repeated replays is taken. Before any timing, one
small call is checked against an FP32 reference built from the same MXFP4 bits.

    python3 -m kernels_bench.production.fi_w4a16_moe --out DIR [--commit SHA] [--budget-s S]

Needs FlashInfer (0.7.4 here; not a dependency of sim: the device call carries it) and an SM90 GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import NamedTuple

import torch

FP4_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
GROUP = 32  # MXFP4: one UE8M0 scale per 32 weights along K
COLUMNS = (
    "hidden",
    "intermediate",
    "experts",
    "top_k",
    "ep",
    "tp",
    "tokens",
    "time_us",
    "samples",
    "method",
    "check",
    "note",
)


class Shape(NamedTuple):
    """A model's routed experts: `experts` of hidden x intermediate (SwiGLU: fc1 is 2 x intermediate), top_k a token."""

    model: str
    hidden: int
    intermediate: int
    experts: int
    top_k: int


# model.md §3 (V4-Flash) and the V4.1 spec's moe block (sim/model/specs): the shapes sim serves
V4 = Shape("deepseek-v4-flash", 4096, 2048, 256, 6)
V41 = Shape("deepseek-v4.1-flash", 5120, 2304, 384, 6)
SHAPES = (V4, V41)


class Split(NamedTuple):
    """How one GPU holds the experts: `experts / ep` of them (EP), each as a 1/`tp` slice of its intermediate
    dimension (expert TP: TP without EP)."""

    shape: Shape
    ep: int
    tp: int


# in the order they matter, so a budget cut loses the least: V4.1 at EP 8 (the main job's V4.1 pools) and EP 4
# (Dynamo's V4.1 H200 recipes), V4 at expert TP 4 (SGLang's flashinfer_mxfp4 H200 cells), then the rest
SPLITS = (
    Split(V41, 8, 1),
    Split(V41, 4, 1),
    Split(V4, 1, 4),
    Split(V4, 4, 1),
    Split(V4, 8, 1),
    Split(V41, 1, 1),
    Split(V4, 1, 1),
)
TOKENS = (1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)  # of the whole EP group


def balanced_routing(tokens: int, experts: int, top_k: int, gen: torch.Generator) -> torch.Tensor:
    """[tokens, top_k] expert ids: pair p = t x top_k + j goes to expert perm[p mod experts], so every expert gets
    floor or ceil(tokens x top_k / experts) pairs and a token's experts are distinct (top_k <= experts)."""
    if top_k > experts:
        raise ValueError(f"top_k {top_k} > experts {experts}")
    perm = torch.randperm(experts, generator=gen)
    pairs = torch.arange(tokens * top_k) % experts
    return perm[pairs].view(tokens, top_k).to(torch.int32)


def random_mxfp4(
    rows: int, n: int, k: int, gen: torch.Generator, device: str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random MXFP4 weights of `rows` experts, each n x k, drawn on `device` (`gen` is that device's): (packed
    [rows, n, k/2] uint8, two E2M1 codes a byte, the lower index in the low nibble; scales [rows, n, k/32] uint8
    UE8M0, exponents 2^-6..2^0 so products stay finite)."""
    packed = torch.randint(0, 256, (rows, n, k // 2), dtype=torch.uint8, generator=gen, device=device)
    scales = torch.randint(121, 128, (rows, n, k // GROUP), dtype=torch.uint8, generator=gen, device=device)
    return packed, scales


def dequant_mxfp4(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """FP32 [..., n, k] from packed MXFP4 [..., n, k/2] and UE8M0 scales [..., n, k/32]."""
    table = torch.tensor(FP4_E2M1, dtype=torch.float32, device=packed.device)
    lo = table[(packed & 0x0F).long()]
    hi = table[(packed >> 4).long()]
    values = torch.stack((lo, hi), dim=-1).flatten(-2)
    scale = torch.exp2(scales.float() - 127.0).repeat_interleave(GROUP, dim=-1)
    return values * scale


def reference_moe(
    x: torch.Tensor,
    experts_of: torch.Tensor,
    weights_of: torch.Tensor,
    fc1: dict[int, torch.Tensor],
    fc2: dict[int, torch.Tensor],
    local: range,
    gate_first: bool,
) -> torch.Tensor:
    """FP32 MoE over the local experts: out[t] = sum_j w[t, j] fc2_e (silu(gate) x up) with e = experts_of[t, j] in
    `local`; fc1[e - local.start] [2I, H] holds gate then up rows (`gate_first`) or up then gate, fc2[...] [H, I] (only
    the experts the tokens pick need be there)."""
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32, device=x.device)
    for t in range(x.shape[0]):
        for j in range(experts_of.shape[1]):
            e = int(experts_of[t, j])
            if e not in local:
                continue
            w1, w2 = fc1[e - local.start], fc2[e - local.start]
            h = w1 @ x[t].float()
            inter = w2.shape[1]
            gate, up = (h[:inter], h[inter:]) if gate_first else (h[inter:], h[:inter])
            out[t] += weights_of[t, j].float() * (w2 @ (torch.nn.functional.silu(gate) * up))
    return out


class Layer:
    """One MoE layer of `shape` on EP rank 0 of `ep`, prepared for FlashInfer's kernel."""

    def __init__(
        self, shape: Shape, ep: int, gen: torch.Generator, device: str = "cuda", tp: int = 1
    ) -> None:
        from flashinfer.fused_moe import (
            interleave_moe_scales_for_sm90_mixed_gemm,
            interleave_moe_weights_for_sm90_mixed_gemm,
        )

        if shape.experts % ep or shape.intermediate % (128 * tp):
            raise ValueError(f"{shape} does not split over EP {ep} / TP {tp}")
        self.shape, self.ep, self.tp = shape, ep, tp
        local = shape.experts // ep
        h, i = shape.hidden, shape.intermediate // tp
        weights = torch.Generator(device=device).manual_seed(int(torch.randint(1 << 30, (1,), generator=gen)))
        self.fc1_raw, self.fc1_sf_raw = random_mxfp4(local, 2 * i, h, weights, device)
        self.fc2_raw, self.fc2_sf_raw = random_mxfp4(local, h, i, weights, device)
        self.fc1 = interleave_moe_weights_for_sm90_mixed_gemm(self.fc1_raw, "fp4")
        self.fc2 = interleave_moe_weights_for_sm90_mixed_gemm(self.fc2_raw, "fp4")
        self.fc1_sf = interleave_moe_scales_for_sm90_mixed_gemm(self.fc1_sf_raw, group_size=GROUP)
        self.fc2_sf = interleave_moe_scales_for_sm90_mixed_gemm(self.fc2_sf_raw, group_size=GROUP)

    def inputs(self, tokens: int, gen: torch.Generator, device: str = "cuda"):
        s = self.shape
        x = (torch.randn(tokens, s.hidden, generator=gen) * 0.5).to(torch.bfloat16).to(device)
        experts_of = balanced_routing(tokens, s.experts, s.top_k, gen).to(device)
        weights_of = torch.softmax(torch.randn(tokens, s.top_k, generator=gen), dim=-1).to(device)
        return x, experts_of, weights_of

    def call(self, x, experts_of, weights_of, out: torch.Tensor | None = None) -> torch.Tensor:
        from flashinfer.fused_moe import cutlass_fused_moe

        got = cutlass_fused_moe(
            input=x,
            token_selected_experts=experts_of,
            token_final_scales=weights_of,
            fc1_expert_weights=self.fc1,
            fc2_expert_weights=self.fc2,
            output_dtype=torch.bfloat16,
            quant_scales=[self.fc1_sf.view(torch.int32), self.fc2_sf.view(torch.int32)],
            ep_size=self.ep,
            ep_rank=0,
            tp_size=self.tp,
            tp_rank=0,
            use_w4_group_scaling=True,
            tune_max_num_tokens=max(16, 1 << (x.shape[0] - 1).bit_length()),
            output=out,
        )
        return got[0] if isinstance(got, list) else got  # FlashInfer 0.7 returns [output]


def check(layer: Layer, gen: torch.Generator, tokens: int = 4) -> str:
    """Relative L2 error of the kernel against the FP32 reference at `tokens` tokens, and the fc1 half order that
    matched ('gate_first' / 'up_first'); raises if neither comes within 2 %."""
    x, experts_of, weights_of = layer.inputs(tokens, gen)
    got = layer.call(x, experts_of, weights_of).float()
    local = range(0, layer.shape.experts // layer.ep)
    used = sorted({int(e) for e in experts_of.flatten().tolist() if int(e) in local})
    fc1 = {e: dequant_mxfp4(layer.fc1_raw[e], layer.fc1_sf_raw[e]) for e in used}
    fc2 = {e: dequant_mxfp4(layer.fc2_raw[e], layer.fc2_sf_raw[e]) for e in used}
    errors = {}
    for gate_first in (True, False):
        ref = reference_moe(x, experts_of, weights_of, fc1, fc2, local, gate_first)
        errors["gate_first" if gate_first else "up_first"] = float(
            (got - ref).norm() / ref.norm().clamp_min(1e-30)
        )
    order, err = min(errors.items(), key=lambda kv: kv[1])
    if not err < 0.02:
        raise AssertionError(f"FlashInfer W4A16 MoE vs FP32 reference: rel L2 {errors}")
    return f"{order} rel_l2 {err:.2e}"


def measure(layer: Layer, tokens: int, gen: torch.Generator) -> dict:
    from flashinfer.autotuner import autotune

    from kernels_bench.timing import time_calls

    x, experts_of, weights_of = layer.inputs(tokens, gen)
    out = torch.empty(tokens, layer.shape.hidden, dtype=torch.bfloat16, device="cuda")
    with autotune(True):
        layer.call(x, experts_of, weights_of, out)
    torch.cuda.synchronize()
    timing = time_calls([lambda: layer.call(x, experts_of, weights_of, out)])
    s = layer.shape
    return dict(hidden=s.hidden, intermediate=s.intermediate, experts=s.experts, top_k=s.top_k, ep=layer.ep,
                tp=layer.tp, tokens=tokens, time_us=round(timing.median_us, 3), samples=timing.samples,
                method=timing.method)  # fmt: skip


def provenance(commit: str | None) -> dict:
    import flashinfer

    from kernels_bench import report
    from kernels_bench.production.host_issue import cpu_model

    prov = report.provenance(commit)
    prov["gpu"] = torch.cuda.get_device_name()
    prov["cpu_model"] = cpu_model()
    prov["flashinfer"] = flashinfer.__version__
    prov["what"] = (
        "FlashInfer's SM90 W4A16 MXFP4 MoE (cutlass_fused_moe, use_w4_group_scaling: both expert GEMMs, SwiGLU, "
        "the routing's permutation and combine), one MoE layer on EP rank 0 of `ep`, microseconds, at `tokens` "
        "tokens of the whole EP group routed evenly over `experts` experts, `top_k` each; autotuned, then "
        "kernels_bench.timing.time_calls (CUDA graph where it captures: `method`), median"
    )
    prov["used_by"] = (
        "sim/timing/engine_moe.py from hwprofiles/engine_modules/flashinfer_w4a16_moe_<gpu>.csv "
        "(docs/engines_and_validation.md sections 59-60)"
    )
    return prov


def marlin_us(row: dict, gpu: str) -> float:
    """sim's time for the same layer on Marlin's measured module (sim.timing.marlin, its floor included), routed as
    this benchmark routes: the rank's pairs spread evenly over its experts."""
    from sim.timing import marlin

    module = marlin.measured(gpu)
    experts, top_k, ep, tp = (int(row[k]) for k in ("experts", "top_k", "ep", "tp"))
    pairs = int(row["tokens"]) * top_k / ep
    local = min(experts / ep, pairs)
    weights = 3 * int(row["hidden"]) * int(row["intermediate"])
    return (module.floor_s + module.tp_layer_s(local, pairs / local, weights, tp)) * 1e6


def compare(path: Path, gpu: str) -> list[dict]:
    """Each measured row of `path` beside sim's Marlin time for it on `gpu` (h100 / h200)."""
    import csv

    with path.open() as f:
        rows = [r for r in csv.DictReader(line for line in f if not line.startswith("#")) if r["time_us"]]
    return [
        dict(r, marlin_us=round(m, 1), marlin_over_fi=round(m / float(r["time_us"]), 2))
        for r in rows
        for m in [marlin_us(r, gpu)]
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="kernels_bench.production.fi_w4a16_moe", description=__doc__.splitlines()[0]
    )
    ap.add_argument(
        "--out", type=Path, help="the folder the measured CSV goes to (required unless --compare)"
    )
    ap.add_argument("--commit", default=None)
    ap.add_argument("--budget-s", type=float, default=300.0)
    ap.add_argument(
        "--compare",
        type=Path,
        default=None,
        help="a measured CSV: print it beside sim's Marlin times (no GPU)",
    )
    ap.add_argument(
        "--gpu", choices=("h100", "h200"), default="h200", help="with --compare: Marlin's measured GPU"
    )
    args = ap.parse_args(argv)
    if args.compare is not None:
        print("experts ep tp tokens fi_us marlin_us marlin/fi")
        for r in compare(args.compare, args.gpu):
            print(
                r["experts"], r["ep"], r["tp"], r["tokens"], r["time_us"], r["marlin_us"], r["marlin_over_fi"]
            )
        return 0
    if args.out is None:
        print("error: --out is required to measure", file=sys.stderr)
        return 2
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        print("error: needs an SM90 GPU (FlashInfer's mixed-input MoE is Hopper's)", file=sys.stderr)
        return 2
    from kernels_bench.production.host_issue import write_csv

    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "fi_w4a16_moe.csv"
    prov = provenance(args.commit)
    gen = torch.Generator().manual_seed(0)
    rows: list[dict] = []
    t0 = time.monotonic()
    for split in SPLITS:
        shape, ep, tp = split
        if time.monotonic() - t0 > args.budget_s:
            print(f"budget exhausted before {shape.model} EP {ep} TP {tp}", flush=True)
            break
        base = dict(hidden=shape.hidden, intermediate=shape.intermediate, experts=shape.experts, ep=ep, tp=tp)
        try:
            layer = Layer(shape, ep, gen, tp=tp)
            verdict = check(layer, gen)
        except Exception as e:  # noqa: BLE001 - a split that fails is reported, never silent
            rows.append(dict(base, note=f"{type(e).__name__}: {e}"[:300]))
            print(json.dumps(rows[-1]), flush=True)
            write_csv(path, COLUMNS, rows, prov)
            continue
        for tokens in TOKENS:
            try:
                row = measure(layer, tokens, gen)
                row["check"] = verdict
            except Exception as e:  # noqa: BLE001
                row = dict(base, tokens=tokens, note=f"{type(e).__name__}: {e}"[:300])
            print(json.dumps(row), flush=True)
            rows.append(row)
            write_csv(path, COLUMNS, rows, prov)
        del layer
        torch.cuda.empty_cache()
    prov["elapsed_s"] = round(time.monotonic() - t0, 1)
    write_csv(path, COLUMNS, rows, prov)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
