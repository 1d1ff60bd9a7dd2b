"""From run directories to one HTML page: which sections, in which order. `sim report` is the one-run case
of `sim compare`."""

from __future__ import annotations

import os
from pathlib import Path

from sim.report import (
    capacity,
    cost,
    headline,
    inputs,
    kvtiers,
    latency,
    links,
    sustained,
    timeaxis,
    timeseries,
)
from sim.report.page import Section, figures_of, render_page
from sim.report.rundata import RunData
from sim.report.series import build_series
from sim.report.theme import fit_legend


def sections_for(runs: list[RunData]) -> list[Section]:
    """Ordered to answer "which model, how much cheaper, why": the capacity verdict (the load each model
    sustains and its cost per task there) when the run searched it, then the run at the scenario's own
    load: its verdict and cost, the capacity and cache behaviour that explain it, latency, load and I/O,
    then the inputs."""
    series = build_series(runs)
    axis = timeaxis.time_axis(runs)
    first = sustained.sustained_panels(series)
    searched = [Section("Capacity at the SLO", first, CAPACITY_INTRO)] if first else []
    return [
        *searched,
        Section("Summary" if not first else "At the scenario's own load", headline.headline_panels(series)),
        Section("Cost", cost.cost_panels(series), "Over the measured window (after the warm-up)."),
        Section(
            "Capacity per model",
            capacity.capacity_panels(series),
            "Fewer KV bytes per token means more sessions per node and more prefixes kept in fast tiers.",
        ),
        Section(
            "KV cache tiers",
            [
                kvtiers.kv_bytes_panel(series, axis),
                kvtiers.hit_breakdown_panel(series),
                kvtiers.bytes_moved_panel(series),
            ],
        ),
        Section(
            "Latency",
            latency.latency_panels(series),
            "Cumulative distributions over measured, completed requests (arrived after the warm-up).",
        ),
        Section(
            "Throughput and queues",
            [timeseries.throughput_panel(series, axis), timeseries.queue_panel(series, axis)],
        ),
        Section("Network and I/O", [links.bandwidth_panel(series, axis)]),
        Section("Inputs", [inputs.scenario_panel(series)]),
    ]


CAPACITY_INTRO = (
    "The highest load at which each model's SLO still held, measured by simulating each load "
    "(sim.capacity), and the steady-state cost per task there; the sections below are the run at the "
    "scenario's own load."
)


def describe(run: RunData) -> str:
    """'scenario agent_1M, seed 7: deepseek-v4-flash, deepseek-v4.1-flash'."""
    name, seed = run.scenario.get("name"), run.summary.get("seed")
    head = ", ".join(
        x for x in (f"scenario {name}" if name else "", f"seed {seed}" if seed is not None else "") if x
    )
    return f"{head}: {', '.join(run.models)}" if head else ", ".join(run.models)


def page_title(runs: list[RunData]) -> tuple[str, str]:
    if len(runs) == 1:
        run = runs[0]
        return f"sim report — {run.label}", f"{describe(run)} · {run.path}"
    return f"sim compare — {len(runs)} runs", " | ".join(f"{r.label}: {describe(r)}" for r in runs)


WIDE_PX, HALF_PX = 1300, 620  # chart widths on a 1400-px page: full row, half row


def build_page(runs: list[RunData]) -> tuple[str, int]:
    """The page and the number of charts on it."""
    sections = sections_for(runs)
    for panel in (p for s in sections for p in s.panels if p.figure is not None):
        fit_legend(panel.figure, WIDE_PX if panel.wide else HALF_PX)
    title, subtitle = page_title(runs)
    run_ids = tuple(str(run.summary.get("run_id", "")) for run in runs)
    return render_page(title, subtitle, sections, run_ids), len(figures_of(sections))


def write_atomic(path: Path, text: str) -> None:
    """Write to a temporary file in the same folder, then rename: never a half-written page. (`open`
    rather than mkstemp, so the page gets the usual permissions from the umask.)"""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def unique_labels(paths: list[Path]) -> list[str]:
    """Folder names, with parent folders added until they differ (two runs named `out` stay apart)."""
    labels = [p.resolve().name for p in paths]
    depth = 1
    while len(set(labels)) < len(labels) and depth < 6:
        depth += 1
        labels = ["/".join(p.resolve().parts[-depth:]) for p in paths]
    return labels if len(set(labels)) == len(labels) else [f"{i + 1}:{lab}" for i, lab in enumerate(labels)]
