"""The `sim sweep` page: the throughput-latency frontier per model, TTFT and TPOT against load, and
each pool's load against concurrency; offline and deterministic (sim.report.page)."""

from __future__ import annotations

import html

import plotly.graph_objects as go

from sim.report.page import Panel, Section, render_page
from sim.report.theme import layout, model_colors, new_figure

DASHES = {"p50": "solid", "p90": "dash"}


def _frontier(result, colors: dict[str, str]) -> go.Figure:
    fig = new_figure()
    for model, data in result.models.items():
        pts = [
            p
            for p in data["points"]
            if p.get("tokens_per_s_per_user") and p.get("output_tokens_per_s_per_gpu")
        ]
        fig.add_trace(go.Scatter(
            x=[p["tokens_per_s_per_user"] for p in pts], y=[p["output_tokens_per_s_per_gpu"] for p in pts],
            mode="lines+markers+text", name=model, line=dict(color=colors[model]),
            text=[str(p["concurrency"]) for p in pts], textposition="top center",
            hovertemplate="concurrency %{text}<br>%{x:.1f} tok/s/user<br>%{y:.1f} tok/s/GPU<extra>" + model + "</extra>",
        ))  # fmt: skip
        point = data.get("at_tpot")
        if point and point.get("output_tokens_per_s_per_gpu") is not None:
            fig.add_trace(go.Scatter(
                x=[point["tokens_per_s_per_user"]], y=[point["output_tokens_per_s_per_gpu"]], mode="markers",
                name=f"{model} at TPOT {result.tpot_percentile} {result.target_tpot_s * 1e3:g} ms",
                marker=dict(color=colors[model], size=16, symbol="star", line=dict(width=1, color="black")),
            ))  # fmt: skip
    if result.tpot_percentile == "p50":  # the x axis is 1 / TPOT p50: a p50 target is a vertical line
        fig.add_vline(x=1.0 / result.target_tpot_s, line_dash="dot")
    fig.update_layout(**layout("Output tokens/s per GPU vs tokens/s per user", "tokens/s per user (1 / TPOT p50)",
                               "output tokens/s per GPU"))  # fmt: skip
    return fig


def _vs_load(
    result, colors: dict[str, str], metric: str, title: str, y_title: str, target: float | None
) -> go.Figure:
    fig = new_figure()
    for model, data in result.models.items():
        for q, dash in DASHES.items():
            key = f"{metric}_{q}_s"
            pts = [p for p in data["points"] if p.get(key) is not None]
            fig.add_trace(go.Scatter(
                x=[p["concurrency"] for p in pts], y=[p[key] * 1e3 for p in pts], mode="lines+markers",
                name=f"{model} {q}", line=dict(color=colors[model], dash=dash),
            ))  # fmt: skip
    if target is not None:
        fig.add_hline(y=target * 1e3, line_dash="dot", annotation_text=f"{target * 1e3:g} ms")
    fig.update_layout(**layout(title, "concurrency (requests in flight)", y_title, xaxis_type="log"))
    return fig


def _loads(result, colors: dict[str, str]) -> go.Figure:
    fig = new_figure()
    dashes = ("solid", "dash", "dot", "dashdot")
    for model, data in result.models.items():
        names = sorted({pool["name"] for p in data["points"] for pool in p["pools"]})
        for i, name in enumerate(names):
            xs, ys = [], []
            for p in data["points"]:
                for pool in p["pools"]:
                    if pool["name"] == name and pool.get("load") is not None:
                        xs.append(p["concurrency"])
                        ys.append(pool["load"] * 100)
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=f"{model} {name}",
                                     line=dict(color=colors[model], dash=dashes[i % len(dashes)])))  # fmt: skip
    fig.update_layout(**layout("Load per pool vs concurrency", "concurrency (requests in flight)",
                               "load (% of the pool at the SLO)", xaxis_type="log"))  # fmt: skip
    return fig


def _table(result) -> str:
    rows = []
    for model, data in result.models.items():
        point = data.get("at_tpot")
        value = (
            f"{point['output_tokens_per_s_per_gpu']:.1f} tok/s/GPU at concurrency {point['concurrency']:.1f}"
            if point and point.get("output_tokens_per_s_per_gpu") is not None
            else html.escape(data.get("note") or "n/a")
        )
        rows.append(f"<tr><td>{html.escape(model)}</td><td>{value}</td></tr>")
    return (
        f'<table class="data"><tr><th>model</th><th>at TPOT {result.tpot_percentile} = '
        f"{result.target_tpot_s * 1e3:g} ms</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def sweep_page(result) -> str:
    colors = model_colors(result.models)
    caption = (
        "Each point: the scenario's benchmark client holding that many requests in flight (labels); "
        f"star: linear interpolation at the TPOT {result.tpot_percentile} target between the two concurrencies "
        "that bracket it."
    )
    sections = [
        Section("Frontier", [
            Panel("At the target", html=_table(result)),
            Panel("Frontier", _frontier(result, colors), caption=caption, wide=True),
        ]),
        Section("Latency and load", [
            Panel("TTFT", _vs_load(result, colors, "ttft", "TTFT vs concurrency", "TTFT (ms)", None)),
            Panel("TPOT", _vs_load(result, colors, "tpot", "TPOT vs concurrency", "TPOT (ms)", result.target_tpot_s)),
            Panel("Load", _loads(result, colors),
                  caption="Load: prefill busy share, or decode batch / the batch the TPOT SLO allows "
                          "(sim.metrics.capacity)."),
        ]),
    ]  # fmt: skip
    return render_page(f"sim sweep: {result.scenario}", "throughput-latency frontier", sections)
