"""Production vs kernels_bench, per kernel and shape: ``python3 -m kernels_bench.production.compare``.

Joins ``production_results.csv`` with ``kernels_bench_results.csv`` on the row identity (family, kernel,
model, layer kind, batch, context, chunk, rows, n, k) and prints a markdown table of both medians and the
speed-up (ours / production). Format differences are shown, not hidden (attention prefill only: production's
kernel reads bf16 KV, ours FP8; other families join on the format too).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from kernels_bench.report import markdown_table

KEY = ("family", "kernel", "model", "layer_kind", "batch", "context_tokens", "chunk_tokens", "rows", "n", "k")
HW = Path(__file__).resolve().parents[2] / "hwprofiles" / "h200"


def read_rows(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def _key(r: dict, fmt_free: bool) -> tuple:
    return tuple(r[k] for k in KEY) + (() if fmt_free else (r["fmt"],))


def compare(prod: list[dict], ours: list[dict]) -> list[dict]:
    """One entry per production row that has a timed kernels_bench row of the same identity."""
    by_key: dict[tuple, dict] = {}
    for r in ours:
        if r["median_us"] and r["check_passed"] == "True":
            by_key.setdefault(_key(r, False), r)
            by_key.setdefault(_key(r, True), r)
    out = []
    for p in prod:
        if not p["median_us"]:
            continue
        # formats may differ only where production reads another one by design (prefill: bf16 KV)
        o = by_key.get(_key(p, False)) or (by_key.get(_key(p, True)) if p["family"] == "attention" else None)
        if o is None:
            continue
        out.append(
            {
                **{k: p[k] for k in KEY},
                "fmt_production": p["fmt"],
                "fmt_ours": o["fmt"],
                "impl": p["impl"],
                "production_us": float(p["median_us"]),
                "ours_us": float(o["median_us"]),
                "speedup": float(o["median_us"]) / float(p["median_us"]),
            }
        )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="kernels_bench.production.compare", description=__doc__.splitlines()[0])
    ap.add_argument("--production", type=Path, default=HW / "production_results.csv")
    ap.add_argument("--ours", type=Path, default=HW / "kernels_bench_results.csv")
    ap.add_argument("--family", default="", help="only this family")
    ap.add_argument(
        "--write-derived",
        action="store_true",
        help="append the derived V4.1 CSA2 rows to the production tables",
    )
    ap.add_argument(
        "--add-run", type=Path, default=None, help="with --write-derived: a later run's JSON to append"
    )
    args = ap.parse_args(argv)
    if args.write_derived:
        print(f"{write_with_derived(args.production.parent, args.add_run)} derived rows written")
        return 0
    rows = compare(read_rows(args.production), read_rows(args.ours))
    if args.family:
        rows = [r for r in rows if r["family"] == args.family]
    cols = [
        "family",
        "kernel",
        "impl",
        "model",
        "layer_kind",
        "fmt_production",
        "fmt_ours",
        "batch",
        "context_tokens",
        "chunk_tokens",
        "production_us",
        "ours_us",
        "speedup",
    ]
    print(markdown_table(cols, [[r[c] for c in cols] for r in rows]))
    return 0


def derived_csa2_rows(prod: list[dict], ours: list[dict]) -> list[dict]:
    """V4.1 CSA2 (FP8-528 window + NVFP4-288 compressed) sparse MLA rows for the production stack, derived.

    FlashMLA has V4.1 kernels for SM100 only (kernels.md §3.1), so no production Hopper kernel exists. The
    derived time is kernels_bench's CSA2 row scaled by the measured production/ours ratio of the V4 CSA row
    at the same batch (decode) or chunk (prefill): the same entry count (128 + 512) and head shape, so the
    ratio carries the kernel-quality gap while ours keeps the V4.1 format's dequant cost.
    """
    from kernels_bench.report import make_row

    def index(rows, impl_ok):
        return {
            (r["kernel"], r["model"], r["layer_kind"], r["batch"], r["chunk_tokens"]): r
            for r in rows
            if r["family"] == "attention" and r["median_us"] and impl_ok(r)
        }

    p = index(prod, lambda r: r["impl"] == "flashmla")
    o = index(ours, lambda r: r["check_passed"] == "True")
    out = []
    for (kernel, model, kind, b, t), r41 in sorted(o.items()):
        if model != "V4.1" or kind != "CSA2":
            continue
        pv4, ov4 = p.get((kernel, "V4", "CSA", b, t)), o.get((kernel, "V4", "CSA", b, t))
        if pv4 is None or ov4 is None:
            continue
        ratio = float(pv4["median_us"]) / float(ov4["median_us"])
        fields = {c: r41[c] for c in KEY + ("fmt", "flops", "bytes", "compute_ceiling_TFLOPs", "groups")}
        row = make_row(
            **fields,
            impl="derived",
            median_us=float(r41["median_us"]) * ratio,
            timing_method="derived",
            check_passed="",
            note=(
                f"derived: kernels_bench CSA2 {float(r41['median_us']):.4g} us x production/ours of V4 CSA "
                f"at the same shape ({float(pv4['median_us']):.4g}/{float(ov4['median_us']):.4g} = {ratio:.3f}); "
                "no Hopper FlashMLA kernel for the V4.1 formats (SM100 only)"
            ),
        )
        row.update(stack="production", package="derived", package_version="")
        out.append(row)
    return out


def write_with_derived(hw: Path = HW, add_run: Path | None = None) -> int:
    """Rewrite production_results.{csv,json,md} with the derived rows appended (idempotent); ``add_run``: a
    later run's production_results.json whose rows replace those of the same identity (``merge.KEY``) or
    are appended (``note`` ends with ``[run N]``, its provenance recorded as ``run N``)."""
    import json

    from kernels_bench import report
    from kernels_bench.merge import row_key
    from kernels_bench.production.families import PROD_COLUMNS
    from kernels_bench.production.run import production_markdown

    doc = json.loads((hw / "production_results.json").read_text())
    rows = [r for r in doc["rows"] if r.get("impl") != "derived"]
    prov = doc["provenance"]
    if add_run is not None:
        new = json.loads(add_run.read_text())
        n = 2 + sum(1 for k in prov if k.startswith("run "))
        prov[f"run {n}"] = new["provenance"]
        at = {row_key(r): i for i, r in enumerate(rows)}
        for r in new["rows"]:
            r["note"] = f"{r.get('note') or ''} [run {n}]".strip()
            if row_key(r) in at:
                rows[at[row_key(r)]] = r
            else:
                at[row_key(r)] = len(rows)
                rows.append(r)
    as_str = [{k: ("" if v is None else str(v)) for k, v in r.items()} for r in rows]
    derived = derived_csa2_rows(as_str, read_rows(hw / "kernels_bench_results.csv"))
    prov["derived_rows"] = (
        f"{len(derived)} rows with impl=derived (V4.1 CSA2; see kernels_bench/production/compare.py)"
    )
    rows += derived
    cols = PROD_COLUMNS
    report.write_json(hw / "production_results.json", rows, prov, extra={"columns": cols})
    report.write_csv(hw / "production_results.csv", rows, prov, columns=cols)
    report.atomic_write(hw / "production_results.md", production_markdown(rows, prov))
    return len(derived)


if __name__ == "__main__":
    raise SystemExit(main())
