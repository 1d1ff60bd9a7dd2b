"""What ``sim`` predicts for the served model's measured step times (CPU; reads a bench table).

    python3 -m kernels_bench.serve.predict hwprofiles/h200/serve/serve_step_times.csv [--out CSV]

Builds the calibrated timing of ``deepseek-v4-flash-mini`` on one H200 (TP 1, EP 1, DP 1: every expert
on the GPU) as ``sim calibrate show`` builds it for an instance, with the served engine's settings
(``timing.graph_row_buckets``: its CUDA-graph row buckets, ``kernels_bench.serve.model.ROW_BUCKETS``;
``timing.prefill_attention: decode_kernel``), and evaluates ``step_s`` for each measured point (decode
batch x context, prefill chunk after a cached prefix, mixed), next to the measurement: ``sim_kernels_us``
is the kernel sum with the LM head and the padding, no forward-pass term; ``sim_us`` adds the served
model's own term (``timing.forward_term: served``: per layer and per layer-row, least squares over these
points, sim.timing.forward.served_check); ``loo_us`` is each point predicted by the term fitted without
it, the out-of-sample figure. The table's header lines give the fitted term.
"""

from __future__ import annotations

import argparse
import csv
import io
from dataclasses import replace
from pathlib import Path

SPEC = "deepseek-v4-flash-mini"


def served_buckets() -> tuple[int, ...]:
    """The served engine's CUDA-graph row buckets (kernels_bench.serve.model; imports torch)."""
    from kernels_bench.serve.model import ROW_BUCKETS

    return tuple(ROW_BUCKETS)


def mini_context(gpu: str = "h200", stack: str = "production", forward_term: str = "served",
                 row_buckets: tuple[int, ...] | None = None, prefill_through_decode: bool = True):  # fmt: skip
    """The timing context of the mini model on one GPU with the served engine's settings (row buckets:
    the engine's when None)."""
    from sim.cli.calibrate_cmd import _resolve
    from sim.cluster.build import efficiency, hw_rates
    from sim.config.timing import Timing
    from sim.timing.arith import build_arith
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
    buckets = served_buckets() if row_buckets is None else row_buckets
    return TimingContext(SPEC, arith, profile, rates, par, eff, 1.0, 0, False, True, kernels=stack,
                         forward_term=forward_term, row_buckets=buckets,
                         prefill_through_decode=prefill_through_decode)  # fmt: skip


def mini_timing(gpu: str = "h200", stack: str = "production", forward_term: str = "served"):
    """The calibrated timing of the mini model on one GPU (the served model's instance and settings)."""
    from sim.timing.calibrated import build_calibrated

    return build_calibrated(mini_context(gpu, stack, forward_term))


def predict_step_s(
    tm, batch: int, context_tokens: int, chunk_tokens: int, chunk_context_tokens: int
) -> float:
    """sim's step time: ``batch`` decodes at ``context_tokens`` plus one prefill chunk (0 = none)."""
    from sim.timing.forward import ServePoint, serve_step_s

    mode = "mixed" if batch and chunk_tokens else "prefill" if chunk_tokens else "decode"
    return serve_step_s(
        tm, ServePoint(0, SPEC, mode, batch, context_tokens, chunk_tokens, chunk_context_tokens, 0.0)
    )


def compare(table: Path, gpu: str = "h200") -> tuple[list[dict], dict]:
    """(one row per measured point, the fitted term and its summary)."""
    from sim.timing.forward import served_check

    check = served_check(table, mini_context(gpu))
    out = []
    for r in check.rows:
        meas = r["measured_us"]
        loo_us = meas * (1.0 + r["loo_error"])
        out.append({**{k: r[k] for k in ("mode", "batch", "context_tokens", "chunk_tokens", "prefill_context_tokens")},
                    "measured_us": round(meas, 1), "sim_kernels_us": round(r["predicted_kernels_us"], 1),
                    "sim_us": round(r["predicted_us"], 1), "loo_us": round(loo_us, 1),
                    "error": round(r["error"], 4), "loo_error": round(r["loo_error"], 4)})  # fmt: skip
    t = check.term
    return out, {
        "per_layer_us": t.per_layer_s * 1e6,
        "per_layer_row_ns": t.per_layer_row_s * 1e9,
        **check.summary(),
    }


# the bench's kernel categories (kernels_bench.serve.breakdown) -> sim's parts of a step
BREAKDOWN = (
    ("lm_head_embed_us", "lm_head_us"),
    ("attention_us+indexer_us", "attention_us"),
    ("dense_gemm_us", "dense_gemm_us"),
    ("moe_gemm_us", "moe_gemm_us"),
    ("mhc_us", "mhc_us"),
    ("glue_us+launch_us", "served_term_us"),
)


def sim_parts_us(tm, batch: int, context_tokens: int, chunk_tokens: int, chunk_context_tokens: int) -> dict:
    """sim's step split as the bench splits its kernels (microseconds): LM head, attention (with the indexer),
    dense GEMMs, routed experts, mHC and the served term."""
    rows = tm.padded_rows(batch + chunk_tokens)
    parts = [a + b for a, b in zip(tm._class_parts(True, rows), tm._class_parts(False, rows), strict=True)]
    total = predict_step_s(tm, batch, context_tokens, chunk_tokens, chunk_context_tokens)
    head = tm.head_s(batch + (1 if chunk_tokens else 0))
    other = dict(zip(("dense_gemm_us", "moe_gemm_us", "mhc_us", "served_term_us"), parts, strict=True))
    attention = total - head - sum(other.values())
    return {k: v * 1e6 for k, v in {"lm_head_us": head, "attention_us": attention, **other}.items()}


def breakdown(table: Path) -> list[dict]:
    """Each profiled point of the bench table (``gpu_busy_us`` set): measured kernel categories beside sim's
    parts; ``launch_us`` is the wall time the kernels do not cover (launch gaps, copies)."""
    tm = mini_timing()
    out = []
    for r in _read(table):
        if not (r.get("gpu_busy_us") or "").strip():
            continue
        meas = {k: float(r[k]) for k in ("lm_head_embed_us", "attention_us", "indexer_us", "moe_gemm_us",
                                        "dense_gemm_us", "mhc_us", "glue_us")}  # fmt: skip
        meas["launch_us"] = float(r["wall_us_p50"]) - float(r["gpu_busy_us"])
        b, L, T, C = (
            int(r[k]) for k in ("batch", "context_tokens", "chunk_tokens", "prefill_context_tokens")
        )
        sim = sim_parts_us(tm, b, L, T, C)
        row = {
            "mode": r["mode"],
            "batch": b,
            "context_tokens": L,
            "chunk_tokens": T,
            "prefill_context_tokens": C,
        }
        for measured, simulated in BREAKDOWN:
            row[measured] = round(sum(meas[k] for k in measured.split("+")), 1)
            row["sim_" + simulated] = round(sim[simulated], 1)
        out.append(row)
    return out


def _read(path: Path) -> list[dict]:
    lines = [ln for ln in path.read_text().splitlines() if not ln.startswith("#")]
    return list(csv.DictReader(io.StringIO("\n".join(lines))))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="kernels_bench.serve.predict", description=__doc__.splitlines()[0])
    ap.add_argument("table", type=Path)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument(
        "--breakdown", action="store_true", help="profiled points: kernel categories vs sim's parts"
    )
    args = ap.parse_args(argv)
    buf = io.StringIO()
    if args.breakdown:
        rows = breakdown(args.table)
        w = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else [], lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        print(buf.getvalue(), end="")
        return 0
    rows, term = compare(args.table)
    buf.write(f"# served term: {term['per_layer_us']:.2f} us per layer + {term['per_layer_row_ns']:.3f} ns per layer-row; "
              f"|error| median {term['median_abs_error']:.4f}, max {term['max_abs_error']:.4f}; "
              f"leave-one-out |error| median {term['loo_median_abs_error']:.4f}, max {term['loo_max_abs_error']:.4f}\n")  # fmt: skip
    w = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else [], lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    if args.out:
        args.out.write_text(buf.getvalue())
    print(buf.getvalue(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
