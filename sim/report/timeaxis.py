"""The page's time axis and the machinery every chart over simulated time shares: the bucket grid, a
level drawn as a mean line over a min-max band, grids of subplots on one axis, the warm-up shading.
Every time chart carries `meta.time_sync`, so zooming one zooms all (page.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sim.report.reduce import TIME_BUCKETS, Buckets, bucket_levels, summed_levels, time_grid
from sim.report.rundata import RunData
from sim.report.series import Series
from sim.report.theme import (
    CHART_HEIGHT_PX,
    bucket_label,
    fmt_duration,
    fmt_si,
    layout,
    new_figure,
    time_unit,
)


@dataclass(frozen=True)
class TimeAxis:
    """The page's time grid: bucket edges in simulated seconds, shown in `unit` (s, min, h or days)."""

    edges_s: np.ndarray
    unit_s: float
    unit: str
    start_s: float  # first and last instant of the runs: the axis shows exactly this span
    end_s: float
    sample_s: float | None = None  # spacing of the runs' time-series samples

    @property
    def bucket_s(self) -> float:
        return float(self.edges_s[1] - self.edges_s[0])

    @property
    def title(self) -> str:
        return f"simulated time ({self.unit})"

    def x(self, t_s: np.ndarray) -> np.ndarray:
        return np.asarray(t_s) / self.unit_s

    def centers_s(self) -> np.ndarray:
        return 0.5 * (self.edges_s[:-1] + self.edges_s[1:])

    def covered_s(self) -> np.ndarray:
        """Seconds of each bucket inside the runs' span (the last bucket is usually cut short)."""
        return np.clip(self.edges_s[1:], self.start_s, self.end_s) - np.clip(
            self.edges_s[:-1], self.start_s, self.end_s
        )


def time_axis(runs: list[RunData]) -> TimeAxis:
    spans = [r.time_span_s() for r in runs]
    lo = min(s[0] for s in spans)
    hi = max(s[1] for s in spans)
    unit_s, unit = time_unit(hi - lo)
    samples = [x for r in runs if (x := r.sample_interval_s()) is not None]
    return TimeAxis(time_grid(lo, hi, TIME_BUCKETS), unit_s, unit, lo, hi, min(samples, default=None))


def time_layout(title: str, axis: TimeAxis, y_title: str, **extra) -> dict:
    lay = layout(title, axis.title, y_title, hovermode="x unified", meta=dict(time_sync=True), **extra)
    lay["xaxis"]["range"] = [axis.start_s / axis.unit_s, axis.end_s / axis.unit_s]
    return lay


def level_traces(
    s: Series,
    b: Buckets,
    axis: TimeAxis,
    hover_fmt: str,
    *,
    show_legend: bool = True,
) -> list[go.Scatter]:
    """Bucket mean as a line over a light band from bucket min to bucket max (peaks survive downsampling)."""
    x = axis.x(b.centers_s)
    common = dict(x=x, legendgroup=s.name, mode="lines")
    return [
        go.Scatter(y=b.lo, line=dict(width=0), hoverinfo="skip", showlegend=False, **common),
        go.Scatter(
            y=b.hi,
            line=dict(width=0),
            fill="tonexty",
            fillcolor=_translucent(s.color),
            hoverinfo="skip",
            showlegend=False,
            **common,
        ),
        go.Scatter(
            y=b.mean,
            name=s.name,
            line=s.line(),
            showlegend=show_legend,
            customdata=np.column_stack([b.lo, b.hi]),
            hovertemplate=f"mean %{{y:{hover_fmt}}} (min %{{customdata[0]:{hover_fmt}}}, max %{{customdata[1]:{hover_fmt}}})",
            **common,
        ),
    ]


def _translucent(hex_color: str, alpha: float = 0.18) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


Level = Callable[[Series, TimeAxis], Buckets | None]


def pool_sum(column: str) -> Level:
    """A pool column summed over the model's pools (each pool bucketed first, then added)."""

    def level(s: Series, axis: TimeAxis) -> Buckets | None:
        pools = s.run.pools_of(s.model)
        if column not in pools:
            return None
        parts = [(g["t_s"].to_numpy(), g[column].to_numpy()) for _, g in pools.groupby("pool", sort=True)]
        b = summed_levels(parts, axis.edges_s)
        return b if b is not None and len(b.mean) else None

    return level


def cluster_value(column: str) -> Level:
    """A column of the model's cluster-wide samples."""

    def level(s: Series, axis: TimeAxis) -> Buckets | None:
        frame = s.run.cluster_of(s.model)
        if column not in frame or frame.empty:
            return None
        return bucket_levels(frame["t_s"].to_numpy(), frame[column].to_numpy(), axis.edges_s)

    return level


@dataclass(frozen=True)
class Cell:
    """One subplot: its y-axis title, the level drawn per series, and optionally a capacity line."""

    y_title: str
    level: Level
    capacity: Level | None = None


def level_grid_figure(
    title: str, axis: TimeAxis, series: list[Series], cells: list[Cell], unit: str, *, cols: int = 1
) -> go.Figure | None:
    """Subplots on one shared time axis (row-major, `cols` per row), one band + mean line per series.

    `unit` is the y unit ("B", "B/s") and gets SI prefixes (decimal, 1 G = 1e9); "" for counts. A
    capacity far above what was used would flatten the data, so then the axis fits the data and the
    subplot says where the capacity is. None when no cell has data, so the caller can say what is missing.
    """
    rows = -(-len(cells) // cols)
    fig = make_subplots(
        figure=new_figure(), rows=rows, cols=cols, vertical_spacing=0.2 / rows, horizontal_spacing=0.08
    )
    fig.update_layout(**time_layout(title, axis, "", height=max(CHART_HEIGHT_PX, 90 + 210 * rows)))
    fmt = ".3~s" + unit if unit else ",.4~r"
    legend_done: set[str] = set()
    for i, cell in enumerate(cells):
        row, col = i // cols + 1, i % cols + 1
        used_max, caps, drawn = 0.0, [], False
        for s in series:
            b = cell.level(s, axis)
            if b is None:
                continue
            for trace in level_traces(s, b, axis, fmt, show_legend=s.name not in legend_done):
                fig.add_trace(trace, row=row, col=col)
            legend_done.add(s.name)
            used_max, drawn = max(used_max, float(b.hi.max())), True
            cap = cell.capacity(s, axis) if cell.capacity else None
            if cap is not None:
                fig.add_trace(capacity_trace(s, cap, axis, unit), row=row, col=col)
                caps.append(float(cap.hi.max()))
        y = dict(title_text=cell.y_title, rangemode="tozero", row=row, col=col)
        if unit:
            y.update(tickformat=".2~s", ticksuffix=unit)
        if drawn and used_max == 0:  # nothing moved: say so rather than draw milli-byte ticks
            y.update(range=[0, 1], tickvals=[0], autorange=False)
            fig.add_annotation(
                text="zero throughout",
                xref="x domain",
                yref="y domain",
                x=0.5,
                y=0.5,
                showarrow=False,
                font=dict(size=11, color="#59636e"),
                row=row,
                col=col,
            )
        elif caps and max(caps) > 3 * used_max:
            y.update(range=[0, 1.1 * used_max], autorange=False)
            note = f"capacity (dotted) off scale: up to {fmt_si(max(caps), unit)}"
            fig.add_annotation(
                text=note,
                xref="x domain",
                yref="y domain",
                x=1,
                y=1,
                xanchor="right",
                yanchor="top",
                showarrow=False,
                font=dict(size=10, color="#59636e"),
                row=row,
                col=col,
            )
        fig.update_yaxes(**y)
        fig.update_xaxes(title_text=axis.title if row == rows else None, row=row, col=col)
    if not fig.data:
        return None
    fig.update_xaxes(matches="x")  # one time axis for every subplot, zoomed together
    fig.layout.xaxis.matches = None  # (the first axis is the one the others match)
    mark_warmup(fig, series, axis, grid=True)
    mark_outages(fig, series, axis, grid=True)
    return fig


def capacity_trace(s: Series, cap: Buckets, axis: TimeAxis, unit: str) -> go.Scatter:
    return go.Scatter(
        x=axis.x(cap.centers_s),
        y=cap.mean,
        mode="lines",
        name=f"{s.name} capacity",
        legendgroup=s.name,
        showlegend=False,
        line=dict(color=s.color, width=1, dash="dot"),
        hovertemplate=f"capacity %{{y:.3~s}}{unit}",
    )


def warmup_s(series: list[Series]) -> float:
    """The longest warm-up of the runs on the page (requests arriving before it are not measured)."""
    return max((s.value("warmup_s") or 0.0 for s in series), default=0.0)


def mark_warmup(fig: go.Figure, series: list[Series], axis: TimeAxis, *, grid: bool = False) -> None:
    """Shade the warm-up (in every subplot of a `grid` from make_subplots) and label it once."""
    w = warmup_s(series)
    if w <= 0:
        return
    where = dict(row="all", col="all") if grid else {}
    fig.add_vrect(
        x0=axis.x(axis.start_s),
        x1=axis.x(w),
        fillcolor="#8c959f",
        opacity=0.15,
        line_width=0,
        layer="below",
        **where,
    )
    fig.add_annotation(
        x=axis.x(w),
        xref="x",
        y=1.0,
        yref="paper",
        text="← warm-up (not measured)",
        showarrow=False,
        xanchor="left",
        yanchor="top",
        bgcolor="rgba(255,255,255,0.7)",
        font=dict(size=11, color="#59636e"),
    )


def outages(series: list[Series]) -> list[tuple[float, float | None, str]]:
    """(start, end or None, label) of every outage the runs' extensions recorded (sim.extensions.ops),
    once each (a run's models share its failures)."""
    seen: dict[tuple, str] = {}
    for s in series:
        for o in ((s.summary.get("extensions") or {}).get("operations") or {}).get("outages", []):
            seen.setdefault(
                (o["start_s"], o["end_s"]), f"{o['kind']} failure: instance {o['instance']}, node {o['node']}"
            )
    return [(a, b, label) for (a, b), label in seen.items()]


def mark_outages(fig: go.Figure, series: list[Series], axis: TimeAxis, *, grid: bool = False) -> None:
    """Shade each failure's outage in red (in every subplot of a `grid`), labelled on hover of its start."""
    where = dict(row="all", col="all") if grid else {}
    for start, end, label in outages(series):
        fig.add_vrect(
            x0=axis.x(start),
            x1=axis.x(axis.end_s if end is None else end),
            fillcolor="#cf222e",
            opacity=0.12,
            line_width=0,
            layer="below",
            **where,
        )
        fig.add_annotation(
            x=axis.x(start), xref="x", y=0.0, yref="paper", text="✕", hovertext=label, showarrow=False,
            yanchor="bottom", font=dict(size=11, color="#cf222e"),
        )  # fmt: skip


def bucket_caption(axis: TimeAxis, what: str) -> str:
    """What a plotted point is: a sample, or the mean of the samples in a bucket (with a min-max band)."""
    if axis.sample_s is not None and axis.sample_s >= axis.bucket_s:
        return f"{what}; one point per sample (every {fmt_duration(axis.sample_s)})."
    every = f" of samples every {fmt_duration(axis.sample_s)}" if axis.sample_s else ""
    return f"{what}; line = {bucket_label(axis.bucket_s)} mean{every}, band = min to max within the bucket."
