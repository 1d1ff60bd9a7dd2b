"""AIConfigurator itself on sim's shipped validation cases (issue 28, item 4c): the peer's error beside sim's.

    python3 -m kernels_bench.aic_validate --aic-cli /path/to/bin/aiconfigurator --out docs/carry/aic/validation

For each case in scenarios/validation/ the tool builds the `aiconfigurator cli estimate --estimate-mode agg`
command the case's setup describes (system and checkpoint per GPU, TP / attention DP / expert EP and TP, ISL,
OSL, the cached prefix = prefix_reuse_frac x ISL, vLLM's token budget as --ctx-tokens, MTP draft tokens
with sim's default acceptance), runs it over concurrencies, and scores it as `sim validate` scores sim: the
output tokens/s per GPU where the TPOT reaches the case's `at.tpot_p50_ms`, interpolated between concurrencies
(AIC's agg mode is one steady IFB state per concurrency, its TPOT an average, not a p50). It also records AIC
at the published concurrency. AIC is run as a separate program (its own environment); nothing of it is
imported here.
"""

from __future__ import annotations

import argparse
import csv
import re
import subprocess
from pathlib import Path

# sim GPU key -> (AIC system, the checkpoint AIC models for V4-Flash there; published_2026-12.md §6: H200 FP8 only)
SYSTEMS = {
    "b200": ("b200_sxm", "nvidia/DeepSeek-V4-Flash-NVFP4"),
    "h200": ("h200_sxm", "sgl-project/DeepSeek-V4-Flash-FP8"),
}
CONCURRENCY = (1, 2, 4, 8, 12, 16, 24, 32, 38, 48, 64)
MODES = ("agg", "static_gen")
FIELDS = {"tpot_ms": r"TPOT:\s+([\d.,]+) ms", "ttft_ms": r"TTFT:\s+([\d.,]+) ms",
          "tokens_per_s_per_gpu": r"tokens/s/gpu:\s+([\d.,]+)", "tokens_per_s_per_user": r"tokens/s/user:\s+([\d.,]+)",
          "concurrency": r"Concurrency:\s+([\d.,]+)"}  # fmt: skip


def scenario_of(case):
    from sim.config.errors import validate_or_raise
    from sim.config.scenario import Scenario

    return validate_or_raise(Scenario, case.scenario, file=str(case.path))


def command(cli: str, case, concurrency: int, mode: str = "agg") -> list[str]:
    """The estimate command for one validation case at one concurrency (per instance) in one AIC mode: `agg`
    (in-flight batching with the case's prefill) or `static_gen` (decode alone at the ISL's context)."""
    from sim.hardware import load_hw
    from sim.timing.tables import gpu_key

    scn = scenario_of(case)
    pool = scn.cluster.pools[0]
    system, model = SYSTEMS[gpu_key(load_hw(scn.hardware))]
    bench = scn.workload.benchmark
    dp = pool.dp
    per_rank = max(1, round(concurrency / dp))
    cmd = [cli, "cli", "estimate", "--model-path", model, "--system", system, "--backend", "vllm",
           "--estimate-mode", mode, "--tp", str(pool.tp), "--attention-dp-size", str(dp),
           "--moe-ep-size", str(pool.ep), "--moe-tp-size", str(pool.tp * dp // pool.ep),
           "--bs", str(per_rank), "--isl", str(bench.isl_tokens), "--osl", str(bench.osl_tokens),
           "--prefix", str(int(bench.prefix_reuse_frac * bench.isl_tokens)), "--no-color"]  # fmt: skip
    if mode == "agg":  # vLLM's --max-num-batched-tokens and --gpu-memory-utilization of the recipes
        cmd += [
            "--ctx-tokens",
            str(scn.scheduler.prefill_budget_tokens),
            "--free-gpu-memory-fraction",
            "0.92",
        ]
    if scn.spec_decode.enabled:  # sim's own default acceptance, as `sim validate` runs the case
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


def at_tpot(points: list[dict], tpot_ms: float) -> float | None:
    """The most tokens/s/GPU at a TPOT <= `tpot_ms`: over the concurrencies that meet it and the crossings
    of `tpot_ms` between neighbouring ones (linear); AIC's TPOT need not grow monotonically (static_gen)."""
    ok = [p for p in points if p.get("tpot_ms") is not None]
    found = [p["tokens_per_s_per_gpu"] for p in ok if p["tpot_ms"] <= tpot_ms]
    for a, b in zip(ok, ok[1:], strict=False):
        lo, hi = sorted((a["tpot_ms"], b["tpot_ms"]))
        if lo <= tpot_ms <= hi and hi > lo:
            f = (tpot_ms - a["tpot_ms"]) / (b["tpot_ms"] - a["tpot_ms"])
            found.append(
                a["tokens_per_s_per_gpu"] + f * (b["tokens_per_s_per_gpu"] - a["tokens_per_s_per_gpu"])
            )
    return max(found) if found else None


def main(argv=None) -> int:
    from sim.validate.cases import load_cases

    ap = argparse.ArgumentParser(prog="kernels_bench.aic_validate", description=__doc__.splitlines()[0])
    ap.add_argument("--aic-cli", required=True, help="the aiconfigurator executable (its own environment)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rescore", action="store_true", help="score the points already in --out, run nothing")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    summary = [_run_case(args.aic_cli, case, mode, args.out, args.rescore)
               for case in load_cases(Path("scenarios/validation")) for mode in MODES]  # fmt: skip
    with (args.out / "summary.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(summary[0]))
        w.writeheader()
        w.writerows(summary)
    return 0


def _run_case(cli: str, case, mode: str, out: Path, rescore: bool = False) -> dict:
    """One case in one AIC mode over the concurrencies: its points written (or read back), its scores."""
    name, published = case.case.name, case.case.published
    path = out / f"{name}_{mode}.csv"
    if rescore:
        with path.open() as f:
            points = [{k: (float(v) if k not in ("command", "error") and v else v or None) for k, v in r.items()}
                      for r in csv.DictReader(f)]  # fmt: skip
    else:
        points = []
        for c in CONCURRENCY:
            cmd = command(cli, case, c, mode)
            points.append({"requested_concurrency": c, **run_point(cmd), "command": " ".join(cmd[1:])})
        fields = sorted({k for p in points for k in p}, key=lambda k: (k == "command", k))
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(points)
    value = at_tpot(points, case.case.at.tpot_p50_ms)
    published_c = _published_concurrency(case)
    at_c = next((p for p in points if p["requested_concurrency"] == published_c), {})
    tpots = [p["tpot_ms"] for p in points if p.get("tpot_ms") is not None]
    row = {"case": name, "mode": mode, "published": published, "aic_at_tpot": value,
           "aic_error_at_tpot": None if value is None else value / published - 1.0,
           "aic_min_tpot_ms": min(tpots) if tpots else None, "published_concurrency": published_c,
           "aic_tpot_ms_at_published_concurrency": at_c.get("tpot_ms"),
           "aic_tokens_per_s_per_gpu_at_published_concurrency": at_c.get("tokens_per_s_per_gpu")}  # fmt: skip
    print(row, flush=True)
    return row


def _published_concurrency(case) -> int:
    return int(scenario_of(case).workload.benchmark.concurrency)


if __name__ == "__main__":
    raise SystemExit(main())
