"""`sim sweep SCENARIO --gpus N`: the deployment search (sim.sweep.space), its files and its table."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from sim.sweep.space import SpaceResult, deployments, parse_layouts, run_space

SPACE_JSON = "space.json"


def run(template: dict[str, Any], scn, *, gpus: int, layouts: dict[str, str | None], concurrencies: list[int] | None,
        target_s: float, workers: int, ray: str | None, seed: int | None, out: Path, json_output: bool,
        shown_out: Path | None = None, decoder_tail: str = "auto", percentile: str = "p50") -> None:  # fmt: skip
    """Enumerate, sweep, write `space.json` and each deployment's sweep under `deployments/` of
    `out` (a staged folder that becomes `shown_out`: sim.outputs), print."""
    from sim.sweep.runner import write_outputs

    hw = scn.pool_profile(scn.cluster.pools[0])
    deps = deployments(gpus, hw.gpus_per_node, **{r: parse_layouts(v, r) for r, v in layouts.items()},
                       decoder_tail=decoder_tail)  # fmt: skip
    err = Console(stderr=True)
    done = [0]

    def on_progress(label: str) -> None:
        done[0] += 1
        err.print(f"[{done[0]}/{len(deps)}] {label}")

    result = run_space(template, deps, gpus=gpus, gpus_per_node=hw.gpus_per_node, concurrencies=concurrencies, target_tpot_s=target_s,
                       ttft_limit_s=scn.slo.ttft_s, workers=workers, ray=ray, seed=seed,
                       progress=on_progress, tpot_percentile=percentile)  # fmt: skip
    for label, sweep in result.sweeps.items():
        write_outputs(sweep, out / "deployments" / _slug(label))
    path = out / SPACE_JSON
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result.to_json(), indent=2) + "\n")
    os.replace(tmp, path)
    if json_output:
        typer.echo(json.dumps(result.to_json(), indent=2))
        return
    _print(result, scn.name, (shown_out or out) / SPACE_JSON)


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", label).strip("-").lower()


def _print(result: SpaceResult, name: str, path: Path) -> None:
    console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)
    target_ms = result.target_tpot_s * 1e3
    table = Table(
        title=f"{name}: {result.gpus} GPUs, output tok/s/GPU at TPOT {result.tpot_percentile} = {target_ms:g} ms "
        f"and TTFT p90 <= {result.ttft_limit_s:g} s; aggregated steps {result.step_composition}"
    )
    for column in ("model", "deployment", "tok/s/GPU", "at", "concurrency", "TTFT p50 s", "load per pool"):
        table.add_column(column, justify="left" if column in ("model", "deployment", "at") else "right")
    for r in result.rows:
        loads = ", ".join(f"{k} {v:.0%}" for k, v in (r.get("loads") or {}).items() if v is not None)
        how = r["how"] or ""
        if r["pruned"]:
            how, loads = "pruned", r["pruned"][:60]
        elif r["tok_s_gpu"] is None:
            how = r.get("note") or "not reached"
        modes = sorted(set((r.get("prefill_modes") or {}).values()))
        label = r["deployment"] + (f" (prefill {', '.join(modes)})" if modes else "")
        table.add_row(r["model"], label, _num(r["tok_s_gpu"], 1), how, _num(r["concurrency"], 1),
                      _num(r["ttft_p50_s"], 2), loads)  # fmt: skip
    console.print(table)
    for model, kinds in result.to_json()["best"].items():
        agg, dis = kinds["aggregated"], kinds["disaggregated"]
        parts = [f"{k} {b['deployment']}: {b['tok_s_gpu']:.1f}" if b else f"{k}: none reached the target"
                 for k, b in (("aggregated", agg), ("disaggregated", dis))]  # fmt: skip
        ratio = (
            f" (disaggregated / aggregated {dis['tok_s_gpu'] / agg['tok_s_gpu']:.2f}x)" if agg and dis else ""
        )
        console.print(f"{model} best: " + "; ".join(parts) + ratio)
    console.print(f"outputs: {path} and deployments/<deployment>/sweep.json")


def _num(value: float | None, digits: int) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"
