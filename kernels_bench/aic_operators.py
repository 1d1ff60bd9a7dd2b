"""The engines' measured operators that sim's `aic` kernel stack reads, extracted from AIConfigurator into committed
CSVs (sim.timing.aic; issue 29, docs/engines_and_validation.md section 64).

    python3 -m kernels_bench.aic_operators --aic-data $SIM_AIC_DATA --out-dir hwprofiles/engine_modules

AIConfigurator 0.12.0 (Apache-2.0) measured the operators the serving engines call, as they call them, on the H100,
H200, B200, B300 and GB200. Three of its tables, reduced to the rows sim reads (every row kept unchanged but for the
mean over AIC's repeats of one point, `samples`):
- `aic_gemm_fp8_block.csv`: SGLang 0.5.14's `gemm_perf` fp8_block rows (DeepGEMM with the activations' per-token-group
  quantisation, as SGLang runs a dense projection), for each (N, K) of V4-Flash's and V4.1-Flash's dense projections
  in sim's production stack the measured pair itself, else the nearest measured one (|ln N - ln N'| + |ln K - ln K'|),
  every M AIC measured;
- `aic_moe_vllm.csv`: vLLM 0.24.0's `moe_perf` rows at V4-Flash's expert shape (hidden 4,096, intermediate 2,048, 256
  experts, top-6), balanced routing, no expert TP, every EP size, in the formats sim's routed experts run
  (fp8_block, w4a8_mxfp4_mxfp8, nvfp4): one whole fused MoE layer (permutation, both GEMMs, activation);
- `aic_mhc.csv`: SGLang 0.5.14's `mhc_module_perf` rows (TileLang pre and post of one mHC boundary) at every hidden
  size measured (4,096: V4-Flash; 7,168: V4-Pro).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterable
from pathlib import Path

from sim.timing.aic_data import SYSTEMS

AIC_VERSION = "0.12.0"
GEMM = ("sglang", "0.5.14", "fp8_block")
MOE = ("vllm", "0.24.0")
MOE_DTYPES = ("fp8_block", "w4a8_mxfp4_mxfp8", "nvfp4")
MOE_SHAPE = {"hidden_size": 4096, "inter_size": 2048, "num_experts": 256, "topk": 6}  # V4-Flash (model.md §2)
MHC = ("sglang", "0.5.14")
FILES = {"gemm": "aic_gemm_fp8_block.csv", "moe": "aic_moe_vllm.csv", "mhc": "aic_mhc.csv"}
COLUMNS = {
    "gemm": ("gpu", "n", "k", "m", "time_us", "samples"),
    "moe": ("gpu", "moe_dtype", "ep", "tokens", "time_us", "samples"),
    "mhc": ("gpu", "op", "hidden", "tokens", "time_us", "samples"),
}
WHAT = {
    "gemm": f"SGLang {GEMM[1]}'s dense fp8_block GEMM (DeepGEMM, activation quantisation included) at M x N x K, "
    "one GPU, microseconds",
    "moe": f"vLLM {MOE[1]}'s fused MoE layer (routing permutation, both expert GEMMs, activation) at V4-Flash's expert "
    "shape, one GPU of EP `ep`, `tokens` tokens of the EP group routed evenly, microseconds",
    "mhc": f"SGLang {MHC[1]}'s mHC module (TileLang), `op` pre or post of one boundary at `hidden`, microseconds",
}
SOURCE = {
    "gemm": f"systems/data/<gpu>/gemm/{GEMM[0]}/{GEMM[1]}/gemm_perf.parquet, gemm_dtype {GEMM[2]}",
    "moe": f"systems/data/<gpu>/moe/{MOE[0]}/{MOE[1]}/moe_perf.parquet, distribution balanced, moe_tp_size 1, "
    f"hidden 4096 / inter 2048 / 256 experts / top-6, moe_dtype in {', '.join(MOE_DTYPES)}",
    "mhc": f"systems/data/<gpu>/mhc/{MHC[0]}/{MHC[1]}/mhc_module_perf.parquet",
}


def _read(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist() if path.is_file() else []


def nearest_pair(pairs: Iterable[tuple[int, int]], n: float, k: float) -> tuple[int, int]:
    """The measured (N, K) nearest (n, k) in log space; ties to the smaller pair (deterministic)."""
    return min(sorted(pairs), key=lambda p: abs(math.log(p[0] / n)) + abs(math.log(p[1] / k)))


def needed_gemm_shapes() -> list[tuple[float, float]]:
    """(N, K) of every dense projection in sim's production stack (V4-Flash and V4.1-Flash)."""
    from sim.timing.stacks import load_stack

    rows = load_stack("h200", "production").rows
    return sorted({(r.n, r.k) for r in rows if r.family == "gemm_dense" and r.n and r.k})


def _emit(gpu: str, key_columns: tuple[str, ...], points: dict[tuple, list[float]]) -> list[dict]:
    """One CSV row per point, by key: the mean of its repeats (microseconds) and their count."""
    return [
        {
            "gpu": gpu,
            **dict(zip(key_columns, key, strict=True)),
            "time_us": round(sum(v) / len(v), 3),
            "samples": len(v),
        }
        for key, v in sorted(points.items())
    ]


def gemm_rows(system: Path, gpu: str, shapes: list[tuple[float, float]]) -> list[dict]:
    backend, version, dtype = GEMM
    measured = [
        r
        for r in _read(system / "gemm" / backend / version / "gemm_perf.parquet")
        if r["gemm_dtype"] == dtype
    ]
    pairs = {(int(r["n"]), int(r["k"])) for r in measured}
    if not pairs:
        return []
    keep = {nearest_pair(pairs, n, k) for n, k in shapes}
    points: dict[tuple, list[float]] = {}
    for r in measured:
        if (int(r["n"]), int(r["k"])) in keep:
            points.setdefault((int(r["n"]), int(r["k"]), int(r["m"])), []).append(r["latency"] * 1e3)
    return _emit(gpu, ("n", "k", "m"), points)


def moe_rows(system: Path, gpu: str) -> list[dict]:
    backend, version = MOE
    points: dict[tuple, list[float]] = {}
    for r in _read(system / "moe" / backend / version / "moe_perf.parquet"):
        if (r["moe_dtype"] in MOE_DTYPES and r["distribution"] == "balanced" and r["moe_tp_size"] == 1
                and all(r[key] == v for key, v in MOE_SHAPE.items())):  # fmt: skip
            points.setdefault((r["moe_dtype"], int(r["moe_ep_size"]), int(r["num_tokens"])), []).append(
                r["latency"] * 1e3
            )
    return _emit(gpu, ("moe_dtype", "ep", "tokens"), points)


def mhc_rows(system: Path, gpu: str) -> list[dict]:
    backend, version = MHC
    points: dict[tuple, list[float]] = {}
    for r in _read(system / "mhc" / backend / version / "mhc_module_perf.parquet"):
        points.setdefault((r["op_name"], int(r["hidden_size"]), int(r["num_tokens"])), []).append(
            r["latency"] * 1e3
        )
    return _emit(gpu, ("op", "hidden", "tokens"), points)


def csv_text(table: str, rows: list[dict]) -> str:
    header = (
        f"# what: {WHAT[table]}",
        f"# source: NVIDIA AIConfigurator {AIC_VERSION} (PyPI aiconfigurator-core, Apache-2.0), {SOURCE[table]} "
        f"(latency in ms there); gpu: sim's key ({', '.join(f'{k} = {v}' for k, v in sorted(SYSTEMS.items()))}); "
        "written by python3 -m kernels_bench.aic_operators",
        "# license: Apache-2.0 (AIConfigurator, NVIDIA); rows extracted unchanged but for the mean over repeats",
        "# used by: sim/timing/aic.py (docs/engines_and_validation.md section 64)",
    )
    lines = [*header, ",".join(COLUMNS[table])]
    lines += [",".join(str(r[c]) for c in COLUMNS[table]) for r in rows]
    return "\n".join(lines) + "\n"


def extract(aic_data: Path) -> dict[str, list[dict]]:
    shapes = needed_gemm_shapes()
    out: dict[str, list[dict]] = {t: [] for t in FILES}
    for gpu, folder in sorted(SYSTEMS.items()):
        system = aic_data / folder
        out["gemm"] += gemm_rows(system, gpu, shapes)
        out["moe"] += moe_rows(system, gpu)
        out["mhc"] += mhc_rows(system, gpu)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="kernels_bench.aic_operators", description=__doc__.splitlines()[0])
    ap.add_argument("--aic-data", type=Path, required=True, help="AIConfigurator's systems/data folder")
    ap.add_argument("--out-dir", type=Path, required=True, help="where the three CSVs go")
    args = ap.parse_args(argv)
    tables = extract(args.aic_data)
    empty = [t for t, rows in tables.items() if not rows]
    if empty:
        print(f"no {', '.join(empty)} rows under {args.aic_data}", file=sys.stderr)
        return 1
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for table, rows in tables.items():
        (args.out_dir / FILES[table]).write_text(csv_text(table, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
