"""Look of every chart: one colour per model, one dash per run, tier colours, axis units and number formats.

Colours depend only on the set of names on the page (sorted), so a model keeps its colour in every
chart of a page and in every page that shows the same models.
"""

from __future__ import annotations

from collections.abc import Iterable

import plotly.graph_objects as go

from sim.units import DAY_S, GB, HOUR_S, KB, MB, MINUTE_S, MS, TB

# Okabe-Ito palette: distinguishable with the common colour-vision deficiencies.
MODEL_PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
RUN_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
RUN_PATTERNS = ("", "/", ".", "x", "-", "|")
# Where an input token's KV came from, hottest tier first; "computed by prefill": found in no tier.
TIER_COLORS = {"HBM": "#1b7837", "DRAM": "#5aae61", "SSD": "#a6dba0", "computed by prefill": "#bdbdbd"}
CHART_HEIGHT_PX = 380
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"


_GRID = "#e5e9f0"
_AXIS = dict(
    gridcolor=_GRID,
    linecolor="#c9d1d9",
    zerolinecolor=_GRID,
    ticks="",
    automargin=True,
    title=dict(standoff=8),
)
# A small template of our own: plotly's named templates are deep-copied and validated on every layout
# update, which made a page take seconds to build.
TEMPLATE = dict(
    layout=dict(
        paper_bgcolor="white", plot_bgcolor="white", colorway=list(MODEL_PALETTE),
        font=dict(color="#24292f"), xaxis=_AXIS, yaxis=_AXIS, hoverlabel=dict(align="left"),
    )
)  # fmt: skip


def new_figure() -> go.Figure:
    """An empty figure with the page's template (pass it to make_subplots as `figure=`)."""
    return go.Figure(layout=dict(template=TEMPLATE))


def fit_legend(fig: go.Figure, width_px: int) -> None:
    """Grow the top margin (and the height, so the plot keeps its size) by the rows the horizontal legend
    needs at this width, so that a long legend (a comparison of runs) never covers the title."""
    names: list[str] = []
    for trace in fig.data:
        if trace.name and trace.showlegend is not False and trace.name not in names:
            names.append(trace.name)
    rows, used = 1, 0.0
    for name in names:
        item = 40 + 6.8 * len(name)  # swatch + gap + text at the 12 px font
        if used and used + item > width_px - 80:
            rows, used = rows + 1, 0.0
        used += item
    extra = 22 * (rows - 1)
    if extra:
        fig.update_layout(
            margin_t=(fig.layout.margin.t or 80) + extra, height=(fig.layout.height or 0) + extra
        )


def model_colors(names: Iterable[str]) -> dict[str, str]:
    """Colour of each model name, assigned in sorted order."""
    return {name: MODEL_PALETTE[i % len(MODEL_PALETTE)] for i, name in enumerate(sorted(set(names)))}


def run_dash(run_index: int) -> str:
    return RUN_DASHES[run_index % len(RUN_DASHES)]


def run_pattern(run_index: int) -> str:
    return RUN_PATTERNS[run_index % len(RUN_PATTERNS)]


def time_unit(span_s: float) -> tuple[float, str]:
    """Seconds per axis unit and its name, so a two-week axis reads in days and a smoke run in minutes."""
    if span_s > 3 * DAY_S:
        return DAY_S, "days"
    if span_s > 3 * HOUR_S:
        return HOUR_S, "h"
    if span_s > 3 * MINUTE_S:
        return MINUTE_S, "min"
    return 1.0, "s"


def bucket_label(width_s: float) -> str:
    """'15-min' for a 900 s bucket: says what each plotted point averages over."""
    for unit_s, name in ((DAY_S, "day"), (HOUR_S, "h"), (MINUTE_S, "min"), (1.0, "s")):
        if width_s >= unit_s and (width_s / unit_s) == int(width_s / unit_s):
            return f"{int(width_s / unit_s)}-{name}"
    return f"{width_s:.3g}-s"


def layout(title: str, x_title: str, y_title: str, *, height: int = CHART_HEIGHT_PX, **extra) -> dict:
    """Plotly layout shared by every chart: titled axes with units, legend on top, compact margins."""
    base = dict(
        title=dict(
            text=title,
            x=0.01,
            xanchor="left",
            yref="container",
            y=1.0,
            yanchor="top",
            pad=dict(t=14),
            font=dict(size=15),
        ),
        font=dict(family=FONT, size=12),
        height=height,
        margin=dict(l=70, r=20, t=80, b=55),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0.0),
        xaxis=dict(title=dict(text=x_title)),
        yaxis=dict(title=dict(text=y_title)),
        hoverlabel=dict(namelength=-1),
    )
    base.update(extra)
    return base


def fmt_duration(seconds: float | None) -> str:
    if seconds is None or seconds != seconds:
        return "–"
    if seconds < 1.0:
        return f"{seconds / MS:.0f} ms" if seconds >= 10 * MS else f"{seconds / MS:.2g} ms"
    if seconds < MINUTE_S:
        return f"{seconds:.3g} s"
    if seconds < HOUR_S:
        return f"{seconds / MINUTE_S:.3g} min"
    return f"{seconds / HOUR_S:.3g} h"


def fmt_si(x: float | None, unit: str) -> str:
    """3 significant digits with a decimal prefix (k, M, G, T, P = 1e3 … 1e15), e.g. '1.71 TB'."""
    if x is None or x != x:
        return "–"
    for factor, prefix in ((1e15, "P"), (TB, "T"), (GB, "G"), (MB, "M"), (KB, "k")):
        if abs(x) >= factor:
            return f"{x / factor:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def fmt_bytes(n_bytes: float | None) -> str:
    """Decimal prefixes (GB = 1e9 B), as in sim.units."""
    return fmt_si(n_bytes, "B")


def fmt_usd(usd: float | None) -> str:
    """$1,234 / $12.34 / $0.30 / $0.0863: cents from $0.10 up, 3 significant digits below."""
    if usd is None or usd != usd:
        return "–"
    if abs(usd) >= 100:
        return f"${usd:,.0f}"
    if abs(usd) >= 0.1:
        return f"${usd:,.2f}"
    return f"${usd:.3g}"


def fmt_number(x: float | None, unit: str = "") -> str:
    if x is None or x != x:
        return "–"
    text = f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"
    return f"{text} {unit}".rstrip()


def fmt_percent(fraction: float | None) -> str:
    if fraction is None or fraction != fraction:
        return "–"
    return f"{100 * fraction:.1f} %"
