"""SGLang's MoE modules on Blackwell at V4-Flash's shape, from AIConfigurator's measured rows, written as the CSVs
sim reads (sim.timing.engine_moe; issue 29, docs/engines_and_validation.md section 61).

    python3 -m kernels_bench.aic_sglang_moe --aic-data $SIM_AIC_DATA --gpu b200_sxm --module flashinfer_trtllm \
        > hwprofiles/engine_modules/sglang_flashinfer_trtllm_moe_b200.csv

AIConfigurator 0.12.0 measured SGLang 0.5.14's MoE modules on the B200 and the B300 at V4-Flash's expert shape
(hidden 4,096, intermediate 2,048, 256 experts, top-6), TP 1-16 x EP 1-256, 27 token counts, three routings:
- `flashinfer_trtllm`: kernel `sglang_mxfp4_flashinfer_trtllm_moe`, moe_dtype `w4a8_mxfp4_mxfp8`: FlashInfer's
  TRT-LLM-gen MXFP4 MoE with MXFP8 activations, what `--moe-runner-backend flashinfer_mxfp4` runs on SM100;
- `triton_fp8`: kernel `sglang_fused_moe_triton`, moe_dtype `fp8_block`: SGLang's Triton fused MoE, what its MoE
  runner resolves to when Mega MoE's a2a backend leaves a step (`layers/moe/mega_moe.py` should_use_mega_moe; the
  FP8 method's `create_moe_runner`: auto -> triton outside DeepEP), measured with FP8 block-scaled weights.
Kept: balanced routing (as sim routes), the rows without expert TP (every EP size) and those without EP (every
expert-TP size), as the `ep` and `tp` columns. AIConfigurator's latency (ms) is the whole module: the routing's
permutation, both expert GEMMs, the activation and the combine.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

VERSION = "0.5.14"
SHAPE = {"hidden_size": 4096, "inter_size": 2048, "num_experts": 256, "topk": 6}  # V4-Flash (model.md §3)
GPU_NAMES = {"b200_sxm": "NVIDIA B200", "b300_sxm": "NVIDIA B300"}
MODULES = {
    "flashinfer_trtllm": ("sglang_mxfp4_flashinfer_trtllm_moe", "w4a8_mxfp4_mxfp8"),
    "triton_fp8": ("sglang_fused_moe_triton", "fp8_block"),
}
COLUMNS = ("hidden", "intermediate", "experts", "top_k", "ep", "tp", "tokens", "time_us")


def header(gpu: str, module: str) -> tuple[str, ...]:
    """The CSV's comment lines: what it holds, its source, who reads it."""
    kernel, dtype = MODULES[module]
    return (
        f"# what: SGLang {VERSION}'s MoE module ({kernel}, {dtype}: the routing's permutation, both expert GEMMs, the "
        "activation and the combine), one MoE layer on one GPU of EP `ep` (or expert TP `tp`: every expert's 1/tp "
        "slice), microseconds, at `tokens` tokens of the whole group routed evenly over `experts` experts, `top_k` each",
        f"# source: NVIDIA AIConfigurator 0.12.0 (PyPI aiconfigurator-core, Apache-2.0), systems/data/{gpu}/moe/sglang/"
        f"{VERSION}/moe_perf.parquet, rows kernel_source {kernel}, moe_dtype {dtype}, distribution balanced, V4-Flash's "
        f"shape, moe_tp_size 1 or moe_ep_size 1 ({GPU_NAMES[gpu]}; latency in ms there); written by python3 -m "
        f"kernels_bench.aic_sglang_moe --module {module}",
        "# used by: sim/timing/engine_moe.py (docs/engines_and_validation.md section 61)",
    )


def rows(aic_data: Path, gpu: str, module: str) -> list[dict]:
    """The kept rows (module doc) as the CSV's columns, by TP, EP, tokens; [] where the file is absent."""
    import pyarrow.parquet as pq

    path = aic_data / gpu / "moe" / "sglang" / VERSION / "moe_perf.parquet"
    if not path.is_file():
        return []
    kernel, dtype = MODULES[module]
    where = {"kernel_source": kernel, "moe_dtype": dtype, "distribution": "balanced", **SHAPE}
    kept = [
        r
        for r in pq.read_table(path).to_pylist()
        if all(r[k] == v for k, v in where.items()) and (r["moe_tp_size"] == 1 or r["moe_ep_size"] == 1)
    ]
    out = {
        (r["moe_tp_size"], r["moe_ep_size"], r["num_tokens"]): {
            "hidden": r["hidden_size"], "intermediate": r["inter_size"], "experts": r["num_experts"],
            "top_k": r["topk"], "ep": r["moe_ep_size"], "tp": r["moe_tp_size"], "tokens": r["num_tokens"],
            "time_us": round(r["latency"] * 1e3, 3),
        }
        for r in kept
    }  # fmt: skip
    return [out[k] for k in sorted(out)]


def csv_text(kept: list[dict], gpu: str, module: str) -> str:
    lines = [*header(gpu, module), ",".join(COLUMNS)]
    lines += [",".join(str(r[c]) for c in COLUMNS) for r in kept]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="kernels_bench.aic_sglang_moe", description=__doc__.splitlines()[0])
    ap.add_argument("--aic-data", type=Path, required=True, help="AIConfigurator's systems/data folder")
    ap.add_argument(
        "--gpu", choices=sorted(GPU_NAMES), default="b200_sxm", help="the GPU's AIConfigurator folder"
    )
    ap.add_argument("--module", choices=sorted(MODULES), default="flashinfer_trtllm")
    args = ap.parse_args(argv)
    kept = rows(args.aic_data, args.gpu, args.module)
    if not kept:
        print(f"no {args.module} rows at V4-Flash's shape under {args.aic_data / args.gpu}", file=sys.stderr)
        return 1
    sys.stdout.write(csv_text(kept, args.gpu, args.module))
    return 0


if __name__ == "__main__":
    sys.exit(main())
