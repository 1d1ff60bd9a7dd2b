"""sim's committed predictions for a GPU against what was measured on it afterwards (issue 28).

    python3 -m kernels_bench.carry_compare --predicted docs/carry/h100/predicted --measured DIR [--out DIR]

`--predicted`: kernels_bench.carry_predict's files (written before the measurement). `--measured`: a folder
holding the measured tables in any sub-folders (`production_results.csv`, `kernels_bench_results.csv`,
`forward_pass_results.csv`, `serve_step_times*.csv`), as kernels_bench/device_carry_check.sh leaves them.
Error = predicted / measured - 1, per kernel row (joined on kernels_bench.merge.KEY), per forward-pass
point and per served step; the summary gives the median |error|, the median signed error and the worst
per family and kernel. Writes `kernels.csv`, `forward.csv`, `serve_<spec>.csv` and `summary.md` to --out.
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from kernels_bench.merge import KEY

SERVE_KEYS = ("mode", "batch", "context_tokens", "chunk_tokens", "prefill_context_tokens")


@dataclass(frozen=True)
class Errors:
    """The errors of one group of points."""

    n: int
    median_abs: float
    median: float
    worst: float  # the signed error of largest magnitude

    @classmethod
    def of(cls, errs: list[float]) -> Errors:
        return cls(len(errs), statistics.median(abs(e) for e in errs), statistics.median(errs),
                   max(errs, key=abs))  # fmt: skip

    def cells(self) -> list[str]:
        return [str(self.n), f"{self.median_abs:.1%}", f"{self.median:+.1%}", f"{self.worst:+.1%}"]


def read_csv(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def _num(x: str) -> str:
    """A shape cell as carry_predict writes it (integers without a decimal point)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return x or ""
    return str(int(v)) if v == int(v) else f"{v:g}"


def _key(row: dict) -> tuple[str, ...]:
    return tuple(row[c] if c in ("family", "kernel", "impl", "model", "layer_kind", "fmt") else _num(row[c])
                 for c in KEY)  # fmt: skip


def measured_kernels(folder: Path) -> dict[tuple[str, str], dict]:
    """(stack, key) -> measured row with a time and a passed check, from every kernel table under folder."""
    out = {}
    for name, stack in (
        ("production_results.csv", "production"),
        ("kernels_bench_results.csv", "kernels_bench"),
    ):
        for path in sorted(folder.rglob(name)):
            for r in read_csv(path):
                if r.get("check_passed") != "True" or not (r.get("median_us") or "").strip():
                    continue
                out[stack, _key(r)] = r
    return out


def compare_kernels(predicted: Path, measured: Path) -> list[dict]:
    meas = measured_kernels(measured)
    rows = []
    for p in read_csv(predicted / "kernels.csv"):
        m = meas.get((p["stack"], _key(p)))
        if m is None:
            continue
        t = float(m["median_us"])
        rows.append({"stack": p["stack"], **{c: p[c] for c in KEY}, "h200_us": p["h200_us"],
                     "predicted_us": p["predicted_us"], "measured_us": f"{t:g}",
                     "measured_over_h200": f"{t / float(p['h200_us']):.4f}",
                     "error": f"{float(p['predicted_us']) / t - 1.0:.4f}", "bound": p["bound"]})  # fmt: skip
    return rows


def compare_points(predicted_rows: list[dict], measured_rows: list[dict], keys: tuple[str, ...],
                   measured_col: str, variants: list[str]) -> list[dict]:  # fmt: skip
    meas = {tuple(_num(r[k]) for k in keys): r for r in measured_rows if (r.get(measured_col) or "").strip()}
    out = []
    for p in predicted_rows:
        m = meas.get(tuple(_num(p[k]) for k in keys))
        if m is None:
            continue
        t = float(m[measured_col])
        row = {**{k: p[k] for k in keys}, "h200_us": p.get("h200_measured_us", ""), "measured_us": f"{t:g}"}
        for v in variants:
            row[f"error_{v}"] = f"{float(p[f'predicted_{v}_us']) / t - 1.0:.4f}"
        out.append(row)
    return out


def summary(
    rows: list[dict], by: tuple[str, ...], col: str = "error"
) -> list[tuple[tuple[str, ...], Errors]]:
    groups: dict[tuple[str, ...], list[float]] = defaultdict(list)
    for r in rows:
        groups[tuple(r[c] for c in by)].append(float(r[col]))
    return sorted((k, Errors.of(v)) for k, v in groups.items())


def _md_table(head: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(lines)


def _write(path: Path, rows: list[dict]) -> None:
    if not rows:
        return
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def run(predicted: Path, measured: Path, out: Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    parts = []
    k = compare_kernels(predicted, measured)
    _write(out / "kernels.csv", k)
    head = ["n", "median abs", "median", "worst"]
    if k:
        parts.append("## Kernels (error = predicted / measured - 1)\n")
        parts.append(_md_table(["stack", *head], [[s[0], *e.cells()] for s, e in summary(k, ("stack",))]))
        parts.append("")
        parts.append(_md_table(["stack", "family", "kernel", "bound on the H200", *head],
                               [[*s, *e.cells()] for s, e in summary(k, ("stack", "family", "kernel", "bound"))]))  # fmt: skip
        parts.append("")
    fwd_meas = [{**r, "stack": "layer" if r["n_layers"] == "1" else f"{r['n_layers']} layers"}
                for p in sorted(measured.rglob("forward_pass_results.csv")) for r in read_csv(p)]  # fmt: skip
    if fwd_meas and (predicted / "forward.csv").is_file():
        variants = ["kernels", "measured", "fused_glue"]
        f = compare_points(read_csv(predicted / "forward.csv"), fwd_meas,
                           ("stack", "mode", "batch", "context_tokens", "chunk_tokens"), "measured_us_p50", variants)  # fmt: skip
        _write(out / "forward.csv", f)
        if f:
            parts.append("## Forward-pass points (one GPU)\n")
            parts.append(_md_table(["prediction", *head], [[v, *Errors.of([float(r[f"error_{v}"]) for r in f]).cells()]
                                                           for v in variants]))  # fmt: skip
            parts.append("")
    for pred in sorted(predicted.glob("serve_*.csv")):
        spec = pred.stem.removeprefix("serve_")
        meas = [r for p in sorted(measured.rglob("serve_step_times*.csv")) for r in read_csv(p)
                if r.get("spec") == spec]  # fmt: skip
        if not meas:
            continue
        rows = read_csv(pred)
        # the predictions the file holds (`served` only in those written since the H100 measurement)
        variants = [
            c.removeprefix("predicted_").removesuffix("_us") for c in rows[0] if c.startswith("predicted_")
        ]
        s = compare_points(rows, meas, SERVE_KEYS, "wall_us_p50", variants)
        _write(out / f"serve_{spec}.csv", s)
        if s:
            parts.append(f"## Served steps, {spec}\n")
            body = []
            for v in variants:
                for mode in ("decode", "prefill", "mixed", "all"):
                    errs = [float(r[f"error_{v}"]) for r in s if mode in ("all", r["mode"])]
                    if errs:
                        body.append([v, mode, *Errors.of(errs).cells()])
            parts.append(_md_table(["prediction", "steps", *head], body))
            parts.append("")
    text = "\n".join(parts)
    (out / "summary.md").write_text(text + "\n")
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="kernels_bench.carry_compare", description=__doc__.splitlines()[0])
    ap.add_argument("--predicted", type=Path, required=True)
    ap.add_argument("--measured", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=None, help="default: beside --predicted, `blind/`")
    args = ap.parse_args(argv)
    print(run(args.predicted, args.measured, args.out or args.predicted.parent / "blind"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
