"""The Pareto frontier (steady-state cost per task, sim.plan.steady, vs TTFT p99) of every simulated
candidate, as one offline page.

A candidate is on its model's frontier when no other candidate of the same model is at most as
expensive and at most as slow, and strictly better in one of the two. The page carries plotly.js
inline (no network needed) and a fixed div id, so the same plan writes the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.colors import qualitative

from sim.plan.steady import METHOD

X = "steady_cost_per_task_usd"
Y = "ttft_p99_s"


def pareto(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The non-dominated rows (minimise X and Y), in increasing X; rows lacking X or Y are skipped."""
    points = sorted(
        (r for r in rows if r.get(X) is not None and r.get(Y) is not None),
        key=lambda r: (r[X], r[Y], r["key"]),
    )
    front: list[dict[str, Any]] = []
    for row in points:
        if not front or row[Y] < front[-1][Y]:
            front.append(row)
    return front


def _hover(row: dict[str, Any]) -> str:
    verdict = "meets constraints" if row["feasible"] else f"fails: {row['violations']}"
    return (
        f"{row['model']}<br>{row['combo_label']} k={row['scale']}<br>nodes {row['nodes_json']}"
        f" ({row['total_gpus']} GPUs)<br>${row['cluster_usd_per_hour']:.2f}/h, ${row[X]:.4f}/task"
        f" (steady load {row['steady_load']:.2f}, {row['steady_bottleneck']})"
        f"<br>TTFT p99 {row[Y]:.3f} s, TPOT p99 {row['tpot_p99_s']:.4f} s<br>{verdict}"
    )


def frontier_figure(
    rows: Sequence[dict[str, Any]],
    models: Sequence[str],
    recommended: dict[str, str],
    ttft_limit_s: float | None,
    on_frontier_basis: set[str],
) -> go.Figure:
    """All candidates as points (hollow = fails a constraint), each model's frontier as a line,
    the recommendation as a star, the TTFT bound as a dashed line. The frontier is drawn over the
    candidates (keys) in `on_frontier_basis`: those meeting every constraint but the TTFT bound,
    so the line answers "what does a given TTFT p99 cost" with the other constraints held."""
    fig = go.Figure()
    palette = qualitative.Plotly
    for index, model in enumerate(models):
        color = palette[index % len(palette)]
        mine = [r for r in rows if r["model"] == model and r.get(X) is not None and r.get(Y) is not None]
        fig.add_trace(
            go.Scatter(
                x=[r[X] for r in mine],
                y=[r[Y] for r in mine],
                mode="markers",
                name=f"{model}: candidates",
                marker={
                    "color": color,
                    "size": 8,
                    "symbol": ["circle" if r["feasible"] else "circle-open" for r in mine],
                },
                hovertext=[_hover(r) for r in mine],
                hoverinfo="text",
            )
        )
        front = pareto([r for r in mine if r["key"] in on_frontier_basis])
        fig.add_trace(
            go.Scatter(
                x=[r[X] for r in front],
                y=[r[Y] for r in front],
                mode="lines",
                line={"color": color, "shape": "hv"},
                name=f"{model}: Pareto frontier",
                hoverinfo="skip",
            )
        )
        best = [r for r in mine if r["key"] == recommended.get(model)]
        if best:
            fig.add_trace(
                go.Scatter(
                    x=[best[0][X]],
                    y=[best[0][Y]],
                    mode="markers",
                    name=f"{model}: recommended",
                    marker={
                        "color": color,
                        "size": 18,
                        "symbol": "star",
                        "line": {"width": 1, "color": "black"},
                    },
                    hovertext=[_hover(best[0])],
                    hoverinfo="text",
                )
            )
    if ttft_limit_s is not None:
        fig.add_hline(y=ttft_limit_s, line_dash="dash", annotation_text=f"TTFT p99 bound {ttft_limit_s:g} s")
    fig.update_layout(
        title="Capacity plan: cost per task vs TTFT p99<br><sup>hollow = fails a constraint; lines = Pareto "
        "frontier of the candidates meeting every constraint but the TTFT bound</sup>",
        xaxis_title=f"cost per task (USD; {METHOD})",
        yaxis_title="TTFT p99 (s)",
        yaxis_type="log",
        template="plotly_white",
    )
    return fig


def frontier_html(figure: go.Figure) -> str:
    """Self-contained page: plotly.js inline, fixed div id (plotly draws a random one otherwise)."""
    return figure.to_html(include_plotlyjs=True, full_html=True, div_id="plan-frontier")
