"""AIConfigurator itself on sim's shipped validation cases (issues 28 and 29): the peer's error beside sim's.

    python3 -m kernels_bench.aic_validate --aic-cli /path/to/bin/aiconfigurator --out docs/carry/aic/validation

For each case in scenarios/validation/ the tool builds the `aiconfigurator cli estimate --estimate-mode agg`
command the case's setup describes: the engine (the scenario's `engine.name` is AIC's backend, at AIC's default
data version), the system and checkpoint per GPU and engine (`CHECKPOINTS`), TP / attention DP / expert EP and
TP, ISL, OSL, the cached prefix = prefix_reuse_frac x ISL, the prefill token budget as --ctx-tokens (vLLM's
--max-num-batched-tokens; SGLang's chunk per DP rank), MTP draft tokens at the acceptance `sim validate` runs
the case with. It runs once, at the requests the server holds running: the published concurrency capped at the
case's `max_decode_batch` (the rest queue, which AIC's steady in-flight-batching state does not model, so its
TTFT holds no queue), and compares each published metric: output tokens/s per GPU, tokens/s per user, TTFT. A
disaggregated case is listed, not run (AIC's agg mode models one colocated worker), as is a case at a TPOT or
floor pick (a sweep). AIC runs as a separate program (its own environment); nothing of it is imported here.
"""

from __future__ import annotations

import argparse
import csv
import re
import subprocess
from pathlib import Path

# sim GPU key -> AIC system
SYSTEMS = {"b200": "b200_sxm", "b300": "b300_sxm", "h200": "h200_sxm"}
# (GPU, engine) -> the checkpoint AIC models: the Dynamo B200 recipe serves NVFP4 on vLLM; the SGLang cookbook's
# Blackwell cells serve DeepSeek's own FP4-expert checkpoint (flashinfer_mxfp4 / Mega MoE); on the H200 AIC models
# only the FP8 checkpoint (published_2026-12.md §6), the cookbook's "FP8 repack"
CHECKPOINTS = {
    ("b200", "vllm"): "nvidia/DeepSeek-V4-Flash-NVFP4",
    ("b200", "sglang"): "deepseek-ai/DeepSeek-V4-Flash",
    ("b300", "sglang"): "deepseek-ai/DeepSeek-V4-Flash",
    ("h200", "vllm"): "sgl-project/DeepSeek-V4-Flash-FP8",
    ("h200", "sglang"): "sgl-project/DeepSeek-V4-Flash-FP8",
}
# published metric -> the AIC field it is compared with
METRICS = {"output_tokens_per_s_per_gpu": "tokens_per_s_per_gpu", "tokens_per_s_per_user": "tokens_per_s_per_user",
           "ttft_p50_s": "ttft_ms"}  # fmt: skip
FIELDS = {"tpot_ms": r"TPOT:\s+([\d.,]+) ms", "ttft_ms": r"TTFT:\s+([\d.,]+) ms",
          "tokens_per_s_per_gpu": r"tokens/s/gpu:\s+([\d.,]+)", "tokens_per_s_per_user": r"tokens/s/user:\s+([\d.,]+)",
          "concurrency": r"Concurrency:\s+([\d.,]+)"}  # fmt: skip


def scenario_of(case):
    from sim.config.errors import validate_or_raise
    from sim.config.scenario import Scenario

    return validate_or_raise(Scenario, case.scenario, file=str(case.path))


def command(cli: str, case, concurrency: int) -> list[str]:
    """AIC's in-flight-batching (`agg`) estimate command for one validation case at `concurrency` requests in
    flight per instance: AIC batches those the server runs, `concurrency` capped at the case's running limit."""
    from sim.hardware import load_hw
    from sim.timing.tables import gpu_key

    scn = scenario_of(case)
    pool = scn.cluster.pools[0]
    gpu = gpu_key(load_hw(scn.hardware))
    engine = scn.engine.name if scn.engine is not None else "vllm"
    bench = scn.workload.benchmark
    dp = pool.dp
    per_rank = max(1, round(min(concurrency, scn.scheduler.max_decode_batch) / dp))
    cmd = [cli, "cli", "estimate", "--model-path", CHECKPOINTS[gpu, engine], "--system", SYSTEMS[gpu],
           "--backend", engine, "--estimate-mode", "agg", "--tp", str(pool.tp), "--attention-dp-size", str(dp),
           "--moe-ep-size", str(pool.ep), "--moe-tp-size", str(pool.tp * dp // pool.ep),
           "--bs", str(per_rank), "--isl", str(bench.isl_tokens), "--osl", str(bench.osl_tokens),
           "--prefix", str(int(bench.prefix_reuse_frac * bench.isl_tokens)), "--no-color"]  # fmt: skip
    if gpu == "h200" and engine == "sglang":  # the cookbook's FP8 repack of the experts
        cmd += ["--moe-quant-mode", "fp8_block"]
    if engine == "vllm":  # the recipes' --max-num-batched-tokens and --gpu-memory-utilization
        cmd += [
            "--ctx-tokens",
            str(scn.scheduler.prefill_budget_tokens),
            "--free-gpu-memory-fraction",
            "0.92",
        ]
    else:  # SGLang's chunk per DP rank: --chunked-prefill-size // dp (server_args._handle_data_parallelism)
        cmd += ["--ctx-tokens", str(scn.scheduler.chunk_tokens // dp)]
    if scn.spec_decode.enabled:  # the acceptance `sim validate` runs the case with
        ref = scn.models[0]
        choice = scn.spec_decode.choice(ref.family, ref.accepted_tokens_per_step)
        accepted = choice.accepted_tokens_per_step - 1.0  # drafts accepted per step
        cmd += ["--nextn", str(choice.draft_tokens), "--nextn-accepted", f"{accepted:g}"]
    return cmd


def run_point(cmd: list[str]) -> dict:
    out = subprocess.run(cmd, capture_output=True, text=True)
    text = out.stdout + out.stderr
    row: dict = {}
    for name, pattern in FIELDS.items():
        m = re.search(pattern, text)
        row[name] = float(m.group(1).replace(",", "")) if m else None
    if row["tpot_ms"] is None:
        last = [line for line in text.splitlines() if line.strip()][-1:]
        row["error"] = last[0][:200] if last else f"exit {out.returncode}"
    return row


def main(argv=None) -> int:
    from sim.validate.cases import load_cases

    ap = argparse.ArgumentParser(prog="kernels_bench.aic_validate", description=__doc__.splitlines()[0])
    ap.add_argument("--aic-cli", required=True, help="the aiconfigurator executable (its own environment)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rescore", action="store_true", help="score the points already in --out, run nothing")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [row for case in load_cases(Path("scenarios/validation"))
            for row in _run_point_case(args.aic_cli, case, args.out, args.rescore)]  # fmt: skip
    with (args.out / "summary.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return 0


def _write_points(path: Path, points: list[dict]) -> None:
    fields = sorted({k for p in points for k in p}, key=lambda k: (k == "command", k))
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(points)


def _read_points(path: Path) -> list[dict]:
    with path.open() as f:
        return [{k: (float(v) if k not in ("command", "error") and v else v or None) for k, v in r.items()}
                for r in csv.DictReader(f)]  # fmt: skip


def compare(case, point: dict) -> list[dict]:
    """A `concurrency` case's published metrics beside AIC's at the point (TTFT in seconds, as published)."""
    rows = []
    for metric, published in case.case.published.items():
        field = METRICS.get(metric)
        value = point.get(field) if field else None
        if value is not None and field == "ttft_ms":
            value /= 1000.0
        rows.append({"case": case.case.name, "metric": metric, "published": published, "aic": value,
                     "aic_error": None if value is None else value / published - 1.0,
                     "error": point.get("error")})  # fmt: skip
    return rows


def _run_point_case(cli: str, case, out: Path, rescore: bool = False) -> list[dict]:
    """One case: AIC's agg estimate at the published concurrency, written (or read back) and
    compared metric by metric."""
    path = out / f"{case.case.name}_agg.csv"
    pools = scenario_of(case).cluster.pools
    if len(pools) > 1 or pools[0].role != "colocated":  # AIC's agg mode models one colocated worker
        return compare(case, {"error": "disaggregated: AIC's agg mode models one colocated worker (not run)"})
    if case.case.at.kind != "concurrency":
        return compare(case, {"error": f"at {case.case.at.kind}: needs a sweep (not run)"})
    if rescore:
        point = _read_points(path)[0]
    else:
        c = case.case.at.concurrency
        cmd = command(cli, case, c)
        point = {"requested_concurrency": c, **run_point(cmd), "command": " ".join(cmd[1:])}
        _write_points(path, [point])
    rows = compare(case, point)
    for row in rows:
        print(row, flush=True)
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
