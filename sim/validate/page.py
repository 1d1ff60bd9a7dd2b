"""The `sim validate` page: published against simulated per case, the error, and each case's frontier
with the published point on it; offline and deterministic (sim.report.page)."""

from __future__ import annotations

import html

import plotly.graph_objects as go

from sim.report.page import Panel, Section, render_page
from sim.report.theme import layout, new_figure
from sim.validate.summary import SPEED_METRICS

PUBLISHED, SIMULATED = "#4c72b0", "#dd8452"


def _errors(results) -> go.Figure:
    """Each case's error per metric: one bar group per case, one bar per metric compared."""
    fig = new_figure()
    metrics = sorted({m for r in results for m in r.published})
    for metric in metrics:
        rows = [r for r in results if metric in r.published]
        errors = [r.error_frac[metric] for r in rows]
        fig.add_trace(go.Bar(
            x=[r.name for r in rows], y=[100 * e if e is not None else None for e in errors], name=metric,
            text=[f"{e:+.0%}" if e is not None else "n/a" for e in errors], textposition="outside",
        ))  # fmt: skip
    fig.update_layout(
        **layout("Error per case and metric", "case", "simulated vs published (%)", barmode="group")
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
    gpu, user = r.published.get("output_tokens_per_s_per_gpu"), r.published.get("tokens_per_s_per_user")
    user = user or (1000.0 / r.at["tpot_p50_ms"] if "tpot_p50_ms" in r.at else None)
    if gpu is not None and user is not None:
        fig.add_trace(go.Scatter(x=[user], y=[gpu], mode="markers", name="published",
                                 marker=dict(color=PUBLISHED, size=14, symbol="diamond")))  # fmt: skip
    fig.update_layout(
        **layout(f"{r.name}: frontier", "tokens/s per user (1 / TPOT p50)", "output tokens/s per GPU")
    )
    return fig


def _table(results) -> str:
    head = "<tr><th>case</th><th>metric at</th><th>published</th><th>simulated</th><th>error</th><th>source</th></tr>"
    rows = []
    for r in results:
        for metric, published in r.published.items():
            value, error = r.simulated[metric], r.error_frac[metric]
            sim = f"{value:,.4g}" if value is not None else html.escape(r.note or "n/a")
            err = f"{error:+.1%}" if error is not None else "n/a"
            rows.append(
                f"<tr><td>{html.escape(r.name)}</td><td>{html.escape(metric)} at {html.escape(r.at_label)}</td>"
                f'<td class="num">{published:,.4g}</td><td class="num">{sim}</td><td class="num">{err}</td>'
                f"<td>{html.escape(r.source)}</td></tr>"
            )
    return f'<table class="data">{head}{"".join(rows)}</table>'


def _setup(r) -> str:
    items = "".join(f"<li>{html.escape(s)}</li>" for s in r.setup) or "<li>(none given)</li>"
    return f"<ul>{items}</ul>"


def _groups(groups, within: float) -> str:
    """The speed errors by deployment (sim.validate.summary): median signed (sim fast: +) and median |error|."""
    head = (f"<tr><th>GPU, engine</th><th>cases</th><th>within +-{within:.0%}</th>"
            "<th>tok/s/GPU: median (median |error|)</th><th>tok/s/user: median (median |error|)</th></tr>")  # fmt: skip
    rows = []
    for g in groups:
        cells = "".join(
            f'<td class="num">{g.median_error_frac[m]:+.1%} ({g.median_abs_error_frac[m]:.1%})</td>'
            if g.median_error_frac[m] is not None else '<td class="num">n/a</td>'
            for m in SPEED_METRICS
        )  # fmt: skip
        rows.append(f'<tr><td>{html.escape(g.group)}</td><td class="num">{g.cases}</td>'
                    f'<td class="num">{g.within}</td>{cells}</tr>')  # fmt: skip
    return f'<table class="data">{head}{"".join(rows)}</table>'


def _consistency(results, within: float) -> str:
    """Each case's published and simulated tok/s/GPU over what its own medians imply (sim.validate.consistency)."""
    head = (
        "<tr><th>case</th><th>published / own medians</th><th>sim's run / own medians</th><th>apart</th></tr>"
    )
    rows = []
    for r in results:
        c = r.consistency
        if c is None:
            continue
        flag = " (beyond the tolerance)" if abs(c.gap_frac) > within else ""
        rows.append(f'<tr><td>{html.escape(r.name)}</td><td class="num">{c.published_ratio:.2f}</td>'
                    f'<td class="num">{c.simulated_ratio:.2f}</td><td class="num">{c.gap_frac:+.0%}{flag}</td></tr>')  # fmt: skip
    return f'<table class="data">{head}{"".join(rows)}</table>'


def validate_page(results, groups, within: float) -> str:
    """The page of `results`, with `groups` (sim.validate.summary.group_errors at tolerance `within`) first."""
    sections = [
        Section("By deployment", [Panel("", html=_groups(groups, within), wide=True)],
                intro="The speed errors of the cases by the GPUs and engines they run: where sim runs fast (+) "
                      "or slow (-)."),
        Section("Cases", [Panel("", html=_table(results), wide=True), Panel("Error per case and metric", _errors(results))],
                intro="A measurement of the simulator's error, not a test: nothing is tuned to these numbers."),
        Section("Published points against their own medians", [Panel("", html=_consistency(results, within), wide=True)],
                intro="Output tok/s/GPU over N x mean output tokens / (TTFT p50 + (mean output - 1) x TPOT p50), "
                      "published and in sim's run of the case: where the two ratios part, the published throughput "
                      "holds time neither published median shows (a stall, a tail), which no steady run matches."),
    ]  # fmt: skip
    for r in results:
        sections.append(
            Section(r.name, [Panel(f"{r.name}", _case_frontier(r)), Panel("Setup", html=_setup(r))])
        )
    return render_page("sim validate", "published serving results against the simulator", sections)
