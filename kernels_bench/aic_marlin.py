"""The measured Marlin MoE module behind `expert_activations: bf16` on the H200 and the H100 (sim.timing.marlin):
AIConfigurator's rows of vLLM's Marlin MXFP4 MoE, written as the CSV sim reads (issue 29, thirteenth and fifteenth
sittings).

    python3 -m kernels_bench.aic_marlin --aic-data $SIM_AIC_DATA > hwprofiles/engine_modules/marlin_mxfp4_h200.csv
    python3 -m kernels_bench.aic_marlin --aic-data $SIM_AIC_DATA --gpu h100_sxm \
        > hwprofiles/engine_modules/marlin_mxfp4_h100.csv

AIConfigurator 0.12.0 measured vLLM 0.24.0's MoE module on the H200 and on the H100 with MXFP4 weights on Marlin
(`moe_dtype` w4a16_mxfp4, kernel `vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts_situ_as_silu`): one
shape (hidden 3,584, intermediate 3,072, 896 experts, top-16), EP 1-128, 1-16,384 tokens. The rows kept are those
with balanced routing and no expert TP, as sim routes (uniformly) and splits (EP only) the experts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

GPU, VERSION = "h200_sxm", "0.24.0"  # GPU: the default `--gpu` and the int4 cross-shape check's
GPU_NAMES = {"h200_sxm": "NVIDIA H200", "h100_sxm": "NVIDIA H100 SXM"}
KERNEL = "vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts_situ_as_silu"
WHERE = {"kernel_source": KERNEL, "moe_dtype": "w4a16_mxfp4", "distribution": "balanced", "moe_tp_size": 1}
COLUMNS = ("hidden", "intermediate", "experts", "top_k", "ep", "tokens", "time_us")


def header(gpu: str) -> tuple[str, ...]:
    """The CSV's comment lines: what it holds, its source, who reads it."""
    return (
        "# what: vLLM's MoE module (both expert GEMMs and the activation, Marlin W4A16: MXFP4 weights dequantised in "
        "the kernel, BF16 MMAs), one MoE layer on one GPU of EP `ep`, microseconds, at `tokens` tokens of the whole EP "
        "group routed evenly over `experts` experts, `top_k` each",
        f"# source: NVIDIA AIConfigurator 0.12.0 (PyPI aiconfigurator-core, Apache-2.0), systems/data/{gpu}/moe/vllm/"
        f"{VERSION}/moe_perf.parquet, rows kernel_source {KERNEL}, moe_dtype w4a16_mxfp4, distribution balanced, "
        f"moe_tp_size 1 ({GPU_NAMES[gpu]}; latency in ms there); written by python3 -m kernels_bench.aic_marlin",
        "# used by: sim/timing/marlin.py (docs/engines_and_validation.md sections 19 and 24)",
    )


def rows(aic_data: Path, gpu: str = GPU) -> list[dict]:
    """The kept rows of `gpu` (AIConfigurator's folder name) as the CSV's columns, sorted by EP size then tokens."""
    import pyarrow.parquet as pq

    path = aic_data / gpu / "moe" / "vllm" / VERSION / "moe_perf.parquet"
    if not path.is_file():
        return []
    kept = [r for r in pq.read_table(path).to_pylist() if all(r[k] == v for k, v in WHERE.items())]
    out = [
        {
            "hidden": r["hidden_size"],
            "intermediate": r["inter_size"],
            "experts": r["num_experts"],
            "top_k": r["topk"],
            "ep": r["moe_ep_size"],
            "tokens": r["num_tokens"],
            "time_us": round(r["latency"] * 1e3, 3),
        }
        for r in kept
    ]
    return sorted(out, key=lambda r: (r["ep"], r["tokens"]))


SGLANG_VERSION, SGLANG_KERNEL = "0.5.14", "sglang_marlin_moe_situ_as_silu"  # the module under expert TP
TP_COLUMNS = ("hidden", "intermediate", "experts", "top_k", "tp", "tokens", "time_us")


def tp_header(gpu: str) -> tuple[str, ...]:
    """The expert-TP CSV's comment lines."""
    return (
        "# what: SGLang's Marlin MXFP4 MoE module (W4A16) on one GPU of expert TP `tp` (every expert's 1/tp slice, "
        "EP 1), microseconds, at `tokens` tokens routed evenly over `experts` experts, `top_k` each",
        f"# source: NVIDIA AIConfigurator 0.12.0 (PyPI aiconfigurator-core, Apache-2.0), systems/data/{gpu}/moe/sglang/"
        f"{SGLANG_VERSION}/moe_perf.parquet, rows kernel_source {SGLANG_KERNEL}, moe_dtype w4a16_mxfp4, distribution "
        f"balanced, moe_ep_size 1 ({GPU_NAMES[gpu]}; latency in ms there); written by python3 -m "
        "kernels_bench.aic_marlin --tp-split",
        "# used by: sim/timing/marlin.py (docs/engines_and_validation.md section 27)",
    )


def tp_rows(aic_data: Path, gpu: str = GPU) -> list[dict]:
    """SGLang's Marlin module at each expert-TP size (EP 1, balanced), as the TP CSV's columns, by TP then tokens."""
    import pyarrow.parquet as pq

    path = aic_data / gpu / "moe" / "sglang" / SGLANG_VERSION / "moe_perf.parquet"
    if not path.is_file():
        return []
    where = {
        "kernel_source": SGLANG_KERNEL,
        "moe_dtype": "w4a16_mxfp4",
        "distribution": "balanced",
        "moe_ep_size": 1,
    }
    kept = [r for r in pq.read_table(path).to_pylist() if all(r[k] == v for k, v in where.items())]
    out = [
        {"hidden": r["hidden_size"], "intermediate": r["inter_size"], "experts": r["num_experts"], "top_k": r["topk"],
         "tp": r["moe_tp_size"], "tokens": r["num_tokens"], "time_us": round(r["latency"] * 1e3, 3)}
        for r in kept
    ]  # fmt: skip
    return sorted(out, key=lambda r: (r["tp"], r["tokens"]))


INT4_VERSION, INT4_KERNEL = "0.19.0", "vllm_marlin_int4_moe"  # the shapes the carry is checked across
MIN_EP_SIZES = 4  # a shape measured at fewer EP sizes is not a module


def cross_shapes(aic_data: Path, sources: tuple[tuple[int, int, int, int], ...]) -> list[dict]:
    """The carry of sim.timing.marlin checked across MoE shapes within one kernel and format: AIConfigurator's
    vLLM 0.19.0 int4 Marlin module on the H200 at every shape it measured (balanced routing, no expert TP), each
    predicted from the module built on a `sources` shape (hidden, intermediate, experts, top-k); per pair, the
    median and the 10th / 90th percentiles of measured / predicted over the rows with one row an expert or more."""
    import pyarrow.parquet as pq

    from sim.timing.moe_module import ModulePoint, build

    path = aic_data / GPU / "moe" / "vllm" / INT4_VERSION / "moe_perf.parquet"
    where = {"kernel_source": INT4_KERNEL, "distribution": "balanced", "moe_tp_size": 1}
    shapes: dict[tuple[int, int, int, int], list[ModulePoint]] = {}
    for r in pq.read_table(path).to_pylist() if path.is_file() else []:
        if all(r[k] == v for k, v in where.items()):
            shape = (r["hidden_size"], r["inter_size"], r["num_experts"], r["topk"])
            shapes.setdefault(shape, []).append(
                ModulePoint(*shape, ep=r["moe_ep_size"], tokens=r["num_tokens"], seconds=r["latency"] * 1e-3)
            )
    shapes = {s: p for s, p in shapes.items() if len({q.ep for q in p}) >= MIN_EP_SIZES}
    out = []
    for src in sources:
        if src not in shapes:
            continue
        module = build(shapes[src])
        for dst, points in sorted(shapes.items()):
            if dst == src:
                continue
            ratios = sorted(
                q.seconds / (module.floor_s + module.layer_s(q.experts / q.ep, rows, q.expert_weights))
                for q in points
                if (rows := q.tokens * q.top_k / q.experts) >= 1.0
            )
            if ratios:
                out.append({"source": src, "shape": dst, "rows": len(ratios), "median": _quantile(ratios, 0.5),
                            "p10": _quantile(ratios, 0.1), "p90": _quantile(ratios, 0.9)})  # fmt: skip
    return out


def _quantile(ordered: list[float], f: float) -> float:
    return ordered[min(len(ordered) - 1, int(f * len(ordered)))]


def csv_text(kept: list[dict], gpu: str = GPU) -> str:
    lines = [*header(gpu), ",".join(COLUMNS)]
    lines += [",".join(str(r[c]) for c in COLUMNS) for r in kept]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="kernels_bench.aic_marlin", description=__doc__.splitlines()[0])
    ap.add_argument("--aic-data", type=Path, required=True, help="AIConfigurator's systems/data folder")
    ap.add_argument("--gpu", choices=sorted(GPU_NAMES), default=GPU, help="the GPU's AIConfigurator folder")
    ap.add_argument("--tp-split", action="store_true",
                    help="instead: SGLang's module at each expert-TP size (the CSV of sim.timing.marlin's TP split)")  # fmt: skip
    ap.add_argument("--cross-shapes", action="store_true",
                    help="instead: the carry checked across int4 Marlin shapes (a table, docs section 19)")  # fmt: skip
    args = ap.parse_args(argv)
    if args.cross_shapes:
        table = cross_shapes(args.aic_data, ((7168, 2048, 256, 8), (6144, 2048, 256, 8)))
        if not table:
            print(f"no int4 Marlin rows under {args.aic_data / GPU}", file=sys.stderr)
            return 1
        print(
            "| built on (hidden, inter, experts, top-k) | shape | rows | measured / carried: median (p10-p90) |"
        )
        print("|---|---|---|---|")
        for r in table:
            print(
                f"| {r['source']} | {r['shape']} | {r['rows']} | {r['median']:.2f} ({r['p10']:.2f}-{r['p90']:.2f}) |"
            )
        return 0
    if args.tp_split:
        kept = tp_rows(args.aic_data, args.gpu)
        if not kept:
            print(f"no SGLang Marlin rows under {args.aic_data / args.gpu}", file=sys.stderr)
            return 1
        lines = [
            *tp_header(args.gpu),
            ",".join(TP_COLUMNS),
            *(",".join(str(r[c]) for c in TP_COLUMNS) for r in kept),
        ]
        sys.stdout.write("\n".join(lines) + "\n")
        return 0
    kept = rows(args.aic_data, args.gpu)
    if not kept:
        print(f"no Marlin MXFP4 rows under {args.aic_data / args.gpu}", file=sys.stderr)
        return 1
    sys.stdout.write(csv_text(kept, args.gpu))
    return 0


if __name__ == "__main__":
    sys.exit(main())
