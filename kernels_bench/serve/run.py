"""Replay a canonical trace through the serving engine and write a run directory (kernels_bench.serve.records).

    python3 -m kernels_bench.serve.run --trace traces/replay_v4_reduced.parquet --out RUN_DIR \
        --step PACKAGE.MODULE:FACTORY [--step-arg key=value ...] [--model SIM_MODEL_NAME] \
        [--budget 8192] [--chunk 2048] [--max-batch 64] [--num-blocks N] [--think-scale 1.0]

The issue-14 run (what ``sim validate --real`` is checked on) uses these defaults and ``--num-blocks 1024``
(262,144 tokens of KV: the 48 sessions' contexts overflow it late in the replay, so cached prefixes are
evicted and some later turns miss part of theirs; with every block of the GPU nothing is ever evicted).

``--step standin`` (the default) uses the affine stand-in on a fake clock: a CPU dry run, not a measurement.
Any other ``--step`` names a factory returning a ``StepFunction``, called with the ``--step-arg`` pairs as
keyword arguments (values parsed as JSON where they parse, else kept as strings); the replay then runs on the
wall clock.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shlex
import sys
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
    fake = FakeClock()
    fn = build_step(args.step, args.step_arg, fake)
    clock = fake if args.step == "standin" else WallClock()
    engine = Engine(fn, cfg, clock.now)

    def progress(done: int, total: int) -> None:
        if done % 50 == 0 or done == total:
            print(
                f"[{clock.now():8.1f} s] {done}/{total} requests done, {len(engine.steps)} steps", flush=True
            )

    stats = replay(rows, engine, clock, args.think_scale, progress)
    # the module form, and RUN_DIR for the output folder: no path of the machine that ran it
    argv = ["RUN_DIR" if a == str(args.out) else a for a in sys.argv[1:]]
    extra = {"command": shlex.join(["python3", "-m", "kernels_bench.serve.run", *argv])}
    if args.model is not None:
        extra["model"] = args.model
    write_run(
        args.out,
        engine,
        rows,
        args.trace,
        args.think_scale,
        stats,
        "fake" if clock is fake else "wall",
        extra,
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
