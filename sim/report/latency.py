"""Latency distributions: TTFT, TPOT and per-task latency as CDFs, one curve per series."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from sim.report.page import Panel, missing
from sim.report.reduce import cdf_points
from sim.report.rundata import COMPLETED, TASK_COLUMN
from sim.report.series import Series
from sim.report.theme import layout, new_figure

# (column, chart title, x-axis title, SLO key in summary.json `slo` block, or None)
_LATENCIES = (
    ("ttft_s", "Time to first token (TTFT)", "TTFT", "ttft_s"),
    ("tpot_s", "Time per output token (TPOT)", "TPOT (per output token)", "tpot_s"),
)


def cdf_figure(
    title: str,
    x_title: str,
    curves: list[tuple[Series, np.ndarray]],
    slo_s: float | None = None,
    what: str = "requests",
) -> go.Figure:
    """CDF chart of one latency, y in percent; x on a log axis when the values span more than 30×
    (latencies often run from milliseconds to minutes), else linear."""
    fig = new_figure()
    spans = []
    for s, values in curves:
        x, p = cdf_points(values)
        if len(x):
            spans += [x[0], x[-1]]
        fig.add_trace(
            go.Scatter(
                x=x,
                y=100.0 * p,
                mode="lines",
                name=s.name,
                line=s.line(),
                legendgroup=s.name,
                hovertemplate="%{x:.3~s}s at p%{y:.2f}<extra>" + s.name + "</extra>",
            )
        )
    if slo_s is not None:
        fig.add_vline(
            x=slo_s,
            line=dict(color="#cf222e", dash="dash", width=1),
            annotation_text=f"SLO {slo_s:g} s",
            annotation_position="bottom right",
        )
    fig.update_layout(
        **layout(title, x_title, f"{what} at or below (%)", hovermode="closest"),
    )
    positive = [v for v in spans if v > 0]
    log = bool(positive) and max(positive) > 30 * min(positive)
    if log:
        values = log_ticks(min(positive), max(positive))
        fig.update_xaxes(
            type="log",
            tickvals=values,
            ticktext=[tick_label(v) for v in values],
            title_text=x_title + ", log scale",
        )
    else:
        fig.update_xaxes(tickformat="~s", ticksuffix="s")
    fig.update_yaxes(range=[0, 100.5], ticksuffix=" %")
    return fig


def log_ticks(lo: float, hi: float) -> list[float]:
    """1-2-5 ticks per decade covering [lo, hi]; only powers of ten when that would be crowded."""
    decades = range(int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi))) + 1)
    for steps in ((1, 2, 5), (1,)):
        ticks = [m * 10.0**d for d in decades for m in steps if lo <= m * 10.0**d <= hi]
        if len(ticks) <= 11:
            return ticks
    return ticks


def tick_label(seconds: float) -> str:
    """'5 ms', '200 ms', '20 s', '5,000 s': 1-2-5 ticks stay round numbers (no '3.33 min')."""
    return f"{seconds * 1e3:,.3g} ms" if seconds < 1 else f"{seconds:,.0f} s"


def _slo_s(series: list[Series], key: str) -> float | None:
    """The per-request SLO target drawn on the chart, when every run on the page states the same one."""
    targets = {(s.run.scenario.get("slo") or {}).get(key) for s in series}
    return targets.pop() if len(targets) == 1 and None not in targets else None


def task_latencies_s(df: pd.DataFrame) -> np.ndarray:
    """Per task (session): last finish minus first arrival, over tasks whose every request completed and
    whose first request was measured (arrived after the warm-up)."""
    g = df.groupby(TASK_COLUMN, sort=True)
    first = g["arrival_s"].min().to_numpy()
    last = g["finish_s"].max().to_numpy()
    done = g[COMPLETED].all().to_numpy()
    if "measured" in df:
        done = done & g["measured"].first().to_numpy()
    return (last - first)[done]


def latency_panels(series: list[Series]) -> list[Panel]:
    panels = []
    for col, title, x_title, slo_key in _LATENCIES:
        curves = [(s, s.run.measured_values(s.model, col)) for s in series if s.model in s.run.requests]
        if not curves:
            panels.append(missing(title, "per-request log (Parquet)"))
            continue
        panels.append(Panel(title, cdf_figure(title, x_title, curves, _slo_s(series, slo_key))))
    task_curves = [
        (s, task_latencies_s(s.run.requests[s.model]))
        for s in series
        if s.model in s.run.requests and TASK_COLUMN in s.run.requests[s.model]
    ]
    title = "Per-task latency (session: first arrival to last finish)"
    if task_curves:
        panels.append(Panel(title, cdf_figure(title, "task latency", task_curves, what="tasks")))
    else:
        panels.append(missing(title, "a session id per request"))
    return panels
