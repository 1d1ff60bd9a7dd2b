"""Entry point: check and time the whole grid in one GPU call, write tables with provenance.

    python3 -m kernels_bench.run_all --out DIR [--preset full|smoke|dry] [--commit SHA] [--budget-s 540]

Writes DIR/results.json, DIR/results.csv, DIR/results.md (provenance, target table, anchors, all rows),
DIR/tune.json and DIR/log.txt. ``--preset dry`` runs the checks at tiny shapes on the CPU through the Triton
interpreter (TRITON_INTERPRET=1), without timings.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

TUNED = Path(__file__).with_name("tuned_h200.json")


def _parse(argv):
    ap = argparse.ArgumentParser(prog="kernels_bench.run_all", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--preset", default="full", choices=["full", "smoke", "dry"])
    ap.add_argument("--commit", default=None, help="git commit of the tree (the device copy may lack .git)")
    ap.add_argument(
        "--budget-s", type=float, default=540.0, help="skip configurations after this many seconds"
    )
    ap.add_argument("--families", default="", help="comma-separated subset of families")
    return ap.parse_args(argv)


def _tuning_sweep(ctx, log) -> dict:
    """Try a few kernel configurations on representative shapes; keep the fastest correct one of each."""
    from kernels_bench import families as F
    from kernels_bench.timing import time_calls

    chosen = {}
    tries = {
        "attention": [
            dict(block_n=64, num_warps=8),
            dict(block_n=64, num_warps=8, num_stages=2),
            dict(block_n=32, num_warps=8, num_stages=2),
            dict(block_n=64, num_warps=4),
        ],
        "mhc": [
            dict(bt=16, bh=64, num_warps=4),
            dict(bt=16, bh=128, num_warps=4),
            dict(bt=32, bh=64, num_warps=4),
            dict(bt=32, bh=128, num_warps=8),
            dict(bt=16, bh=256, num_warps=8),
        ],
    }
    report = {}
    for fam, cfgs in tries.items():
        best = None
        for cfg in cfgs:
            try:
                if fam == "attention":
                    cases = [
                        F.AttnCase(ctx, 128, "fp8_584", 128, "fp8_584", 512, s, tune=cfg) for s in (1, 3)
                    ]
                    mx, rel = cases[0].check([0, 127])
                    ok = rel < 1e-2
                    calls = [c.run for c in cases]
                elif fam == "indexer":
                    cases = [F.IndexerCase(ctx, "V4", "CSA", 32, 512 * 1024, s) for s in (1, 2)]
                    cases[0].run(cfg)
                    mx, rel = cases[0].check([0])
                    ok = rel < 5e-3
                    calls = [lambda c=c, cfg=cfg: c.run(cfg) for c in cases]
                else:
                    from kernels_bench import mhc
                    from kernels_bench.mhc_triton import MhcBoundary

                    p = mhc.make_params(5120, device=ctx.device)
                    st = mhc.make_state(4096, 5120, device=ctx.device)
                    op = MhcBoundary(4096, 5120, p, ctx.device, **cfg)
                    outs = op.fused(*st)
                    ref = mhc.mhc_boundary_ref(*[s[:32] for s in st], p, shifted=True)
                    rel = max(
                        F.rel_err(o[:32].reshape(r.shape), r)[1] for o, r in zip(outs, ref, strict=True)
                    )
                    ok = rel < 2e-2
                    calls = [lambda op=op, st=st: op.fused(*st)]
                us = time_calls(calls, samples=10).median_us if ok else float("inf")
            except Exception as e:  # noqa: BLE001 - a config that fails to compile is reported and skipped
                log(
                    f"  tune {fam} {cfg}: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
                )
                continue
            log(f"  tune {fam} {cfg}: ok={ok} rel={rel:.2e} {us:.1f} us")
            report.setdefault(fam, []).append({"config": cfg, "ok": ok, "rel_err": rel, "median_us": us})
            if ok and (best is None or us < best[1]):
                best = (cfg, us)
        if best:
            chosen[fam] = best[0]
    return {"chosen": chosen, "tried": report}


def main(argv=None) -> int:
    args = _parse(argv)
    import torch

    from kernels_bench import families as F
    from kernels_bench import report
    from kernels_bench.grid import PRESETS
    from kernels_bench.targets import targets_markdown

    grid = PRESETS[args.preset]
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "log.txt"
    log_f = log_path.open("w")
    t0 = time.monotonic()

    def log(msg: str) -> None:
        line = f"[{time.monotonic() - t0:7.1f}s] {msg}"
        print(line, flush=True)
        log_f.write(line + "\n")
        log_f.flush()

    timed = args.preset != "dry"
    device = "cuda" if timed else "cpu"
    if timed and not torch.cuda.is_available():
        print("error: CUDA is not available; use --preset dry on a CPU", file=sys.stderr)
        return 2
    if not timed and os.environ.get("TRITON_INTERPRET") != "1":
        print("error: --preset dry needs TRITON_INTERPRET=1 (Triton's CPU interpreter)", file=sys.stderr)
        return 2
    prov = report.provenance(args.commit)
    prov["preset"] = args.preset
    log(f"provenance: {json.dumps(prov)}")
    tune = json.loads(TUNED.read_text()) if TUNED.exists() else {}
    ctx = F.Ctx(grid=grid, device=device, timed=timed, log=log, deadline=t0 + args.budget_s, tune=tune)
    tune_doc = {}
    if grid.tuning and timed:
        log("tuning sweep")
        tune_doc = _tuning_sweep(ctx, log)
        ctx.tune = {**tune, **tune_doc["chosen"]}
        log(f"chosen: {json.dumps(ctx.tune)}")
    (out / "tune.json").write_text(json.dumps({"used": ctx.tune, **tune_doc}, indent=1) + "\n")
    wanted = [f for f in grid.families if not args.families or f in args.families.split(",")]
    rows: list[dict] = []
    for fam in wanted:
        log(f"family {fam}")
        for row in F.FAMILIES[fam](ctx):
            rows.append(row)
        if device == "cuda":
            torch.cuda.empty_cache()
        report.write_json(out / "results.json", rows, prov)  # partial results survive a timeout
    prov["elapsed_s"] = round(time.monotonic() - t0, 1)
    report.write_json(out / "results.json", rows, prov, extra={"tune": ctx.tune})
    report.write_csv(out / "results.csv", rows, prov)
    tmd = targets_markdown(rows)
    md = [
        "# kernels_bench results",
        "",
        "## Provenance",
        "",
        report.markdown_table(
            ["key", "value"], [[k, json.dumps(v) if isinstance(v, dict) else v] for k, v in prov.items()]
        ),
        "",
        "## Targets and anchors",
        "",
        tmd,
        "",
        "## All rows",
        "",
        report.rows_markdown(rows),
        "",
    ]
    report.atomic_write(out / "results.md", "\n".join(md))
    n_fail = sum(1 for r in rows if r["check_passed"] is False)
    log(f"done: {len(rows)} rows, {n_fail} failed or skipped, {prov['elapsed_s']} s")
    print("\n" + tmd, flush=True)
    log_f.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
