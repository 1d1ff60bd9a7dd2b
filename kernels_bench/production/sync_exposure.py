"""What a host wait in every MoE layer costs an eager V4 pass (issue 29, docs/carry/eager/README.md
"A host wait in every MoE layer": measured 2026-12-06, it adds 0-4 %).

SGLang v0.5.15's DeepEP normal dispatch (`--moe-a2a-backend deepep`, every step holding a prefill chunk) makes the
host wait for the GPU once per MoE layer: DeepEP's `intranode_dispatch` busy-polls the receive counts that its
`notify_dispatch` kernel writes before it can size the receive buffers (`num_worst_tokens == 0`). Without such a
wait an eager pass lasts max(GPU time, host issue time) (docs/carry/eager, measured); with one, the GPU's queue
drains at every layer and the host cannot run ahead past it. This measures what that adds, on the production pass
(kernels_bench.production.forward), at prefill chunks and decode batches that put the GPU's time below, near and
above the host's:

- `graph_us`: the pass as one CUDA graph (its GPU time);
- `host_us`: the host's time to issue the eager pass (no wait inside);
- `eager_us` / `eager_wait_us`: the eager pass's wall time (host clock, synchronised before and after), without
  and with a stream synchronisation after each layer's routing, where DeepEP's dispatch would wait;
- the same two walls predicted by `pipeline_s` from each op's host issue time and GPU time (torch.profiler: the
  device time of the kernels each op launches) -- the check that the two-queue model explains the measurement
  (it did not within 10 %: eager ops' profiled device times sum above the graph's).

    python3 -m kernels_bench.production.sync_exposure --out DIR [--commit SHA]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import torch

from kernels_bench.production import forward as fw

WAIT_AFTER = "route_dispatch"  # the op after which DeepEP's dispatch waits for the receive counts
COLUMNS = (
    "stack",
    "mode",
    "batch",
    "chunk_tokens",
    "context_tokens",
    "graph_us",
    "host_us",
    "eager_us",
    "eager_wait_us",
    "wait_added_us",
    "exposed_frac",
    "pipeline_eager_us",
    "pipeline_wait_us",
    "op_host_sum_us",
    "op_gpu_sum_us",
    "note",
)
# (stack, mode, batch, chunk): prefill chunks from host-bound to GPU-bound on the H100 (docs/carry/eager: issue
# ~5-6 ms a layer; GPU 2 ms a layer at 512 tokens, 12 ms at 4,096), two decode batches (host-bound)
POINTS = (
    [("reduced", "prefill", 1, t) for t in (512, 1024, 2048, 3072, 4096, 8192)]
    + [("layer", "prefill", 1, t) for t in (1024, 2048, 4096)]
    + [("reduced", "decode", b, 0) for b in (64, 256)]
)
CONTEXT = 8 * 1024


class Op(NamedTuple):
    """One op of a pass as the two-queue model reads it."""

    host_s: float  # the host's time to issue it
    gpu_s: float  # its kernels' time on the GPU
    wait: bool  # the host waits for the GPU to drain after issuing it


def pipeline_s(ops: Sequence[Op]) -> float:
    """Wall time of a pass issued op by op: each op's kernels start once the host has issued it and the GPU has
    finished the op before; after an op marked `wait` the host waits until the GPU is done, then goes on. The
    pass ends when both the host and the GPU are done."""
    host = gpu = 0.0
    for op in ops:
        host += op.host_s
        gpu = max(gpu, host) + op.gpu_s
        if op.wait:
            host = max(host, gpu)
    return max(host, gpu)


def wait_ops(stack: fw.Stack) -> list:
    """The stack's ops with a stream synchronisation after each layer's routing."""

    def sync() -> None:
        torch.cuda.current_stream().synchronize()

    out = []
    for cat, name, fn in stack.op_list:
        out.append((cat, name, fn))
        if name == WAIT_AFTER:
            out.append(("wait", "dispatch_wait", sync))
    return out


def wall_us(stack: fw.Stack, ops: list, passes: int = 9) -> float:
    """Median wall time (us) of one eager pass of `ops`, the GPU idle before and drained after."""
    out = []
    for _ in range(passes):
        torch.cuda.synchronize()
        stack.reset()
        t = time.perf_counter()
        for _, _, fn in ops:
            fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t) * 1e6)
    return statistics.median(out)


def op_times(stack: fw.Stack) -> list[Op]:
    """Each op's host issue time (median over passes, no wait inside) and its kernels' device time (profiler)."""
    from kernels_bench.production.host_issue import OP_RANGE, op_host_us, profiled_pass

    host = op_host_us(stack)
    gpu = [0.0] * len(stack.op_list)
    for e in profiled_pass(stack):
        if e.name.startswith(OP_RANGE):
            gpu[int(e.name[len(OP_RANGE) :])] = e.device_time_total
    return [
        Op(h * 1e-6, g * 1e-6, name == WAIT_AFTER)
        for h, g, (_, name, _) in zip(host, gpu, stack.op_list, strict=True)
    ]


def measure_point(kern, spec: str, mode: str, batch: int, chunk: int) -> dict:
    from kernels_bench.timing import time_calls

    kinds = fw.STACKS[spec]
    stack = fw.Stack(
        kinds, fw.Dims(), kern, mode=mode, batch=batch, context=CONTEXT, chunk=chunk, device="cuda"
    )
    for _ in range(3):  # JIT compilation, autotuning, allocator warm-up
        stack.run()
    torch.cuda.synchronize()
    graph = time_calls([stack.run], samples=15, max_seconds=2.0).median_us
    host = fw.eager_host_us(stack, passes=9)
    waits = wait_ops(stack)
    wall_us(stack, waits, passes=2)  # warm the waiting variant
    eager, eager_wait = wall_us(stack, stack.op_list), wall_us(stack, waits)
    ops = op_times(stack)
    n = len(kinds)
    plain = [op._replace(wait=False) for op in ops]
    row = dict(
        stack=spec, mode=mode, batch=batch, chunk_tokens=chunk, context_tokens=CONTEXT,
        graph_us=round(graph, 1), host_us=round(host, 1), eager_us=round(eager, 1),
        eager_wait_us=round(eager_wait, 1), wait_added_us=round(eager_wait - eager, 1),
        exposed_frac=round((eager_wait - eager) / min(graph, host), 3),
        pipeline_eager_us=round(pipeline_s(plain) * 1e6, 1), pipeline_wait_us=round(pipeline_s(ops) * 1e6, 1),
        op_host_sum_us=round(sum(o.host_s for o in ops) * 1e6, 1),
        op_gpu_sum_us=round(sum(o.gpu_s for o in ops) * 1e6, 1), note=f"{n} layers",
    )  # fmt: skip
    del stack
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="kernels_bench.production.sync_exposure", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--commit", default=None)
    ap.add_argument("--budget-s", type=float, default=240.0)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print(
            "error: CUDA is not available (the host-wait measurement runs on the GPU machine)",
            file=sys.stderr,
        )
        return 2
    from kernels_bench.production.host_issue import host_provenance, write_csv

    args.out.mkdir(parents=True, exist_ok=True)
    prov = host_provenance(args.commit)
    kern = fw.GpuKernels()
    rows: list[dict] = []
    t0 = time.monotonic()
    for spec, mode, batch, chunk in POINTS:
        if time.monotonic() - t0 > args.budget_s:
            print(f"budget exhausted before {spec} {mode} {batch} {chunk}", flush=True)
            break
        try:
            row = measure_point(kern, spec, mode, batch, chunk)
        except Exception as e:  # noqa: BLE001 - a point that fails is reported, never silent
            row = dict(
                stack=spec, mode=mode, batch=batch, chunk_tokens=chunk, note=f"{type(e).__name__}: {e}"[:200]
            )
        torch.cuda.empty_cache()
        rows.append(row)
        print(json.dumps(row), flush=True)
        write_csv(args.out / "sync_exposure.csv", COLUMNS, rows, prov)
    prov["elapsed_s"] = round(time.monotonic() - t0, 1)
    write_csv(args.out / "sync_exposure.csv", COLUMNS, rows, prov)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
