"""Throughput and queue length over simulated time."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from sim.report.page import Panel, missing
from sim.report.reduce import spread_amounts
from sim.report.rundata import COMPLETED
from sim.report.series import Series
from sim.report.theme import bucket_label, new_figure
from sim.report.timeaxis import (
    Cell,
    TimeAxis,
    bucket_caption,
    level_grid_figure,
    mark_outages,
    mark_warmup,
    outages,
    pool_sum,
    time_layout,
)

QUEUE_COLUMN = "queue_len"


def throughput_panel(series: list[Series], axis: TimeAxis) -> Panel:
    title = "Output throughput over simulated time"
    fig = new_figure()
    for s in series:
        df = s.run.requests.get(s.model)
        if df is None:
            continue
        done = df[df[COMPLETED]]
        tokens = spread_amounts(
            done["first_token_s"].to_numpy(),
            done["finish_s"].to_numpy(),
            done["output_tokens"].to_numpy(),
            axis.edges_s,
        )
        covered = axis.covered_s()
        rate = np.divide(tokens, covered, out=np.full(covered.size, np.nan), where=covered > 0)
        fig.add_trace(
            go.Scatter(
                x=axis.x(axis.centers_s()),
                y=rate,
                mode="lines",
                name=s.name,
                line=s.line(),
                legendgroup=s.name,
                hovertemplate="%{y:.4s} tokens/s",
            )
        )
    if not fig.data:
        return missing(title, "per-request log (Parquet)", wide=True)
    fig.update_layout(**time_layout(title, axis, "output tokens/s"))
    fig.update_xaxes(rangeslider=dict(visible=True, thickness=0.07))
    mark_warmup(fig, series, axis)
    mark_outages(fig, series, axis)
    caption = (
        f"{bucket_label(axis.bucket_s)} averages; each request's output tokens are spread evenly between its "
        "first token and its finish. Drag to zoom; every time chart follows."
        + (
            " Red bands: instances or nodes down (extensions' failures, ✕ at each start)."
            if outages(series)
            else ""
        )
    )
    return Panel(title, fig, caption=caption, wide=True)


def queue_panel(series: list[Series], axis: TimeAxis) -> Panel:
    title = "Queue length over simulated time"
    cells = [Cell("requests waiting", pool_sum(QUEUE_COLUMN))]
    fig = level_grid_figure(title, axis, series, cells, "")
    if fig is None:
        return missing(title, "pool time series with a queue length", wide=True)
    caption = bucket_caption(
        axis, "Requests waiting, loading or joining a batch, summed over the model's pools"
    )
    return Panel(title, fig, caption=caption, wide=True)
