"""A self-contained plotly page of `trace_stats` output (plotly.js inline: works offline)."""

from __future__ import annotations

import html
import os

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sim.units import DAY_S, HOUR_S

from .io import atomic_output


def write_stats_html(stats: dict, out: str | os.PathLike) -> None:
    """Write the page atomically."""
    fig = make_subplots(
        rows=3,
        cols=2,
        subplot_titles=(
            "Arrivals over time",
            "Active sessions",
            "Input, new and output tokens per request (top level)",
            "Think time before a request",
            "Tokens per day",
            "Requests per session",
        ),
        vertical_spacing=0.1,
    )
    rates = stats["rates"]
    hours = [t / HOUR_S for t in rates["t_s"]]
    fig.add_trace(go.Scatter(x=hours, y=rates["requests_per_s"], name="requests/s"), row=1, col=1)
    fig.add_trace(
        go.Scatter(x=hours, y=[r * HOUR_S for r in rates["sessions_per_s"]], name="sessions/h"), row=1, col=1
    )
    fig.add_trace(go.Scatter(x=hours, y=rates["active_sessions"], name="active sessions"), row=1, col=2)
    for name, label in (
        ("input_tokens", "input"),
        ("new_tokens", "new (not a reusable prefix)"),
        ("output_tokens", "output"),
    ):
        cdf = stats["cdf"][name]
        fig.add_trace(go.Scatter(x=cdf["value"], y=cdf["q"], name=label), row=2, col=1)
    cdf = stats["cdf"]["think_time_s"]
    fig.add_trace(go.Scatter(x=cdf["value"], y=cdf["q"], name="think time"), row=2, col=2)
    days = stats["tokens_per_day"]
    fig.add_trace(go.Bar(x=days["day"], y=days["input_tokens"], name="input tokens/day"), row=3, col=1)
    fig.add_trace(go.Bar(x=days["day"], y=days["output_tokens"], name="output tokens/day"), row=3, col=1)
    per = stats["session"]["requests"]
    keys = [k for k in ("p10", "p50", "p90", "p99", "max") if k in per]
    fig.add_trace(go.Bar(x=keys, y=[per[k] for k in keys], name="requests per session"), row=3, col=2)
    fig.update_xaxes(title_text="hours from trace start", row=1, col=1)
    fig.update_xaxes(title_text="hours from trace start", row=1, col=2)
    fig.update_xaxes(title_text="tokens", type="log", row=2, col=1)
    fig.update_xaxes(title_text="seconds", type="log", row=2, col=2)
    fig.update_yaxes(title_text="fraction of requests", row=2, col=1)
    fig.update_yaxes(title_text="fraction of requests", row=2, col=2)
    fig.update_xaxes(title_text="day", row=3, col=1)
    fig.update_layout(height=1200, title_text=f"Trace statistics: {html.escape(str(stats.get('file', '')))}")
    body = fig.to_html(full_html=False, include_plotlyjs=True, div_id="trace-stats")
    with atomic_output(out) as tmp:
        tmp.write_text(_page(stats, body))


def _page(stats: dict, body: str) -> str:
    top = stats["percentiles"]["top_level"]
    reuse = stats["prefix_reuse"]
    rows = [
        ("sessions", f"{stats['sessions']:,}"),
        ("requests (top level / in sub-agents)", f"{stats['requests']:,} ({stats['top_level_requests']:,} / {stats['subagent_requests']:,})"),
        ("span", f"{stats['span_s'] / DAY_S:.2f} days"),
        ("mean concurrent sessions", _num(stats["rates"]["mean_concurrent_sessions"])),
        ("input tokens p10 / p50 / p90 / p99", _pcts(top["input_tokens"])),
        ("new input tokens p10 / p50 / p90 / p99", _pcts(top["new_tokens"])),
        ("output tokens p10 / p50 / p90 / p99", _pcts(top["output_tokens"])),
        ("think time s p10 / p50 / p90 / p99", _pcts(top["think_time_s"])),
        ("prefix reuse within / across sessions (tokens)",
         f"{reuse['tokens']['within_session']:.1%} / {reuse['tokens']['cross_session']:.1%}"),
    ]  # fmt: skip
    if reuse["blocks"]:
        b = reuse["blocks"]
        rows.append(("blocks seen before: any / within / across sessions",
                     f"{b['reused']:.1%} / {b['within_session']:.1%} / {b['cross_session']:.1%}"))  # fmt: skip
    table = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>trace statistics</title>"
        "<style>body{font-family:sans-serif;margin:2em}th{text-align:left;padding-right:2em}</style>"
        f"</head><body><h1>Trace statistics</h1><p>{html.escape(str(stats.get('file', '')))}</p>"
        f"<table>{table}</table>{body}</body></html>"
    )


def _num(value) -> str:
    return "n/a" if value is None else f"{value:,.1f}"


def _pcts(summary: dict) -> str:
    if not summary.get("count"):
        return "n/a"
    return " / ".join(
        f"{summary[k]:,.0f}" if summary[k] >= 10 else f"{summary[k]:.2f}"
        for k in ("p10", "p50", "p90", "p99")
    )
