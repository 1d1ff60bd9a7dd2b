"""What ``sim`` predicts for the served model's measured step times (CPU; reads a bench table).

    python3 -m kernels_bench.serve.predict hwprofiles/h200/serve/serve_step_times.csv [--out CSV]

Builds the calibrated timing of ``deepseek-v4-flash-mini`` on one H200 (TP 1, EP 1, DP 1: every expert
on the GPU) as ``sim calibrate show`` builds it for an instance, and evaluates ``step_s`` for each
measured point (decode batch x context, prefill chunk after a cached prefix, mixed), next to the
measurement: the step-time error of the timing model alone, before any engine behaviour.
"""

from __future__ import annotations

import argparse
import csv
import io
from dataclasses import replace
from pathlib import Path

SPEC = "deepseek-v4-flash-mini"


def mini_timing(gpu: str = "h200", stack: str = "production"):
    """The calibrated timing of the mini model on one GPU (the served model's instance)."""
    from sim.cli.calibrate_cmd import _resolve
    from sim.cluster.build import efficiency, hw_rates
    from sim.config.timing import Timing
    from sim.timing.arith import build_arith
    from sim.timing.calibrated import build_calibrated
    from sim.timing.factory import TimingContext
    from sim.timing.roofline import Parallelism

    _, profile = _resolve(gpu)
    timing = Timing()
    arith = build_arith(SPEC)
    achievable = {k: getattr(profile.achievable, k).value for k in type(profile.achievable).model_fields}
    eff = efficiency(achievable, timing)
    eff = replace(eff, step_overhead_s=eff.step_overhead_s * arith.layers)
    par = Parallelism(gpus=1, tp=1, ep=1, dp=1)
    rates = hw_rates(profile, timing.scale_out_latency_s)
    ctx = TimingContext(SPEC, arith, profile, rates, par, eff, 1.0, 0, False, True, kernels=stack)
    return build_calibrated(ctx)


def predict_step_s(
    tm, batch: int, context_tokens: int, chunk_tokens: int, chunk_context_tokens: int
) -> float:
    """sim's step time: ``batch`` decodes at ``context_tokens`` plus one prefill chunk (0 = none)."""
    from sim.timing.batch import DecodeTerms, PrefillChunk

    terms = tm.decode_seq_terms(context_tokens, 1).scaled(batch) if batch else DecodeTerms()
    chunks = [PrefillChunk(chunk_tokens, chunk_context_tokens, last_chunk=True)] if chunk_tokens else []
    return tm.step_s(batch, terms, chunks)


def _read(path: Path) -> list[dict]:
    lines = [ln for ln in path.read_text().splitlines() if not ln.startswith("#")]
    return list(csv.DictReader(io.StringIO("\n".join(lines))))


def compare(rows: list[dict], tm) -> list[dict]:
    out = []
    for r in rows:
        if not r.get("wall_us_p50"):
            continue
        b, L = int(r["batch"]), int(r["context_tokens"])
        T, C = int(r["chunk_tokens"]), int(r["prefill_context_tokens"])
        pred_us = predict_step_s(tm, b, L, T, C) * 1e6
        meas = float(r["wall_us_p50"])
        out.append(
            {
                "mode": r["mode"],
                "batch": b,
                "context_tokens": L,
                "chunk_tokens": T,
                "prefill_context_tokens": C,
                "measured_us": round(meas, 1),
                "sim_us": round(pred_us, 1),
                "sim_over_measured": round(pred_us / meas, 3),
            }
        )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="kernels_bench.serve.predict", description=__doc__.splitlines()[0])
    ap.add_argument("table", type=Path)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    rows = compare(_read(args.table), mini_timing())
    cols = list(rows[0]) if rows else []
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    if args.out:
        args.out.write_text(buf.getvalue())
    print(buf.getvalue(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
