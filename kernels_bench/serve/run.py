"""Replay a canonical trace through the serving engine and write a run directory (kernels_bench.serve.records).

    python3 -m kernels_bench.serve.run --trace traces/replay_v4_reduced.parquet --out RUN_DIR \
        --step PACKAGE.MODULE:FACTORY [--step-arg key=value ...] [--model SIM_MODEL_NAME] \
        [--budget 8192] [--chunk 2048] [--max-batch 64] [--num-blocks N] [--think-scale 1.0] \
        [--commit SHA]

Before the replay, a step function with ``warm_up(context_tokens, max_rows)`` (the served model) captures
every CUDA graph the replay can need: every row bucket up to ``--budget`` rows for every context bucket up
to the trace's largest ``input + output``; the run's provenance records how many, how long, and how many
steps still captured one (0 when the pre-capture covered the run).

``--commit``: the code's commit, recorded in the provenance (set also as ``KB_COMMIT`` for the step
function's own provenance). A device copy of the code may sit inside another checkout, whose git would
name the wrong commit.

``--step standin`` (the default) uses the affine stand-in on a fake clock: a CPU dry run, not a measurement.
Any other ``--step`` names a factory returning a ``StepFunction``, called with the ``--step-arg`` pairs as
keyword arguments (values parsed as JSON where they parse, else kept as strings); the replay then runs on the
wall clock.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shlex
import sys
import time
from pathlib import Path

from kernels_bench.serve.engine import Engine, EngineConfig
from kernels_bench.serve.records import write_run
from kernels_bench.serve.replay import FakeClock, TraceError, WallClock, read_trace, replay
from kernels_bench.serve.standin import StandinStepFunction


def _arg_value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def max_context_tokens(rows) -> int:
    """The largest context a step of this trace can reach: a request's input plus its output."""
    return max((r.input_tokens + r.output_tokens for r in rows), default=0)


def format_summary(s: dict) -> str:
    """The run's summary numbers, one line each (milliseconds for latencies)."""

    def ms(d: dict) -> str:
        return " / ".join(f"{d[k] * 1e3:.1f}" for k in ("p50", "p90", "p99")) if d else "-"

    return "\n".join(
        [
            f"requests {s['completed']}/{s['requests']} completed, {s['steps']} steps",
            f"TTFT p50/p90/p99 ms {ms(s['ttft_s'])}",
            f"TPOT p50/p90/p99 ms {ms(s['tpot_s'])}",
            f"E2E  p50/p90/p99 ms {ms(s['e2e_s'])}",
            f"step wall decode-only ms {ms(s['step_wall_s']['decode_only'])}; "
            f"with prefill ms {ms(s['step_wall_s']['with_prefill'])}",
            f"decode batch {s['decode_batch_min']}..{s['decode_batch_max']}",
            f"requests with hit {s['requests_with_hit']}, without {s['requests_without_hit']}, short of their "
            f"prefix {s['requests_short_of_prefix']}; hit tokens {s['hit_tokens']}, computed {s['computed_tokens']}",
            f"evicted blocks {s['evicted_blocks']}, preemptions {s['preemptions']}, "
            f"steps that captured a graph {s['steps_with_graph_capture']}",
        ]
    )


def build_step(spec: str, pairs: list[str], clock: FakeClock):
    if spec == "standin":
        kwargs = {k: _arg_value(v) for k, v in (p.split("=", 1) for p in pairs)}
        return StandinStepFunction(clock=clock, **kwargs)
    module, _, name = spec.partition(":")
    if not name:
        raise SystemExit(f"--step {spec!r}: expected 'standin' or PACKAGE.MODULE:FACTORY")
    factory = getattr(importlib.import_module(module), name)
    return factory(**{k: _arg_value(v) for k, v in (p.split("=", 1) for p in pairs)})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--step", default="standin")
    ap.add_argument("--step-arg", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--budget", type=int, default=8192, help="tokens per step, decode rows included")
    ap.add_argument("--chunk", type=int, default=2048, help="prefill tokens per sequence per step")
    ap.add_argument("--max-batch", type=int, default=64, help="running sequences")
    ap.add_argument(
        "--num-blocks", type=int, default=None, help="KV blocks used (default: all the step function has)"
    )
    ap.add_argument("--think-scale", type=float, default=1.0)
    ap.add_argument("--no-prefix-caching", action="store_true")
    ap.add_argument(
        "--model", default=None, help="the sim model spec served (provenance; default: the step function's)"
    )
    ap.add_argument(
        "--commit", default=None, help="the code's commit (provenance; default: git's, or KB_COMMIT)"
    )
    args = ap.parse_args(argv)
    for p in args.step_arg:
        if "=" not in p:
            ap.error(f"--step-arg {p!r}: expected KEY=VALUE")
    try:
        rows = read_trace(args.trace)
        cfg = EngineConfig(
            args.budget, args.chunk, args.max_batch, args.num_blocks, not args.no_prefix_caching
        )
    except (TraceError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.commit:
        os.environ["KB_COMMIT"] = args.commit
    fake = FakeClock()
    fn = build_step(args.step, args.step_arg, fake)
    warm = getattr(fn, "warm_up", None)
    if callable(warm):
        t0 = time.perf_counter()
        warm(max_context_tokens(rows), cfg.prefill_budget_tokens)
        print(
            f"pre-captured {getattr(fn, 'pre_captured', '?')} graphs in {time.perf_counter() - t0:.1f} s",
            flush=True,
        )
    clock = fake if args.step == "standin" else WallClock()
    engine = Engine(fn, cfg, clock.now)

    def progress(done: int, total: int) -> None:
        if done % 50 == 0 or done == total:
            print(
                f"[{clock.now():8.1f} s] {done}/{total} requests done, {len(engine.steps)} steps", flush=True
            )

    stats = replay(rows, engine, clock, args.think_scale, progress)
    # the module form, and RUN_DIR for the output folder: no path of the machine that ran it
    given = sys.argv[1:] if argv is None else argv
    argv = ["RUN_DIR" if a == str(args.out) else a for a in given]
    extra = {"command": shlex.join(["python3", "-m", "kernels_bench.serve.run", *argv])}
    if args.model is not None:
        extra["model"] = args.model
    summary = write_run(
        args.out,
        engine,
        rows,
        args.trace,
        args.think_scale,
        stats,
        "fake" if clock is fake else "wall",
        extra,
        args.commit,
    )
    print(format_summary(summary))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
