"""The measured Marlin MoE module behind `expert_activations: bf16` on the H200 (sim.timing.marlin): AIConfigurator's
rows of vLLM's Marlin MXFP4 MoE, written as the CSV sim reads (issue 29, thirteenth sitting).

    python3 -m kernels_bench.aic_marlin --aic-data $SIM_AIC_DATA > hwprofiles/engine_modules/marlin_mxfp4_h200.csv

AIConfigurator 0.12.0 measured vLLM 0.24.0's MoE module on the H200 with MXFP4 weights on Marlin
(`moe_dtype` w4a16_mxfp4, kernel `vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts_situ_as_silu`): one
shape (hidden 3,584, intermediate 3,072, 896 experts, top-16), EP 1-128, 1-16,384 tokens. The rows kept are those
with balanced routing and no expert TP, as sim routes (uniformly) and splits (EP only) the experts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

GPU, VERSION = "h200_sxm", "0.24.0"
KERNEL = "vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts_situ_as_silu"
WHERE = {"kernel_source": KERNEL, "moe_dtype": "w4a16_mxfp4", "distribution": "balanced", "moe_tp_size": 1}
COLUMNS = ("hidden", "intermediate", "experts", "top_k", "ep", "tokens", "time_us")
HEADER = (
    "# what: vLLM's MoE module (both expert GEMMs and the activation, Marlin W4A16: MXFP4 weights dequantised in "
    "the kernel, BF16 MMAs), one MoE layer on one GPU of EP `ep`, microseconds, at `tokens` tokens of the whole EP "
    "group routed evenly over `experts` experts, `top_k` each",
    f"# source: NVIDIA AIConfigurator 0.12.0 (PyPI aiconfigurator-core, Apache-2.0), systems/data/{GPU}/moe/vllm/"
    f"{VERSION}/moe_perf.parquet, rows kernel_source {KERNEL}, moe_dtype w4a16_mxfp4, distribution balanced, "
    "moe_tp_size 1 (NVIDIA H200; latency in ms there); written by python3 -m kernels_bench.aic_marlin",
    "# used by: sim/timing/marlin.py (docs/engines_and_validation.md section 19)",
)


def rows(aic_data: Path) -> list[dict]:
    """The kept rows as the CSV's columns, sorted by EP size then tokens."""
    import pyarrow.parquet as pq

    path = aic_data / GPU / "moe" / "vllm" / VERSION / "moe_perf.parquet"
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


def csv_text(kept: list[dict]) -> str:
    lines = [*HEADER, ",".join(COLUMNS)]
    lines += [",".join(str(r[c]) for c in COLUMNS) for r in kept]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="kernels_bench.aic_marlin", description=__doc__.splitlines()[0])
    ap.add_argument("--aic-data", type=Path, required=True, help="AIConfigurator's systems/data folder")
    args = ap.parse_args(argv)
    kept = rows(args.aic_data)
    if not kept:
        print(f"no Marlin MXFP4 rows under {args.aic_data / GPU}", file=sys.stderr)
        return 1
    sys.stdout.write(csv_text(kept))
    return 0


if __name__ == "__main__":
    sys.exit(main())
