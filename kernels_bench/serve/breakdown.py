"""One served step's GPU time by kernel category, from a profile of its CUDA-graph replays.

The bench (``kernels_bench.serve.bench``) profiles a few steps with ``torch.profiler`` (replays of the
step's CUDA graph), takes the kernels of the median replay in launch order, writes them per point,
category and kernel name to ``serve_step_kernels.csv`` (``KERNEL_COLUMNS``: launches and microseconds per
step, first launch position), and puts the category sums in ``serve_step_times.csv``
(``kernels_bench.columns.SERVE_STEP_COLUMNS``). The categories come from kernel names and their order
(``categorize``), so the sim side can model the LM head and graph padding as mechanisms and keep the rest as
a measured term:

- ``lm_head_embed``: the embedding gather (the first gather of the step) and the LM head (the step's last
  GEMM: the pass ends with ``rows @ head.T``);
- ``attention``: FlashMLA (sparse decode, its split-KV combine and scheduler metadata);
- ``indexer``: the lightning indexer's score kernel and the top-k that follows it (before the next
  attention kernel); other top-k / sort kernels (MoE routing) are glue;
- ``moe_gemm``: grouped GEMMs (the routed experts); ``dense_gemm``: every other GEMM;
- ``mhc``: the TileKernels mHC boundaries; ``glue``: everything else.

Static-input copies and the host's work between steps are outside the kernels: a step's wall time minus
``gpu_busy_us`` is the launch and host overhead of the step.

CPU only (standard library): ``python3 -m kernels_bench.serve.breakdown serve_step_kernels.csv`` prints the
category sums per point and each point's largest kernels.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import statistics
from collections.abc import Sequence

CATEGORIES = ("lm_head_embed", "attention", "indexer", "moe_gemm", "dense_gemm", "mhc", "glue")
KERNEL_COLUMNS = ("point", "category", "name", "calls", "us", "first_order")

_ATTENTION = re.compile(r"flash|mla", re.I)
_INDEXER = re.compile(r"indexer", re.I)
_TOPK = re.compile(r"topk|radix|kth|bitonic|sort", re.I)
_MHC = re.compile(r"mhc", re.I)
_GROUPED = re.compile(r"group|ptr_?array", re.I)
_GEMM = re.compile(r"gemm|gemv|nvjet|xmma|wgmma|cutlass|cublas", re.I)
_GATHER = re.compile(r"index|gather", re.I)
EMBED_WITHIN = 6  # the embedding gather is among the step's first kernels (zeros, token copy, gather)


def is_gemm(name: str) -> bool:
    return bool(_GEMM.search(name)) and not _ATTENTION.search(name)


def categorize(names: Sequence[str]) -> list[str]:
    """The category of each kernel of one step, given in launch order."""
    out: list[str] = []
    after_indexer = False
    gemms = [i for i, n in enumerate(names) if is_gemm(n)]
    last_gemm = gemms[-1] if gemms else -1
    embed = next((i for i, n in enumerate(names[:EMBED_WITHIN]) if _GATHER.search(n)), -1)
    for i, n in enumerate(names):
        if i in (embed, last_gemm):
            cat = "lm_head_embed"
        elif _ATTENTION.search(n):
            cat, after_indexer = "attention", False
        elif _INDEXER.search(n):
            cat, after_indexer = "indexer", True
        elif _TOPK.search(n):
            cat = "indexer" if after_indexer else "glue"
        elif _MHC.search(n):
            cat = "mhc"
        elif is_gemm(n):
            cat = "moe_gemm" if _GROUPED.search(n) else "dense_gemm"
        else:
            cat = "glue"
        out.append(cat)
    return out


def category_us(names: Sequence[str], us: Sequence[float]) -> dict[str, float]:
    """``{category}_us`` sums, ``gpu_busy_us`` and ``kernels_per_step`` of one step's kernels."""
    sums = dict.fromkeys(CATEGORIES, 0.0)
    for cat, t in zip(categorize(names), us, strict=True):
        sums[cat] += t
    return {
        "gpu_busy_us": sum(us),
        **{f"{c}_us": v for c, v in sums.items()},
        "kernels_per_step": len(names),
    }


def split_replays(events: Sequence[tuple[float, float, str]], replays: int) -> list[list[tuple[str, float]]]:
    """Device events (start_us, duration_us, name) of ``replays`` consecutive steps -> each step's (name, us)
    in order: the steps are separated by the ``replays - 1`` longest idle gaps (the host's work between
    synchronised calls; kernels inside one graph follow each other within microseconds)."""
    ev = sorted(events)
    if replays <= 1 or len(ev) < replays:
        return [[(n, d) for _, d, n in ev]]
    gaps = sorted(range(1, len(ev)), key=lambda i: ev[i][0] - (ev[i - 1][0] + ev[i - 1][1]), reverse=True)[
        : replays - 1
    ]
    cuts = [0, *sorted(gaps), len(ev)]
    return [[(n, d) for _, d, n in ev[a:b]] for a, b in zip(cuts, cuts[1:], strict=False)]


def median_step(steps: list[list[tuple[str, float]]]) -> list[tuple[str, float]]:
    """The step whose total kernel time is the median of the replays."""
    totals = [sum(d for _, d in s) for s in steps]
    med = statistics.median_low(totals)
    return steps[totals.index(med)]


def chrome_trace_events(trace: dict) -> list[tuple[float, float, str]]:
    """Device activity (kernels, copies, sets) of a torch.profiler Chrome trace: (start_us, dur_us, name)."""
    cats = {"kernel", "gpu_memcpy", "gpu_memset"}
    return [
        (float(e["ts"]), float(e.get("dur", 0.0)), str(e["name"]))
        for e in trace.get("traceEvents", [])
        if e.get("ph") == "X" and e.get("cat") in cats
    ]


def aggregate(point: str, names: Sequence[str], us: Sequence[float]) -> list[dict]:
    """One step's kernels -> one row per (category, kernel name): launches, microseconds per step, the first
    launch's position; in order of first launch."""
    rows: dict[tuple[str, str], dict] = {}
    for i, (cat, n, t) in enumerate(zip(categorize(names), names, us, strict=True)):
        r = rows.setdefault((cat, n), {"point": point, "category": cat, "name": n, "calls": 0, "us": 0.0,
                                       "first_order": i})  # fmt: skip
        r["calls"] += 1
        r["us"] += t
    return list(rows.values())


def read_kernels(text: str) -> dict[str, list[dict]]:
    """serve_step_kernels.csv (``#`` lines skipped) -> point -> its rows (calls int, us float)."""
    lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
    out: dict[str, list[dict]] = {}
    for r in csv.DictReader(io.StringIO("\n".join(lines))):
        out.setdefault(r["point"], []).append(
            {**r, "calls": int(r["calls"]), "us": float(r["us"]), "first_order": int(r["first_order"])}
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kernels_bench.serve.breakdown", description=__doc__.splitlines()[0])
    ap.add_argument("kernels_csv")
    ap.add_argument("--top", type=int, default=5, help="largest kernels listed per point")
    args = ap.parse_args(argv)
    with open(args.kernels_csv) as f:
        points = read_kernels(f.read())
    for point, rows in points.items():
        sums = dict.fromkeys(CATEGORIES, 0.0)
        for r in rows:
            sums[r["category"]] += r["us"]
        busy = sum(sums.values())
        calls = sum(r["calls"] for r in rows)
        print(
            f"{point}: {busy:.0f} us in {calls} kernels; "
            + ", ".join(f"{c} {v:.0f}" for c, v in sums.items())
        )
        for r in sorted(rows, key=lambda r: -r["us"])[: args.top]:
            print(f"  {r['us']:8.1f} us {r['calls']:4d} x {r['category']:<13} {r['name'][:90]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
