"""What ``sim`` predicts for the served model's measured step times (CPU; reads a bench table).

    python3 -m kernels_bench.serve.predict hwprofiles/h200/serve/serve_step_times.csv [--out CSV] [--term-from CSV]
    python3 -m kernels_bench.serve.predict --ratio V4_TABLE V41_TABLE [--out CSV]

Builds the calibrated timing of the table's served model (``deepseek-v4-flash-mini`` or
``deepseek-v4.1-flash-mini``, the table's ``spec`` column) on one H200 (TP 1, EP 1, DP 1: every expert
on the GPU) as ``sim calibrate show`` builds it for an instance, with the served engine's settings
(``timing.graph_row_buckets``: its CUDA-graph row buckets, ``kernels_bench.serve.model.ROW_BUCKETS``;
``timing.prefill_attention: decode_kernel``), and evaluates ``step_s`` for each measured point (decode
batch x context, prefill chunk after a cached prefix, mixed), next to the measurement: ``sim_kernels_us``
is the kernel sum with the LM head and the padding and the engine's host time in the step
(``timing.host``, sim.timing.served), no forward-pass term; ``sim_us`` adds the served
model's own term (``timing.forward_term: served``: per layer and per layer-row, least squares over these
points, sim.timing.forward.served_check); ``loo_us`` is each point predicted by the term fitted without
it, the out-of-sample figure. The table's header lines give the fitted term. ``--term-from`` adds
``sim_other_term_us``: the kernel sum plus the term fitted on another table (the other mini's constants).

``--ratio``: the V4.1 mini's step time over the V4 mini's at every point both tables measured, measured and
as sim predicts it with each forward-pass term (``served``: each model's own fit; ``fused_glue``: the
production default; ``none``: the kernel sum).
"""

from __future__ import annotations

import argparse
import csv
import io
from pathlib import Path

SPEC = "deepseek-v4-flash-mini"
SPEC41 = "deepseek-v4.1-flash-mini"
POINT_KEYS = ("mode", "batch", "context_tokens", "chunk_tokens", "prefill_context_tokens")


def served_buckets() -> tuple[int, ...]:
    """The served engine's CUDA-graph row buckets (kernels_bench.serve.model; imports torch)."""
    from kernels_bench.serve.model import ROW_BUCKETS

    return tuple(ROW_BUCKETS)


def mini_context(gpu: str = "h200", stack: str = "production", forward_term: str = "served",
                 row_buckets: tuple[int, ...] | None = None, prefill_through_decode: bool = True,
                 spec: str = SPEC, host: bool = True):  # fmt: skip
    """The timing context of a mini model on one GPU with the served engine's settings (row buckets:
    the engine's when None; host: its in-step host time, sim.timing.served, without the scheduler's gap,
    which the bench does not time)."""
    from sim.config.timing import Timing
    from sim.timing.arith import build_arith
    from sim.timing.factory import TimingContext
    from sim.timing.host import NO_HOST
    from sim.timing.roofline import Parallelism
    from sim.timing.served import served_engine
    from sim.timing.tables import resolve_gpu

    _, profile = resolve_gpu(gpu)
    par = Parallelism(gpus=1, tp=1, ep=1, dp=1)
    buckets = served_buckets() if row_buckets is None else row_buckets
    return TimingContext.of_instance(spec, build_arith(spec), profile, par, Timing(), kernels=stack,
                                     forward_term=forward_term, row_buckets=buckets,
                                     prefill_through_decode=prefill_through_decode,
                                     host=served_engine(gpu, spec).host if host else NO_HOST)  # fmt: skip


def mini_timing(gpu: str = "h200", stack: str = "production", forward_term: str = "served", spec: str = SPEC,
                host: bool = True):  # fmt: skip
    """The calibrated timing of a mini model on one GPU (the served model's instance and settings)."""
    from sim.timing.calibrated import build_calibrated

    return build_calibrated(mini_context(gpu, stack, forward_term, spec=spec, host=host))


def predict_step_s(
    tm, batch: int, context_tokens: int, chunk_tokens: int, chunk_context_tokens: int
) -> float:
    """sim's step time: ``batch`` decodes at ``context_tokens`` plus one prefill chunk (0 = none)."""
    from sim.timing.forward import ServePoint, serve_step_s

    mode = "mixed" if batch and chunk_tokens else "prefill" if chunk_tokens else "decode"
    return serve_step_s(
        tm, ServePoint(0, SPEC, mode, batch, context_tokens, chunk_tokens, chunk_context_tokens, 0.0)
    )


def table_spec(table: Path) -> str:
    """The served model a bench table measured (its first point's ``spec``)."""
    return _read(table)[0]["spec"]


def compare(table: Path, gpu: str = "h200", term_from: Path | None = None) -> tuple[list[dict], dict]:
    """(one row per measured point, the fitted term and its summary); ``term_from``: another table whose
    fitted term is also applied (``sim_other_term_us``)."""
    from sim.timing.forward import served_check

    spec = table_spec(table)
    ctx = mini_context(gpu, spec=spec)
    check = served_check(table, ctx)
    other = None
    if term_from is not None:
        other = served_check(term_from, mini_context(gpu, spec=table_spec(term_from))).term
        padded = mini_timing(gpu, forward_term="none", spec=spec).padded_rows
    layers = ctx.arith.spec.n_layers
    out = []
    for r in check.rows:
        meas = r["measured_us"]
        loo_us = meas * (1.0 + r["loo_error"])
        row = {**{k: r[k] for k in POINT_KEYS},
               "measured_us": round(meas, 1), "sim_kernels_us": round(r["predicted_kernels_us"], 1),
               "sim_us": round(r["predicted_us"], 1), "loo_us": round(loo_us, 1),
               "error": round(r["error"], 4), "loo_error": round(r["loo_error"], 4)}  # fmt: skip
        if other is not None:
            rows = padded(r["batch"] + r["chunk_tokens"])
            us = r["predicted_kernels_us"] + layers * (other.per_layer_s + other.per_layer_row_s * rows) * 1e6
            row["sim_other_term_us"] = round(us, 1)
            row["other_term_error"] = round(us / meas - 1.0, 4)
        out.append(row)
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
    ("glue_us+launch_us", "served_term_us"),  # the term with the engine's host time in the step
)


def sim_parts_us(tm, batch: int, context_tokens: int, chunk_tokens: int, chunk_context_tokens: int) -> dict:
    """sim's step split as the bench splits its kernels (microseconds): LM head, attention (with the indexer),
    dense GEMMs, routed experts, mHC and the served term."""
    rows = tm.padded_rows(batch + chunk_tokens)
    parts = tm.pass_parts(rows)
    total = predict_step_s(tm, batch, context_tokens, chunk_tokens, chunk_context_tokens)
    head = tm.head_s(batch + (1 if chunk_tokens else 0))
    other = {"dense_gemm_us": parts.dense_gemm_s, "moe_gemm_us": parts.moe_gemm_s, "mhc_us": parts.mhc_s,
             "served_term_us": parts.forward_term_s}  # fmt: skip
    other["served_term_us"] += tm.host.in_step_s(batch + (1 if chunk_tokens else 0), rows)
    attention = total - head - sum(other.values())
    return {k: v * 1e6 for k, v in {"lm_head_us": head, "attention_us": attention, **other}.items()}


def breakdown(table: Path) -> list[dict]:
    """Each profiled point of the bench table (``gpu_busy_us`` set): measured kernel categories beside sim's
    parts; ``launch_us`` is the wall time the kernels do not cover (launch gaps, copies)."""
    tm = mini_timing(spec=table_spec(table))
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


RATIO_TERMS = ("served", "fused_glue", "none")


def ratio(v4_table: Path, v41_table: Path, gpu: str = "h200") -> list[dict]:
    """At every point both tables measured: the V4.1 mini's step time over the V4 mini's, measured and as
    sim predicts it with each forward-pass term (RATIO_TERMS; ``served``: each model's own fit)."""

    def measured(table: Path) -> dict:
        return {tuple(int(r[k]) if k != "mode" else r[k] for k in POINT_KEYS): float(r["wall_us_p50"])
                for r in _read(table) if (r.get("wall_us_p50") or "").strip()}  # fmt: skip

    m4, m41 = measured(v4_table), measured(v41_table)
    # the served term with the served engine's host time; the production terms with production's (none)
    tms = {t: (mini_timing(gpu, forward_term=t, spec=SPEC, host=t == "served"),
               mini_timing(gpu, forward_term=t, spec=SPEC41, host=t == "served")) for t in RATIO_TERMS}  # fmt: skip
    out = []
    for key in [k for k in m41 if k in m4]:
        _, b, L, T, C = key
        row = {**dict(zip(POINT_KEYS, key, strict=True)), "v4_us": round(m4[key], 1), "v41_us": round(m41[key], 1),
               "measured_ratio": round(m41[key] / m4[key], 4)}  # fmt: skip
        for t, (t4, t41) in tms.items():
            row[f"sim_ratio_{t}"] = round(predict_step_s(t41, b, L, T, C) / predict_step_s(t4, b, L, T, C), 4)
        out.append(row)
    return out


def _read(path: Path) -> list[dict]:
    lines = [ln for ln in path.read_text().splitlines() if not ln.startswith("#")]
    return list(csv.DictReader(io.StringIO("\n".join(lines))))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="kernels_bench.serve.predict", description=__doc__.splitlines()[0])
    ap.add_argument("table", type=Path, nargs="+", help="a bench table (--ratio: the V4 then the V4.1 table)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--term-from", type=Path, default=None, help="also apply the term fitted on this table")
    ap.add_argument("--ratio", action="store_true", help="V4.1 / V4 step-time ratio, measured and sim's")
    ap.add_argument(
        "--breakdown", action="store_true", help="profiled points: kernel categories vs sim's parts"
    )
    args = ap.parse_args(argv)
    buf = io.StringIO()
    if len(args.table) != (2 if args.ratio else 1):
        ap.error("one bench table (two with --ratio: the V4 then the V4.1 table)")
    if args.ratio:
        return _emit(buf, ratio(*args.table), args.out)
    if args.breakdown:
        return _emit(buf, breakdown(args.table[0]), None)
    rows, term = compare(args.table[0], term_from=args.term_from)
    buf.write(f"# served term: {term['per_layer_us']:.2f} us per layer + {term['per_layer_row_ns']:.3f} ns per layer-row; "
              f"|error| median {term['median_abs_error']:.4f}, max {term['max_abs_error']:.4f}; "
              f"leave-one-out |error| median {term['loo_median_abs_error']:.4f}, max {term['loo_max_abs_error']:.4f}\n")  # fmt: skip
    return _emit(buf, rows, args.out)


def _emit(buf: io.StringIO, rows: list[dict], out: Path | None) -> int:
    """Rows as CSV after what ``buf`` holds, to stdout and to ``out`` when given."""
    w = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else [], lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    if out:
        out.write_text(buf.getvalue())
    print(buf.getvalue(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
