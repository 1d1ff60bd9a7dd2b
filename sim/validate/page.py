"""The `sim validate` page: published against simulated per case, the error, and each case's frontier
with the published point on it; offline and deterministic (sim.report.page)."""

from __future__ import annotations

import html

import plotly.graph_objects as go

from sim.report.page import Panel, Section, render_page
from sim.report.theme import layout, new_figure

PUBLISHED, SIMULATED = "#4c72b0", "#dd8452"


def _bars(results) -> go.Figure:
    fig = new_figure()
    names = [r.name for r in results]
    fig.add_trace(go.Bar(x=names, y=[r.published for r in results], name="published", marker_color=PUBLISHED))
    fig.add_trace(go.Bar(
        x=names, y=[r.simulated for r in results], name="simulated", marker_color=SIMULATED,
        text=[f"{r.error_frac:+.0%}" if r.error_frac is not None else "n/a" for r in results], textposition="outside",
    ))  # fmt: skip
    fig.update_layout(
        **layout("Published vs simulated", "case", "value of the case's metric", barmode="group")
    )
    return fig


def _case_frontier(r) -> go.Figure:
    fig = new_figure()
    pts = [p for p in r.points if p.get("tokens_per_s_per_user") and p.get("output_tokens_per_s_per_gpu")]
    fig.add_trace(go.Scatter(
        x=[p["tokens_per_s_per_user"] for p in pts], y=[p["output_tokens_per_s_per_gpu"] for p in pts],
        mode="lines+markers+text", text=[str(p["concurrency"]) for p in pts], textposition="top center",
        name="simulated", line=dict(color=SIMULATED),
    ))  # fmt: skip
    if r.metric == "output_tokens_per_s_per_gpu":
        fig.add_trace(go.Scatter(x=[1000.0 / r.tpot_p50_ms], y=[r.published], mode="markers", name="published",
                                 marker=dict(color=PUBLISHED, size=14, symbol="diamond")))  # fmt: skip
    fig.add_vline(x=1000.0 / r.tpot_p50_ms, line_dash="dot")
    fig.update_layout(
        **layout(f"{r.name}: frontier", "tokens/s per user (1 / TPOT p50)", "output tokens/s per GPU")
    )
    return fig


def _table(results) -> str:
    head = "<tr><th>case</th><th>metric at TPOT p50</th><th>published</th><th>simulated</th><th>error</th><th>source</th></tr>"
    rows = []
    for r in results:
        sim = f"{r.simulated:,.2f}" if r.simulated is not None else html.escape(r.note or "n/a")
        err = f"{r.error_frac:+.1%}" if r.error_frac is not None else "n/a"
        rows.append(
            f"<tr><td>{html.escape(r.name)}</td><td>{html.escape(r.metric)} at {r.tpot_p50_ms:g} ms</td>"
            f'<td class="num">{r.published:,.2f}</td><td class="num">{sim}</td><td class="num">{err}</td>'
            f"<td>{html.escape(r.source)}</td></tr>"
        )
    return f'<table class="data">{head}{"".join(rows)}</table>'


def _setup(r) -> str:
    items = "".join(f"<li>{html.escape(s)}</li>" for s in r.setup) or "<li>(none given)</li>"
    return f"<ul>{items}</ul>"


def validate_page(results) -> str:
    sections = [
        Section("Cases", [Panel("", html=_table(results), wide=True), Panel("Published vs simulated", _bars(results))],
                intro="A measurement of the simulator's error, not a test: nothing is tuned to these numbers."),
    ]  # fmt: skip
    for r in results:
        sections.append(
            Section(r.name, [Panel(f"{r.name}", _case_frontier(r)), Panel("Setup", html=_setup(r))])
        )
    return render_page("sim validate", "published serving results against the simulator", sections)
