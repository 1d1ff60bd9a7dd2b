"""The served reduced model on the GPU: correctness against the float64 reference, then a step-time table.

    python3 -m kernels_bench.serve.bench --out DIR [--spec SPEC] [--commit SHA] [--budget-s S] [--skip-check]

``--spec``: the served model, ``deepseek-v4-flash-mini`` (``kernels_bench.serve.model``, the default) or
``deepseek-v4.1-flash-mini`` (``kernels_bench.serve.model41``).

Correctness (``check``): one multi-sequence schedule (chunked prefill, decode, different contexts, a
prefix-reused block table; every step replayed from a CUDA graph) run (1) with the production kernels, (2)
with each sequence alone, (3) with the float64 reference kernels (``ServeRef``, on the GPU), (4) with the production kernels
eagerly, without graphs (the path of a step larger than every graph; its misaligned-address fault of
call 10 came from the Triton indexer, fixed in ``ServeGpu.index_logits_paged``). Relative errors of every work's logits are written to
``serve_check.json``. Step times (``serve_step_times.csv``, columns ``kernels_bench.columns.SERVE_STEP_COLUMNS``):
the engine's view, a synchronised wall clock around ``model(plan)`` (every step a CUDA graph), for decode
batches x contexts (also batches between graph buckets, which pay for padding rows), prefill chunks (also
between buckets) and mixed steps, KV pools filled with random valid rows. A few points are profiled
(``torch.profiler``) for their GPU time by kernel category (``kernels_bench.serve.breakdown``); their kernels
in launch order go to ``serve_step_kernels.csv``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from kernels_bench import formats
from kernels_bench.columns import SERVE_STEP_COLUMNS, names
from kernels_bench.serve import breakdown
from kernels_bench.serve import model as sm
from kernels_bench.serve import model41 as m41
from kernels_bench.serve.step_api import SeqWork, StepPlan

# the served models: spec -> (config, model class)
MODELS = {sm.SPEC: (sm.ServeConfig, sm.ServedModel), m41.SPEC: (m41.ServeConfig41, m41.ServedModel41)}
STEP_COLUMNS = list(names(SERVE_STEP_COLUMNS))  # kernels_bench.columns: shared with the sim side
KERNELS_CSV = "serve_step_kernels.csv"


def _tokens(seed: int, n: int, vocab: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (n,), generator=g).tolist()


def _w(seq_id, blocks, ctx, toks) -> SeqWork:
    return SeqWork(seq_id, tuple(blocks), ctx, len(toks), tuple(toks))


def check_schedule(vocab: int):
    """(mixed steps, alone schedules): A 2600-token prompt in 512 chunks + 4 decodes; B reuses A's first
    10 blocks (2560 tokens) + 300 new + 3 decodes; C 700 + 90 prompt + 2 decodes; the last two steps are
    pure decode (graphs)."""
    A = _tokens(1, 2604, vocab)
    B = A[:2560] + _tokens(2, 303, vocab)
    C = _tokens(3, 792, vocab)
    abt, bbt, cbt = list(range(11)), list(range(10)) + [20, 21], [30, 31, 32, 33]
    steps = [([], [_w(1, abt, s, A[s : min(s + 512, 2600)])]) for s in range(0, 2600, 512)]
    steps += [
        ([_w(1, abt, 2600, A[2600:2601])], [_w(2, bbt, 2560, B[2560:2860]), _w(3, cbt, 0, C[:512])]),
        ([_w(1, abt, 2601, A[2601:2602]), _w(2, bbt, 2860, B[2860:2861])], [_w(3, cbt, 512, C[512:700])]),
        ([_w(1, abt, 2602, A[2602:2603]), _w(2, bbt, 2861, B[2861:2862])], [_w(3, cbt, 700, C[700:790])]),
        ([_w(3, cbt, 790, C[790:791])], []),
        ([_w(1, abt, 2603, A[2603:2604]), _w(2, bbt, 2862, B[2862:2863]), _w(3, cbt, 791, C[791:792])], []),
    ]
    # alone: A's and C's own works in the same steps; B after another sequence (9) wrote its prefix in
    # other blocks in one pass
    b2 = list(range(40, 50)) + [60, 61]
    alone = {
        sid: [([w for w in d if w.seq_id == sid], [w for w in p if w.seq_id == sid]) for d, p in steps]
        for sid in (1, 3)
    }
    alone[2] = [
        ([], [_w(9, list(range(40, 50)), 0, B[:2560])]),
        ([], [_w(2, b2, 2560, B[2560:2860])]),
        ([_w(2, b2, 2860, B[2860:2861])], []),
        ([_w(2, b2, 2861, B[2861:2862])], []),
        ([_w(2, b2, 2862, B[2862:2863])], []),
    ]
    return steps, {k: [s for s in v if s[0] or s[1]] for k, v in alone.items()}


def _run(model, steps) -> list[tuple[int, int, torch.Tensor]]:
    """[(seq_id, n-th work of that sequence, logits float32 cpu)]."""
    out, count = [], {}
    for dec, pre in steps:
        lg = model.step(StepPlan(tuple(dec), tuple(pre)))
        for w, row in zip(list(dec) + list(pre), lg, strict=True):
            i = count.get(w.seq_id, 0)
            count[w.seq_id] = i + 1
            out.append((w.seq_id, i, row.float().cpu()))
    torch.cuda.synchronize()
    return out


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def check(log, num_blocks: int = 80, spec: str = sm.SPEC) -> dict:
    """The correctness check on the GPU (real shapes, 8 routed experts so the float64 reference fits)."""
    from kernels_bench.serve.kernels import ServeGpu, ServeRef

    config, cls = MODELS[spec]
    base = config()
    cfg = replace(base, dims=replace(base.dims, experts=8))
    steps, alone = check_schedule(cfg.vocab)
    t0 = time.monotonic()
    gpu = cls(cfg, ServeGpu(), num_blocks, "cuda", graphs=True)
    mixed = _run(gpu, steps)
    buckets = sorted(gpu._graphs)
    del gpu
    alone_out = {}
    for sid, sched in alone.items():
        res = _run(cls(cfg, ServeGpu(), num_blocks, "cuda", graphs=True), sched)
        alone_out.update({(s, i): lg for s, i, lg in res if s == sid})
    torch.cuda.empty_cache()
    print(f"[check] gpu runs {time.monotonic() - t0:.1f}s", file=log, flush=True)
    eager = {(s, i): lg for s, i, lg in _run(cls(cfg, ServeGpu(), num_blocks, "cuda", graphs=False), steps)}
    torch.cuda.empty_cache()
    print(f"[check] eager run {time.monotonic() - t0:.1f}s", file=log, flush=True)
    ref = _run(cls(cfg, ServeRef(), num_blocks, "cuda"), steps)
    print(f"[check] reference run {time.monotonic() - t0:.1f}s", file=log, flush=True)
    rows = []
    ref_map = {(s, i): lg for s, i, lg in ref}
    for s, i, lg in mixed:
        r = ref_map[(s, i)]
        rows.append(
            {
                "seq": s,
                "work": i,
                "finite": bool(torch.isfinite(lg).all()),
                "rel_vs_reference": _rel(lg, r),
                "rel_vs_alone": _rel(lg, alone_out[(s, i)]),
                "eager_rel_vs_reference": _rel(eager[(s, i)], r),
                "eager_rel_vs_graphed": _rel(eager[(s, i)], lg),
                "eager_finite": bool(torch.isfinite(eager[(s, i)]).all()),
                "argmax_equals_reference": bool(lg.argmax() == r.argmax()),
            }
        )
    # the scale of a "wrong" answer: logits of neighbouring positions of one sequence in the reference
    nb = [_rel(ref[j][2], ref[j + 1][2]) for j in range(len(ref) - 1) if ref[j][0] == ref[j + 1][0]]
    out = {
        "spec": spec,
        "works": rows,
        "graph_buckets": [list(b) for b in buckets],
        "max_rel_vs_reference": max(r["rel_vs_reference"] for r in rows),
        "median_rel_vs_reference": sorted(r["rel_vs_reference"] for r in rows)[len(rows) // 2],
        "max_rel_vs_alone": max(r["rel_vs_alone"] for r in rows),
        "argmax_agreement": sum(r["argmax_equals_reference"] for r in rows) / len(rows),
        "neighbour_rel_min": min(nb) if nb else None,
        "all_finite": all(r["finite"] for r in rows),
        "eager_all_finite": all(r["eager_finite"] for r in rows),
        "max_eager_rel_vs_reference": max(r["eager_rel_vs_reference"] for r in rows),
        "median_eager_rel_vs_reference": sorted(r["eager_rel_vs_reference"] for r in rows)[len(rows) // 2],
        "max_eager_rel_vs_graphed": max(r["eager_rel_vs_graphed"] for r in rows),
        "elapsed_s": round(time.monotonic() - t0, 1),
    }
    return out


def check_failures(res: dict) -> list[str]:
    """The criteria of the GPU check (``check``'s result): what failed, empty when it passed. FP8
    activation rounding makes the stack rough (forward.component_errors: a 0.1 % input change moves the
    output by ~7 %), so agreement is judged against that scale and against the O(1) distance between
    neighbouring positions' logits; the eager path (other kernel shapes, the same math) alike."""
    bad = []
    scale = 0.5 * (res.get("neighbour_rel_min") or 0.0)
    if not (res["all_finite"] and res["eager_all_finite"]):
        bad.append("non-finite logits")
    if not (res["median_rel_vs_reference"] < 0.1 and res["max_rel_vs_reference"] < min(0.3, scale)):
        bad.append(
            f"graphed vs reference: median {res['median_rel_vs_reference']:.3f}, max {res['max_rel_vs_reference']:.3f}"
        )
    if not res["max_eager_rel_vs_reference"] < min(0.3, scale):
        bad.append(f"eager vs reference: max {res['max_eager_rel_vs_reference']:.3f}")
    if not res["max_rel_vs_alone"] < 0.3:
        bad.append(f"mixed vs alone: max {res['max_rel_vs_alone']:.3f}")
    return bad


# ---- step times ----------------------------------------------------------------------------------------------


def fill_random(model: sm.ServedModel, seed: int = 0) -> None:
    """Every pool row a random valid row (timing never runs on zeros)."""
    g = torch.Generator(device=model.device)
    g.manual_seed(seed)
    blk584 = formats.random_rows("fp8_584", 65536, generator=g, device=model.device)
    blk132 = formats.random_rows("fp8_132", 65536, generator=g, device=model.device)
    for kv in model.kv:
        for pool in (kv.raw, kv.comp):
            if pool is None:
                continue
            for s in range(0, pool.rows, 65536):
                r = torch.arange(s, min(s + 65536, pool.rows), device=model.device)
                pool.write(r, blk584[: r.shape[0]])
        if kv.keys is not None:
            for s in range(0, kv.keys.shape[0], 65536):
                e = min(s + 65536, kv.keys.shape[0])
                kv.keys[s:e] = blk132[: e - s]


def _time_plan(model, make_plan, reps: int) -> dict:
    """Wall clock around model(plan) (synchronised), the engine's measurement; after 2 warm-up calls."""
    for _ in range(2):
        model(make_plan())
    ts = []
    for _ in range(reps):
        plan = make_plan()
        t0 = time.perf_counter()
        model(plan)
        ts.append((time.perf_counter() - t0) * 1e6)
    ts.sort()

    def q(p):
        return ts[min(len(ts) - 1, int(p * len(ts)))]

    return {"wall_us_p50": q(0.5), "wall_us_p10": q(0.1), "wall_us_p90": q(0.9), "reps": reps}


DECODE_POINTS = [(b, L) for L in (2048, 8192, 32768) for b in (1, 2, 4, 8, 16, 32, 64)] + [
    (1, 131072),
    (8, 131072),
]
# decode batches between graph buckets (1 2 4 8 16 24 32 48 64): each replays the next bucket up, so the
# step pays for its padding rows
BETWEEN_POINTS = [(b, 8192) for b in (3, 5, 12, 17, 20, 24, 25, 33, 40, 48, 49, 56)]
PREFILL_POINTS = [(t, 0) for t in (128, 512, 1024, 2048, 4096, 8192)] + [(2048, 8192), (2048, 32768)]
PREFILL_BETWEEN = [(t, 0) for t in (640, 700, 1100, 2100, 2200)]  # buckets 640, 768, 1280, 2112, 2560
MIXED_POINTS = [(16, 8192, 2048, 8192), (32, 8192, 512, 0), (4, 32768, 4096, 0), (40, 8192, 2048, 0)]
# (mode, B, L, T, C) profiled for the kernel breakdown
PROFILE_POINTS = [
    ("decode", 1, 8192, 0, 0),
    ("decode", 8, 8192, 0, 0),
    ("decode", 32, 8192, 0, 0),
    ("decode", 33, 8192, 0, 0),
    ("decode", 64, 8192, 0, 0),
    ("decode", 64, 32768, 0, 0),
    ("prefill", 0, 0, 512, 0),
    ("prefill", 0, 0, 2048, 0),
    ("prefill", 0, 0, 2048, 32768),
    ("mixed", 16, 8192, 2048, 8192),
]
PROFILE_REPLAYS = 5
MIN_KERNELS_PER_STEP = 100  # a served step launches ~1,800 kernels; fewer means the profile missed them


def point_name(mode: str, B: int, L: int, T: int, C: int) -> str:
    return f"{mode}_B{B}_L{L}_T{T}_C{C}"


def _profiled_steps(model, make_plan, replays: int, recapture: bool) -> list[list[tuple[str, float]]]:
    import json
    import tempfile

    from torch.profiler import ProfilerActivity, profile, schedule

    warm = 1
    if recapture:  # the graph is captured again under the profiler; the old one is kept (never freed:
        plan = make_plan()  # graphs share one memory pool)
        key = model.graph_key(list(plan.decode) + list(plan.prefill))
        model.profiled_graphs = [*getattr(model, "profiled_graphs", []), model._graphs.pop(key)]
    else:
        model(make_plan())
        warm = 0
    with profile(
        activities=[ProfilerActivity.CUDA],
        schedule=schedule(wait=0, warmup=warm, active=replays, repeat=1),
    ) as prof:
        for _ in range(warm + replays):
            model(make_plan())
            prof.step()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        with open(f.name) as g:
            trace = json.load(g)
    return breakdown.split_replays(breakdown.chrome_trace_events(trace), replays)


def profile_point(model, make_plan, replays: int = PROFILE_REPLAYS) -> list[tuple[str, float]]:
    """Kernels of one step (name, us) in launch order, the median of ``replays`` profiled steps. The
    step's graph as captured; when the profiler sees too few of its kernels (graph nodes captured before
    the profiler started may be hidden), the graph is captured again under the profiler."""
    steps = _profiled_steps(model, make_plan, replays, recapture=False)
    if min(len(s) for s in steps) < MIN_KERNELS_PER_STEP:
        steps = _profiled_steps(model, make_plan, replays, recapture=True)
    return breakdown.median_step(steps)


def step_table(
    log, budget_s: float, num_blocks: int = 12000, spec: str = sm.SPEC
) -> tuple[list[dict], list[dict]]:
    """The step-time rows, then the profiled kernels (``breakdown.KERNEL_COLUMNS`` rows)."""
    from kernels_bench.serve.kernels import ServeGpu

    config, cls = MODELS[spec]
    cfg = config()
    t0 = time.monotonic()
    model = cls(cfg, ServeGpu(), num_blocks, "cuda", graphs=True)
    fill_random(model)
    torch.cuda.synchronize()
    print(f"[table] model + fill {time.monotonic() - t0:.1f}s", file=log, flush=True)
    bt = cfg.block_tokens
    vocab = cfg.vocab
    rows = []
    seq_counter = [1000]

    def decode_works(B, L, first_block=0):
        nb = -(-L // bt)
        return [
            _w(i, range(first_block + i * nb, first_block + (i + 1) * nb), L - 1, [(7 * i + L) % vocab])
            for i in range(B)
        ]

    def prefill_work(T, C, first_block):
        nb = -(-(C + T) // bt)
        seq_counter[0] += 1
        return _w(seq_counter[0], range(first_block, first_block + nb), C, _tokens(T, T, vocab))

    def base(mode, B, L, T, C, note=""):
        return {
            "model": spec,
            "spec": spec,
            "mode": mode,
            "batch": B,
            "context_tokens": L,
            "chunk_tokens": T,
            "prefill_context_tokens": C,
            "kv_bytes_per_block": model.kv_bytes_per_block,
            "note": note,
        }

    points = [("decode", b, L, 0, 0) for b, L in DECODE_POINTS + BETWEEN_POINTS]
    points += [("prefill", 0, 0, t, c) for t, c in PREFILL_POINTS + PREFILL_BETWEEN]
    points += [("mixed", b, L, t, c) for b, L, t, c in MIXED_POINTS]
    points += [(*p, "profile") for p in PROFILE_POINTS]
    kernel_rows: list[dict] = []
    for mode, B, L, T, C, *prof in points:
        if time.monotonic() - t0 > budget_s:
            print(f"[table] budget exhausted before {mode} B={B} L={L} T={T}", file=log, flush=True)
            break
        row = base(mode, B, L, T, C)
        row["rows"] = B + T
        try:
            dec = decode_works(B, L) if B else []
            used = sum(-(-L // bt) for _ in range(B))
            pre_first = used

            def make(dec=dec, T=T, C=C, pre_first=pre_first):
                pre = [prefill_work(T, C, pre_first)] if T else []
                return StepPlan(tuple(dec), tuple(pre))

            if prof:  # the breakdown of a point timed above: its kernels, and the category sums
                ks = profile_point(model, make)
                name = point_name(mode, B, L, T, C)
                kernel_rows += breakdown.aggregate(name, [n for n, _ in ks], [u for _, u in ks])
                row.update(breakdown.category_us([n for n, _ in ks], [u for _, u in ks]))
                row["note"] = "profiled: kernel time of the median of 5 graph replays (torch.profiler)"
                timed = next((r for r in rows if (r["mode"], r["batch"], r["context_tokens"],
                              r["chunk_tokens"], r["prefill_context_tokens"]) == (mode, B, L, T, C)
                              and "wall_us_p50" in r), None)  # fmt: skip
                if timed is not None:  # one row per point: the timed row gets the breakdown
                    timed.update(
                        {
                            k: v
                            for k, v in row.items()
                            if k.endswith("_us") or k in ("kernels_per_step", "note")
                        }
                    )
                    row = None
                else:
                    row.update(_time_plan(model, make, reps=20 if mode == "decode" else 8))
            else:
                row.update(_time_plan(model, make, reps=20 if mode == "decode" else 8))
            if row is not None:
                row["graph_bucket"] = model.last_graph_bucket
        except Exception as e:  # noqa: BLE001 - a failing point is reported, never silent
            row["note"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            import traceback

            traceback.print_exc(file=log)
        if row is None:
            line = f"[{time.monotonic() - t0:6.1f}s] profiled {mode} B={B} L={L} T={T} C={C}: " + " ".join(
                f"{k}={timed[k]:.0f}" for k in ("gpu_busy_us", *(f"{c}_us" for c in breakdown.CATEGORIES))
            )
        else:
            rows.append(row)
            line = (
                f"[{time.monotonic() - t0:6.1f}s] {mode} B={B} L={L} T={T} C={C} "
                f"p50={row.get('wall_us_p50', '-')} bucket={row.get('graph_bucket')} {row.get('note', '')}"
            )
        print(line, flush=True)
        print(line, file=log, flush=True)
    return rows, kernel_rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="kernels_bench.serve.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--commit", default=None)
    ap.add_argument("--budget-s", type=float, default=240.0)
    ap.add_argument("--skip-check", action="store_true")
    ap.add_argument("--spec", default=sm.SPEC, choices=sorted(MODELS))
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: CUDA is not available (the served model runs on the GPU)", file=sys.stderr)
        return 2
    from kernels_bench import report
    from kernels_bench.production.run import production_provenance

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    prov = production_provenance(args.commit)
    prov["spec"] = args.spec
    log = (out / "serve_bench_log.txt").open("w")
    if not args.skip_check:
        try:
            res = check(log, spec=args.spec)
        except Exception as e:  # noqa: BLE001 - reported in the JSON
            import traceback

            traceback.print_exc(file=log)
            res = {"error": f"{type(e).__name__}: {e}"}
        res["provenance"] = prov
        report.atomic_write(out / "serve_check.json", json.dumps(res, indent=1, default=str) + "\n")
        summary = {k: v for k, v in res.items() if k not in ("works", "provenance")}
        print("check", json.dumps(summary, default=str), flush=True)
        torch.cuda.empty_cache()
    rows, kernel_rows = step_table(log, args.budget_s, spec=args.spec)
    report.write_csv(out / "serve_step_times.csv", rows, prov, columns=STEP_COLUMNS)
    report.write_csv(out / KERNELS_CSV, kernel_rows, prov, columns=list(breakdown.KERNEL_COLUMNS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
