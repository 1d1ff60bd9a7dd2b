"""sim's predictions for a GPU it has no tables of, written before that GPU is measured (issue 28).

    python3 -m kernels_bench.carry_predict h100 --out docs/carry/h100/predicted

Everything here is the H200's measurements carried by sim's rule (sim.timing.carry) to `gpu`, whatever
tables `gpu` may have later, so that the files can be compared with a measurement afterwards
(kernels_bench.carry_compare):

- `kernels.csv`: every row of the H200's kernels_bench and production tables (their identity columns,
  kernels_bench.merge.KEY), its H200 time and its carried time. The kernels_bench rows are carried within
  the kernels_bench stack, the production rows within the production stack (its op-class bests, rule 2),
  also the production rows the stack does not compose (cuBLASLt where DeepGEMM is preferred).
- `forward.csv`: the H200's forward-pass points (sim.timing.forward) on one `gpu`: the carried kernels
  composed, and with the carried `measured` term (the pass runs its own glue) and `fused_glue` term.
- `serve_<spec>.csv`: each served mini's bench grid (hwprofiles/h200/serve) on one `gpu` with the served
  engine's settings: the kernel sum (`none`), with the carried `fused_glue` / `measured` terms (what
  `sim run` can use on `gpu` today), `served` (the served engine's term and in-step host time as `sim validate
  --real` takes them: carried part by part where `gpu` has no served bench, sim.timing.forward
  `carried_served_check`; written since the H100 measurement) and `h200_served`: the kernel sum plus the H200's
  own served term and in-step host time, taken as they are (the part of a step that is not kernels, unscaled).
- `calibrate_show.json`: `sim calibrate show GPU --json` as it stands.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
from pathlib import Path

from kernels_bench.merge import KEY
from kernels_bench.serve import predict as serve_predict

SERVE_TABLES = {
    "deepseek-v4-flash-mini": "serve/serve_step_times.csv",
    "deepseek-v4.1-flash-mini": "serve/serve_step_times_deepseek-v4.1-flash-mini.csv",
}


def _fmt(x: float | None) -> str:
    if x is None:
        return ""
    return f"{x:g}" if x != int(x) else str(int(x))


def _key_cells(r) -> dict:
    return {c: (_fmt(getattr(r, c)) if c not in ("family", "kernel", "impl", "model", "layer_kind", "fmt")
                else getattr(r, c)) for c in KEY}  # fmt: skip


def kernel_rows(gpu_name: str) -> list[dict]:
    """Every H200 row of both stacks and the raw production table, carried to `gpu_name`."""
    from sim.paths import hwprofiles_dir
    from sim.timing.carry import (
        REFERENCE_GPU,
        GpuPeaks,
        carried_stack,
        carried_time_s,
        class_best,
        regime,
        saturation,
        work_of,
    )
    from sim.timing.stacks import PRODUCTION_FILE, load_stack
    from sim.timing.tables import load_tables, resolve_gpu

    _, profile = resolve_gpu(gpu_name)
    peaks = GpuPeaks.of(profile)
    out: list[dict] = []
    seen: set[tuple] = set()
    for stack in ("kernels_bench", "production"):
        ref = load_stack(REFERENCE_GPU, stack)
        carried = carried_stack(peaks, stack)
        order = [r for r in ref.rows if r.family != "pipeline"] + [
            r for r in ref.rows if r.family == "pipeline"
        ]
        for h, c in zip(order, carried.rows, strict=True):
            if stack == "production" and not h.package:
                continue  # a kernels_bench row of the composed stack: written with its own stack above
            out.append(_row(stack, h, c.median_s, work_of(h), regime(h, saturation(ref))))
            seen.add((stack, *_key_cells(h).values()))
    # production rows the composed stack leaves out, carried with the production stack's class bests
    prod = load_stack(REFERENCE_GPU, "production")
    best, sat = class_best(prod), saturation(prod)
    raw = load_tables(hwprofiles_dir() / REFERENCE_GPU / PRODUCTION_FILE)
    for h in raw.rows:
        if ("production", *_key_cells(h).values()) in seen or h.family == "pipeline":
            continue
        out.append(_row("production", h, carried_time_s(h, peaks, best, sat), work_of(h), regime(h, sat)))
    return out


def _row(stack: str, h, carried_s: float, work, regime: str) -> dict:
    return {"stack": stack, **_key_cells(h), "package": h.package, "h200_us": round(h.median_s * 1e6, 4),
            "predicted_us": round(carried_s * 1e6, 4),
            "bound": regime,
            "compute_frac": round(work.compute_frac, 5), "bandwidth_frac": round(work.bandwidth_frac, 5)}  # fmt: skip


def forward_rows(gpu_name: str) -> list[dict]:
    """The H200's forward-pass points predicted on one `gpu_name`."""
    from sim.timing.carry import REFERENCE_GPU, GpuPeaks, carried_stack
    from sim.timing.forward import FIT_STACK, forward_path, forward_term, kernels_s, load_points
    from sim.timing.tables import resolve_gpu

    _, profile = resolve_gpu(gpu_name)
    tables = carried_stack(GpuPeaks.of(profile), FIT_STACK)
    terms = {w: forward_term(profile, w) for w in ("measured", "fused_glue")}
    out = []
    for p in load_points(forward_path(REFERENCE_GPU))[1]:
        k = kernels_s(p, tables, profile)
        n = len(p.layer_kinds)
        row = {"stack": p.label, "layer_kinds": ";".join(p.layer_kinds), "mode": p.mode, "batch": p.batch,
               "context_tokens": p.context_tokens, "chunk_tokens": p.chunk_tokens,
               "h200_measured_us": round(p.measured_s * 1e6, 2), "predicted_kernels_us": round(k * 1e6, 2)}  # fmt: skip
        for w, t in terms.items():
            row[f"predicted_{w}_us"] = round((k + n * (t.per_layer_s + t.per_layer_row_s * p.rows)) * 1e6, 2)
        out.append(row)
    return out


def serve_rows(gpu_name: str, spec: str, table: Path) -> list[dict]:
    """The served mini's bench grid (`table`, measured on the H200) predicted on one `gpu_name`."""
    from sim.timing.forward import served_check

    ref_ctx = serve_predict.mini_context("h200", spec=spec)
    h200 = served_check(table, ref_ctx)
    a, b = h200.term.per_layer_s, h200.term.per_layer_row_s
    timings = {v: serve_predict.mini_timing(gpu_name, forward_term=v, spec=spec, host=False)
               for v in ("none", "fused_glue", "measured")}  # fmt: skip
    # what `sim validate --real` runs: the served engine's term and host time, carried where the GPU has no bench
    timings["served"] = serve_predict.mini_timing(gpu_name, forward_term="served", spec=spec, host=True)
    h200_host = serve_predict.mini_timing("h200", forward_term="none", spec=spec, host=True)
    h200_bare = serve_predict.mini_timing("h200", forward_term="none", spec=spec, host=False)
    layers = ref_ctx.arith.spec.n_layers
    out = []
    for r, p in zip(h200.rows, _points(table), strict=True):
        pt = (p["batch"], p["context_tokens"], p["chunk_tokens"], p["prefill_context_tokens"])
        row = {k: p[k] for k in serve_predict.POINT_KEYS}
        row["h200_measured_us"] = round(r["measured_us"], 1)
        for v, tm in timings.items():
            row[f"predicted_{v}_us"] = round(serve_predict.predict_step_s(tm, *pt) * 1e6, 1)
        host_s = serve_predict.predict_step_s(h200_host, *pt) - serve_predict.predict_step_s(h200_bare, *pt)
        rows = h200_bare.padded_rows(p["batch"] + p["chunk_tokens"])
        row["predicted_h200_served_us"] = round(
            (serve_predict.predict_step_s(timings["none"], *pt) + host_s + layers * (a + b * rows)) * 1e6, 1
        )
        out.append(row)
    return out


def _points(table: Path) -> list[dict]:
    from sim.timing.forward import load_serve_points

    return [{"mode": p.mode, "batch": p.batch, "context_tokens": p.context_tokens,
             "chunk_tokens": p.chunk_tokens, "prefill_context_tokens": p.prefill_context_tokens}
            for p in load_serve_points(table)[1]]  # fmt: skip


def _write(path: Path, rows: list[dict], header: dict[str, str]) -> None:
    with path.open("w", newline="") as f:
        for k, v in header.items():
            f.write(f"# {k}: {v}\n")
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="kernels_bench.carry_predict", description=__doc__.splitlines()[0])
    ap.add_argument("gpu", help="GPU key with a hardware profile (h100, b200, ...)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    from sim.paths import hwprofiles_dir, project_root

    args.out.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    header = {"what": f"sim's carried prediction for {args.gpu} (kernels_bench.carry_predict)", "commit": commit,
              "rule": "sim/timing/carry.py, sim/timing/forward.py at that commit"}  # fmt: skip
    _write(args.out / "kernels.csv", kernel_rows(args.gpu), header)
    _write(args.out / "forward.csv", forward_rows(args.gpu), header)
    for spec, rel in SERVE_TABLES.items():
        _write(
            args.out / f"serve_{spec}.csv",
            serve_rows(args.gpu, spec, hwprofiles_dir() / "h200" / rel),
            header,
        )
    show = subprocess.run(["sim", "calibrate", "show", args.gpu, "--json"], capture_output=True, text=True,
                          check=True).stdout  # fmt: skip
    # paths relative to the repository (the JSON names the tables it read by absolute path)
    show = show.replace(str(project_root()) + "/", "")
    (args.out / "calibrate_show.json").write_text(json.dumps(json.loads(show), indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
