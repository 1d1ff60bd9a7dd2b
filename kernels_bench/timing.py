"""Timing by CUDA-graph replay (METHOD.md): warm-up, rotation over buffer sets, median of many samples.

A benchmark hands over a list of zero-argument callables, one per independent buffer set, built so that
the sets together exceed a few times the 60 MB L2 (each replay then reads HBM, not the cache). One graph
runs every callable once; a sample times ``k`` back-to-back replays between two events, with ``k`` chosen
so that a sample lasts at least ``min_sample_us``; the per-call time is sample / (k · calls).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from kernels_bench.shapes import L2_BYTES


@dataclass(frozen=True)
class Timing:
    median_us: float
    p10_us: float
    p90_us: float
    samples: int
    calls_per_sample: int
    method: str  # "cuda_graph" or "eager" (capture failed)


def rotation_count(working_set_bytes: float, max_sets: int = 64, l2_multiple: float = 4.0) -> int:
    """Buffer sets needed so that together they span ``l2_multiple`` × L2."""
    if working_set_bytes <= 0:
        return max_sets
    need = int(-(-l2_multiple * L2_BYTES // working_set_bytes))
    return max(1, min(max_sets, need))


def _quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _run_all(calls: Sequence[Callable[[], object]]) -> None:
    for c in calls:
        c()


def time_calls(
    calls: Sequence[Callable[[], object]],
    *,
    samples: int = 25,
    min_sample_us: float = 300.0,
    max_seconds: float = 3.0,
    use_graph: bool = True,
) -> Timing:
    """Median / p10 / p90 microseconds per call of the callables (all assumed to do the same work)."""
    n = len(calls)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm-up: JIT compilation, autotuning, cuBLAS handles
            _run_all(calls)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = None
    method = "eager"
    if use_graph:
        try:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                _run_all(calls)
            graph.replay()
            torch.cuda.synchronize()
            method = "cuda_graph"
        except Exception:  # noqa: BLE001 - an op that cannot be captured is timed eagerly instead
            graph = None
            torch.cuda.synchronize()

    def run_once() -> None:
        if graph is not None:
            graph.replay()
        else:
            _run_all(calls)

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    run_once()
    end.record()
    end.synchronize()
    one_us = max(start.elapsed_time(end) * 1e3, 1e-3)
    k = max(1, int(min_sample_us // one_us) + (1 if one_us < min_sample_us else 0))
    budget_samples = max(3, int(max_seconds * 1e6 // max(one_us * k, 1.0)))
    samples = max(3, min(samples, budget_samples))
    per_call = []
    for _ in range(samples):
        start.record()
        for _ in range(k):
            run_once()
        end.record()
        end.synchronize()
        per_call.append(start.elapsed_time(end) * 1e3 / (k * n))
    return Timing(
        median_us=statistics.median(per_call),
        p10_us=_quantile(per_call, 0.1),
        p90_us=_quantile(per_call, 0.9),
        samples=samples,
        calls_per_sample=k * n,
        method=method,
    )
