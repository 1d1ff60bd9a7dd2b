"""What the host pays to issue an eager V4 layer, op by op and launch by launch (issue 29, docs/carry/eager).

SGLang v0.5.15 runs every V4 prefill step eagerly, and such a step lasts at least the host's time to issue it
(docs/carry/eager: measured on the production pass). SGLang's own layer takes its launches times what a launch
costs the host. This measures the second factor on the device's host, for the libraries SGLang's V4 layer
calls, two ways:

- **in the production pass** (kernels_bench.production.forward) run eagerly: each op's host time to issue it
  (no synchronisation inside, median over passes) and its launches (the CUDA runtime / driver launch and copy
  calls torch.profiler records inside the op's range); the pass's host time per launch;
- **bare calls**: one library call issued back to back at a small shape (the GPU outruns the host, so the
  host's time per call is what is timed), with its launches per call.

The pass's ops carry their own torch glue (quantisation, RoPE, routing as torch ops), so its host time per
launch, not per op, is what carries to another engine's layer.

    python3 -m kernels_bench.production.host_issue --out DIR [--commit SHA]
"""

from __future__ import annotations

import argparse
import bisect
import csv
import io
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from kernels_bench.production import forward as fw

# what the profiler records when the host hands the GPU work: kernel launches (runtime and driver API, Triton
# launches through the driver), copies and fills
LAUNCH_CALLS = (
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cudaLaunchCooperativeKernel",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cudaMemcpyAsync",
    "cudaMemsetAsync",
)
OPS_COLUMNS = (
    "stack",
    "layer_kinds",
    "mode",
    "chunk_tokens",
    "op_index",
    "category",
    "op",
    "launches",
    "host_us_p50",
)
CALL_COLUMNS = ("call", "library", "launches_per_call", "host_us_per_call", "note")
STACKS = {"layer": ["CSA"], "reduced": ["SWA", "CSA", "HCA", "CSA", "HCA"]}
PREFILL_CHUNK = 512  # host-bound on the H100 / H200 (docs/carry/eager: issue 6.0-6.2 ms a layer, GPU 2 ms)
PREFILL_CONTEXT = 8 * 1024


def is_launch(name: str) -> bool:
    return name.startswith(LAUNCH_CALLS)


def attribute_launches(
    op_ranges: list[tuple[float, float, int]], launch_starts: list[float], n_ops: int
) -> list[int]:
    """Launches per op: each launch call's start time falls in at most one op's [start, end) range (ops run
    one after another on one thread). Ranges in any order; launches outside every range are not counted."""
    ranges = sorted(op_ranges)
    starts = [r[0] for r in ranges]
    counts = [0] * n_ops
    for t in launch_starts:
        i = bisect.bisect_right(starts, t) - 1
        if i >= 0 and t < ranges[i][1]:
            counts[ranges[i][2]] += 1
    return counts


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def op_host_us(stack: fw.Stack, passes: int = 9) -> list[float]:
    """Median host time (us) to issue each op of the pass, timed op by op inside whole eager passes."""
    times: list[list[float]] = [[] for _ in stack.op_list]
    for _ in range(passes):
        _sync()
        stack.reset()
        for i, (_, _, fn) in enumerate(stack.op_list):
            t = time.perf_counter()
            fn()
            times[i].append((time.perf_counter() - t) * 1e6)
    _sync()
    return [statistics.median(t) for t in times]


OP_RANGE = "hostissue_op#"  # the profiler range each op of a profiled pass runs in, then its index


def profiled_pass(stack: fw.Stack) -> list:
    """The profiler's events of one eager pass, each op inside its own `OP_RANGE` range (CUDA activity too
    where there is a GPU)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    stack.reset()
    with profile(activities=acts) as prof:
        for i, (_, _, fn) in enumerate(stack.op_list):
            with record_function(f"{OP_RANGE}{i}"):
                fn()
        _sync()
    return list(prof.events())


def op_launches(stack: fw.Stack) -> list[int]:
    """Launch calls inside each op's range in one profiled eager pass (zero on a CPU-only machine)."""
    ranges, launches = [], []
    for e in profiled_pass(stack):
        if e.name.startswith(OP_RANGE):
            ranges.append((e.time_range.start, e.time_range.end, int(e.name[len(OP_RANGE) :])))
        elif is_launch(e.name):
            launches.append(e.time_range.start)
    return attribute_launches(ranges, launches, len(stack.op_list))


def call_launches(fn: Callable[[], object]) -> int:
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=acts) as prof:
        fn()
        _sync()
    return sum(1 for e in prof.events() if is_launch(e.name))


def per_call_us(fn: Callable[[], object], calls: int = 200) -> float:
    """Host time (us) per call of `fn` issued back to back (median of 5 batches); the GPU outruns the host at
    the small shapes used, so the stream's queue never fills and the launches do not block."""
    for _ in range(3):
        fn()
    _sync()
    out = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t) * 1e6 / calls)
        _sync()
    return statistics.median(out)


def bare_calls(device: str) -> list[tuple[str, str, Callable[[], object], str]]:
    """(call, library, fn, note) at small shapes: what SGLang's V4 layer calls, one call each."""
    from kernels_bench.production import deepgemm as dgm

    x = torch.randn(512, 4096, device=device, dtype=torch.bfloat16)
    y = torch.randn_like(x)
    calls: list[tuple[str, str, Callable[[], object], str]] = [
        ("torch.add_ (one elementwise kernel)", "torch", lambda: x.add_(y), "512 x 4096 bf16"),
        ("torch.empty (no kernel)", "torch", lambda: torch.empty(512, 4096, device=device), "allocator only"),
    ]

    @torch.library.custom_op("hostissue::add_", mutates_args=("a",))
    def _custom_add(a: torch.Tensor, b: torch.Tensor) -> None:
        a.add_(b)

    calls.append(
        ("torch.library custom op around add_", "torch", lambda: _custom_add(x, y),
         "SGLang registers its kernels as torch custom ops (direct_register_custom_op)")
    )  # fmt: skip
    try:
        import triton
        import triton.language as tl

        @triton.jit
        def _copy(src, dst, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)

        src, dst = x.view(-1), y.view(-1)
        grid = (triton.cdiv(src.numel(), 4096),)
        calls.append(
            ("Triton kernel launch (a copy)", "triton", lambda: _copy[grid](src, dst, src.numel(), BLOCK=4096),
             "the launcher's own cost")
        )  # fmt: skip
    except Exception as e:  # noqa: BLE001 - a missing library is a row note, not a failed call
        calls.append(("Triton kernel launch (a copy)", "triton", None, f"{type(e).__name__}: {e}"))
    dg_cases = [
        ("DeepGEMM fp8_gemm_nt (dense FP8 linear, 512 x 1024 x 4096)", lambda: dgm.DenseCase(512, 1024, 4096, device, 1)),
        ("DeepGEMM m_grouped_fp8_gemm_nt_contiguous (8 x 64 rows, 4096 x 4096)",
         lambda: dgm.ContiguousCase(8, 64, 4096, 4096, device, 1)),
        ("DeepGEMM fp8_mqa_logits (indexer prefill, 512 rows, 64 heads, 8K context / 4)",
         lambda: dgm.PrefillCase(64, 512, 8192, 4, device)),
        ("DeepGEMM fp8_einsum (wo_a, 512 rows)", lambda: dgm.WoACase(512, device, 1)),
    ]  # fmt: skip
    for name, make in dg_cases:
        try:
            case = make()
            calls.append((name, "deep_gemm", case.run, ""))
        except Exception as e:  # noqa: BLE001
            calls.append((name, "deep_gemm", None, f"{type(e).__name__}: {str(e)[:160]}"))
    return calls


def measure_stack(name: str, kinds: list[str], kern) -> tuple[list[dict], dict]:
    stack = fw.Stack(
        kinds,
        fw.Dims(),
        kern,
        mode="prefill",
        batch=1,
        context=PREFILL_CONTEXT,
        chunk=PREFILL_CHUNK,
        device="cuda",
    )
    for _ in range(3):  # JIT compilation, autotuning, allocator warm-up
        stack.run()
    _sync()
    host = op_host_us(stack)
    launches = op_launches(stack)
    whole = fw.eager_host_us(stack, passes=9)
    rows = [
        dict(stack=name, layer_kinds=fw.layer_kinds_label(kinds), mode="prefill", chunk_tokens=PREFILL_CHUNK,
             op_index=i, category=cat, op=op, launches=launches[i], host_us_p50=round(host[i], 2))
        for i, (cat, op, _) in enumerate(stack.op_list)
    ]  # fmt: skip
    n_launch = sum(launches)
    summary = dict(
        stack=name,
        layers=len(kinds),
        pass_host_us_p50=round(whole, 1),
        sum_op_host_us=round(sum(host), 1),
        launches_per_pass=n_launch,
        launches_per_layer=round(n_launch / len(kinds), 1),
        host_us_per_launch=round(whole / n_launch, 2) if n_launch else None,
        ops_per_pass=len(stack.op_list),
    )
    return rows, summary


def host_provenance(commit: str | None) -> dict:
    """The production stack's provenance with the host's CPU and the GPU named: host timings depend on both."""
    from kernels_bench.production.run import production_provenance

    prov = production_provenance(commit)
    prov["cpu_model"] = cpu_model()
    prov["gpu"] = torch.cuda.get_device_name()
    return prov


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def write_csv(path: Path, columns: tuple[str, ...], rows: list[dict], prov: dict) -> None:
    from kernels_bench import report

    buf = io.StringIO()
    buf.write("".join(f"# {k}: {v}\n" for k, v in prov.items()))
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([r.get(c, "") for c in columns] for r in rows)
    report.atomic_write(path, buf.getvalue())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="kernels_bench.production.host_issue", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--commit", default=None)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print(
            "error: CUDA is not available (the host-issue measurement runs on the GPU machine)",
            file=sys.stderr,
        )
        return 2
    from kernels_bench import report

    args.out.mkdir(parents=True, exist_ok=True)
    prov = host_provenance(args.commit)
    kern = fw.GpuKernels()
    op_rows, summaries = [], []
    for name, kinds in STACKS.items():
        try:
            rows, summary = measure_stack(name, kinds, kern)
        except Exception as e:  # noqa: BLE001 - reported, never silent
            summary = dict(stack=name, error=f"{type(e).__name__}: {str(e)[:200]}")
            rows = []
        op_rows += rows
        summaries.append(summary)
        print(json.dumps(summary), flush=True)
        torch.cuda.empty_cache()
    call_rows = []
    for call, lib, fn, note in bare_calls("cuda"):
        row = dict(call=call, library=lib, launches_per_call="", host_us_per_call="", note=note)
        if fn is not None:
            try:
                row["host_us_per_call"] = round(per_call_us(fn), 2)
                row["launches_per_call"] = call_launches(fn)
            except Exception as e:  # noqa: BLE001
                row["note"] = f"{type(e).__name__}: {str(e)[:160]}"
        call_rows.append(row)
        print(
            f"{call}: {row['host_us_per_call']} us, {row['launches_per_call']} launches {row['note']}",
            flush=True,
        )
    write_csv(args.out / "host_issue_ops.csv", OPS_COLUMNS, op_rows, prov)
    write_csv(args.out / "host_issue_calls.csv", CALL_COLUMNS, call_rows, prov)
    report.atomic_write(
        args.out / "host_issue.json",
        json.dumps({"provenance": prov, "passes": summaries, "calls": call_rows}, indent=1, default=str)
        + "\n",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
