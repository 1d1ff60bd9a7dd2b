"""What fraction of its datasheet FP8 peak each GPU's large GEMMs reach, from AIConfigurator's measured GEMM
tables: the carry's rule 3b (sim.timing.carry), issue 29, fourteenth sitting.

    python3 -m kernels_bench.aic_gemm_frac --aic-data $SIM_AIC_DATA

AIConfigurator 0.12.0 measured SGLang 0.5.14's GEMMs (`gemm_dtype` fp8_block: DeepGEMM's FP8 with per-128 block
scales, the production stack's dense projections) on each GPU it has. Kept: every shape with m, n and k of at least
4,096 (compute-bound on every GPU); the median achieved FLOP/s over them, against the GPU's datasheet FP8 peak
(dense, the value in its hardware profile). Prints one line per GPU with its median, the fraction and the count.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

VERSION, DTYPE, MIN_DIM = "0.5.14", "fp8_block", 4096
# AIConfigurator's system name -> (sim's hardware profile, its datasheet dense FP8 TFLOP/s)
GPUS = {"h100_sxm": ("nvidia-h100-hgx8", 1979.0), "h200_sxm": ("nvidia-h200-hgx8", 1979.0),
        "b200_sxm": ("nvidia-b200-hgx8", 4500.0), "b300_sxm": ("nvidia-b300-hgx8", 4500.0),
        "gb200": ("nvidia-gb200-nvl72", 5000.0)}  # fmt: skip


def median_tflops(rows: list[dict]) -> tuple[float, int]:
    """Median achieved TFLOP/s of the kept rows (AIC's latency is in ms) and their count."""
    kept = [2.0 * r["m"] * r["n"] * r["k"] / (r["latency"] * 1e-3) / 1e12 for r in rows
            if r["gemm_dtype"] == DTYPE and min(r["m"], r["n"], r["k"]) >= MIN_DIM]  # fmt: skip
    return (statistics.median(kept) if kept else 0.0), len(kept)


def main(argv=None) -> int:
    import pyarrow.parquet as pq

    ap = argparse.ArgumentParser(prog="kernels_bench.aic_gemm_frac", description=__doc__.splitlines()[0])
    ap.add_argument("--aic-data", type=Path, required=True, help="aiconfigurator_core/systems/data")
    args = ap.parse_args(argv)
    print("| AIC system | profile | median TFLOP/s | of the FP8 peak | shapes |")
    print("|---|---|---|---|---|")
    for system, (profile, peak) in GPUS.items():
        rows = []
        for path in sorted((args.aic_data / system / "gemm" / "sglang" / VERSION).glob("*.parquet")):
            rows += pq.read_table(path).to_pylist()
        tflops, count = median_tflops(rows)
        print(f"| {system} | {profile} | {tflops:.0f} | {tflops / peak:.3f} | {count} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
