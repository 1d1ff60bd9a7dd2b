"""Check and time the production stack in one GPU call; write tables with provenance.

    python3 -m kernels_bench.production.run --out DIR [--families attention,mhc,gemm_dense]
        [--preset full|smoke] [--commit SHA] [--budget-s 420]

Writes DIR/production_results.{csv,json,md} and DIR/production_log.txt. Columns: kernels_bench's
``report.COLUMNS`` plus ``stack``, ``package``, ``package_version``. A family whose package is missing
yields one failed row naming the package and the pip command (no silent drop).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from kernels_bench.production import PACKAGES, MissingPackage, package_version, require

ORDER = ("attention", "mhc", "gemm_dense")
NEEDS = {
    "attention": "flash_mla",
    "attention_spec": "flash_mla",
    "mhc": "tile_kernels",
    "mhc_parts": "tile_kernels",
    "gemm_dense": None,
}
NEEDS |= {
    name: "deep_gemm"
    for name in (
        "dg_indexer_prefill",
        "dg_indexer_decode",
        "dg_indexer_decode_spec",
        "dg_moe",
        "dg_dense",
        "dg_wo_a",
        "dg_hc_prenorm",
    )
}


def _parse(argv):
    ap = argparse.ArgumentParser(prog="kernels_bench.production.run", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--preset", default="full", choices=["full", "smoke"])
    ap.add_argument("--commit", default=None)
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--families", default=",".join(ORDER))
    ap.add_argument("--warm", default="", help="compile these DeepGEMM units (comma-separated) and exit")
    return ap.parse_args(argv)


def production_provenance(commit: str | None) -> dict:
    from kernels_bench import report

    prov = report.provenance(commit)
    for name in PACKAGES:
        prov[f"package_{PACKAGES[name][0]}"] = package_version(name) or "not installed"
    try:
        import tilelang

        prov["package_tilelang"] = tilelang.__version__
    except Exception:  # noqa: BLE001 - optional
        prov["package_tilelang"] = "not installed"
    prov["stack"] = "production"
    if os.environ.get("DEEPGEMM_COMMIT"):  # set by device_call_deepgemm.sh: the source commit and compiler
        prov["deepgemm_commit"] = os.environ["DEEPGEMM_COMMIT"]
        prov["nvcc"] = os.environ.get("NVCC_VERSION", "")
    return prov


def production_markdown(rows: list[dict], prov: dict) -> str:
    """Provenance, then every row (the kernels_bench row columns plus the package)."""
    from kernels_bench import report

    table = [[k, json.dumps(v) if isinstance(v, (dict, list)) else v] for k, v in prov.items()]
    cols = [
        "family",
        "kernel",
        "impl",
        "model",
        "layer_kind",
        "fmt",
        "batch",
        "context_tokens",
        "chunk_tokens",
        "n",
        "median_us",
        "achieved_TFLOPs",
        "achieved_GBps",
        "frac_of_ceiling",
        "check_passed",
        "rel_err",
        "package",
        "package_version",
        "note",
    ]
    return "\n".join(
        [
            "# production stack results",
            "",
            "## Provenance",
            "",
            report.markdown_table(["key", "value"], table),
            "",
            "## All rows",
            "",
            report.markdown_table(cols, [[r.get(c, "") for c in cols] for r in rows]),
            "",
        ]
    )


def main(argv=None) -> int:
    args = _parse(argv)
    import torch

    if args.warm:
        from kernels_bench.production import deepgemm

        deepgemm.warm(args.warm.split(","))
        return 0

    from kernels_bench import report
    from kernels_bench.families import Ctx
    from kernels_bench.grid import PRESETS
    from kernels_bench.production import deepgemm as DG
    from kernels_bench.production import families as PF

    if not torch.cuda.is_available():
        print("error: CUDA is not available (the production stack runs on the GPU only)", file=sys.stderr)
        return 2
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    log_f = (out / "production_log.txt").open("w")
    t0 = time.monotonic()

    def log(msg: str) -> None:
        line = f"[{time.monotonic() - t0:7.1f}s] {msg}"
        print(line, flush=True)
        log_f.write(line + "\n")
        log_f.flush()

    prov = production_provenance(args.commit)
    prov["preset"] = args.preset
    log(f"provenance: {json.dumps(prov)}")
    ctx = Ctx(
        grid=PRESETS[args.preset], device="cuda", timed=True, log=log, deadline=t0 + args.budget_s, tune={}
    )
    cols = PF.PROD_COLUMNS
    rows: list[dict] = []
    for fam in [f for f in args.families.split(",") if f]:
        log(f"family {fam}")
        try:
            if NEEDS[fam]:
                require(NEEDS[fam])
            rows.extend((PF.FAMILIES | DG.FAMILIES)[fam](ctx))
        except MissingPackage as e:
            log(f"  {e}")
            rows.append(PF.missing_row(fam, e))
        torch.cuda.empty_cache()
        report.write_json(out / "production_results.json", rows, prov)
    prov["elapsed_s"] = round(time.monotonic() - t0, 1)
    report.write_json(out / "production_results.json", rows, prov, extra={"columns": cols})
    report.write_csv(out / "production_results.csv", rows, prov, columns=cols)
    report.atomic_write(out / "production_results.md", production_markdown(rows, prov))
    n_fail = sum(1 for r in rows if r["check_passed"] is False)
    log(f"done: {len(rows)} rows, {n_fail} failed or skipped, {prov['elapsed_s']} s")
    log_f.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
