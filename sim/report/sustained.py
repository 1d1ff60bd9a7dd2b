"""The first section of the page: the capacity verdict (sim.capacity.verdict) and the search behind it,
TTFT p99, TPOT p99 and SLO attainment against the load of every point each model's search ran, with
the SLO limits drawn and the sustained point marked (summary.json `models.<m>.capacity.search`)."""

from __future__ import annotations

import html

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sim.capacity.verdict import verdict_line
from sim.report.page import Panel
from sim.report.series import Series
from sim.report.theme import layout, new_figure

PLOTS = (  # (points key, axis title, scale to the axis unit, the SLO limit's scenario keys)
    ("ttft_p99_s", "TTFT p99 (s)", 1.0, ("ttft_p99_s", "ttft_s")),
    ("tpot_p99_s", "TPOT p99 (ms)", 1e3, ("tpot_p99_s", "tpot_s")),
    ("slo_attainment", "SLO attainment (share of requests)", 1.0, None),
)


def _searched(series: list[Series]) -> list[Series]:
    return [s for s in series if ((s.summary.get("capacity") or {}).get("search") or {}).get("points")]


def sustained_panels(series: list[Series]) -> list[Panel]:
    """The verdict of each run on the page, then the search chart; nothing when no model searched."""
    have = _searched(series)
    if not have:
        return []
    panels = []
    runs = sorted({s.run_index for s in have})
    for index in runs:
        of_run = [s for s in have if s.run_index == index]
        line = verdict_line({"models": {s.model: s.summary for s in of_run}})
        if line:
            where = f" ({html.escape(of_run[0].run.label)})" if len(runs) > 1 else ""
            panels.append(Panel("", html=f'<div class="verdict"><p><b>{html.escape(line)}</b>{where}</p></div>',
                                wide=True))  # fmt: skip
    panels.append(search_panel(have))
    return panels


def search_panel(have: list[Series]) -> Panel:
    title = "Capacity search: latency and SLO attainment against the load"
    kinds = {s.summary["capacity"]["search"]["load"] for s in have}
    x_title = "sessions per hour" if kinds == {"sessions_per_hour"} else "load (sessions/h or concurrency)"
    fig = make_subplots(figure=new_figure(), rows=1, cols=len(PLOTS), horizontal_spacing=0.07,
                        subplot_titles=[label for _, label, _, _ in PLOTS])  # fmt: skip
    slo = have[0].run.scenario.get("slo") or {}
    for s in have:
        cap = s.summary["capacity"]
        points = cap["search"]["points"]
        sustained = next(
            (p for p in points if p["load"] == cap.get("sessions_per_hour") or cap.get("concurrency")), None
        )
        for col, (key, _, scale, _) in enumerate(PLOTS, start=1):
            xs = [p["load"] for p in points]
            ys = [None if p.get(key) is None else p[key] * scale for p in points]
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=s.name, legendgroup=s.name,
                                     showlegend=col == 1, line=s.line(),
                                     marker=dict(symbol=["circle" if p["slo_holds"] else "x" for p in points], size=8),
                                     hovertemplate="%{x}: %{y:.3g}<extra>" + html.escape(s.name) + "</extra>"),
                          row=1, col=col)  # fmt: skip
            if sustained is not None and sustained.get(key) is not None:
                fig.add_trace(go.Scatter(x=[sustained["load"]], y=[sustained[key] * scale], mode="markers",
                                         name=f"{s.name} sustained", legendgroup=s.name, showlegend=col == 1,
                                         marker=dict(symbol="star", size=16, color=s.color,
                                                     line=dict(width=1, color="black")),
                                         hovertemplate="sustained %{x}: %{y:.3g}<extra>" + html.escape(s.name)
                                         + "</extra>"),
                              row=1, col=col)  # fmt: skip
    for col, (_, _, scale, keys) in enumerate(PLOTS, start=1):
        limit = next((slo[k] for k in keys or () if slo.get(k) is not None), None)
        if limit is not None:
            fig.add_hline(y=limit * scale, line_dash="dot", line_color="grey", row=1, col=col,
                          annotation_text="SLO", annotation_position="top left")  # fmt: skip
        fig.update_xaxes(title_text=x_title, row=1, col=col)
    fig.update_layout(**layout(title, "", ""))
    caption = (
        "Each point is a simulation of the search window at that load (circle: the SLO held; x: it failed); "
        "the star is the highest load that held, whose figures the verdict quotes (sim.capacity)."
    )
    return Panel(title, fig, caption=caption, wide=True)
