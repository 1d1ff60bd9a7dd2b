"""Merge a targeted re-run (``run_all --families ...``) into the committed tables.

    python3 -m kernels_bench.merge --base hwprofiles/h200 --new DIR

Rows of the re-run replace the rows with the same identity (``KEY``) in place (rows it skipped for time
do not); rows it adds are appended;
every other row is kept with its original run. The CSV keeps its columns: run 1's provenance stays as its
``# key: value`` header lines, each later run adds a ``# run N: {...}`` line, and the ``note`` of a row
measured in run N >= 2 ends with ``[run N]``; the JSON rows carry ``run``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kernels_bench import report

KEY = (
    "family",
    "kernel",
    "impl",
    "model",
    "layer_kind",
    "fmt",
    "batch",
    "context_tokens",
    "chunk_tokens",
    "rows",
    "n",
    "k",
    "groups",
)
PREFIX = "kernels_bench_"


def row_key(row: dict) -> tuple[str, ...]:
    return tuple(str(row.get(c, "")) for c in KEY)


def _strip_run(note: str) -> str:
    return note.split(" [run ")[0] if isinstance(note, str) else note


def merge_rows(base: list[dict], new: list[dict], new_run: int) -> list[dict]:
    """Base rows (each with its ``run``) with the new run's rows replacing same-key rows or appended."""
    out = [dict(r) for r in base]
    at = {row_key(r): i for i, r in enumerate(out)}
    for r in new:
        if str(r.get("note", "")).startswith("skipped"):  # cut by the run's time budget: keep the old row
            continue
        r = {**r, "run": new_run}
        k = row_key(r)
        if k in at:
            out[at[k]] = r
        else:
            at[k] = len(out)
            out.append(r)
    return out


def _csv_rows(rows: list[dict]) -> list[dict]:
    """Rows of later runs get ``[run N]`` at the end of their note (run 1's rows are left as they were)."""
    out = []
    for r in rows:
        note = _strip_run(r.get("note", ""))
        out.append({**r, "note": note if r["run"] == 1 else f"{note} [run {r['run']}]".strip()})
    return out


def write_tables(out_dir: Path, rows: list[dict], provs: list[dict], extra: dict) -> None:
    """results.json / .csv / .md under ``out_dir`` with the ``kernels_bench_`` prefix."""
    # run 1's provenance stays as flat "# key: value" lines (as run_all writes them); later runs follow
    header = {**provs[0], "rows_of_later_runs": "note ends with [run N]; N as in the run N lines below"}
    header.update({f"run {i + 1}": prov for i, prov in enumerate(provs) if i > 0})
    report.write_csv(out_dir / f"{PREFIX}results.csv", _csv_rows(rows), header)
    doc = {"provenance": provs[0], "runs": provs, "columns": report.COLUMNS, "rows": rows, **extra}
    report.atomic_write(out_dir / f"{PREFIX}results.json", json.dumps(doc, indent=1, default=str) + "\n")
    report.atomic_write(out_dir / f"{PREFIX}results.md", report.results_markdown(rows, provs))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="kernels_bench.merge", description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, type=Path, help="folder with kernels_bench_results.json")
    ap.add_argument("--new", required=True, type=Path, help="run_all output folder (results.json)")
    args = ap.parse_args(argv)
    base = json.loads((args.base / f"{PREFIX}results.json").read_text())
    new = json.loads((args.new / "results.json").read_text())
    provs = base.get("runs") or [base["provenance"]]
    base_rows = [{**r, "run": r.get("run", 1)} for r in base["rows"]]
    provs = provs + [new["provenance"]]
    rows = merge_rows(base_rows, new["rows"], len(provs))
    tunes = base.get("tune_by_run") or {"1": base.get("tune", {})}
    # a run cut short by its timeout leaves results.json without "tune"; tune.json has what it used
    tune_path = args.new / "tune.json"
    used = json.loads(tune_path.read_text()).get("used", {}) if tune_path.exists() else {}
    tunes[str(len(provs))] = new.get("tune") or used
    write_tables(args.base, rows, provs, {"tune_by_run": tunes})
    replaced = sum(1 for r in rows if r["run"] == len(provs))
    print(f"merged run {len(provs)}: {replaced} rows re-measured or added, {len(rows)} rows in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
