"""KV cache by tier: bytes held in HBM, host DRAM and SSD over time, and where each prefix was found."""

from __future__ import annotations

import plotly.graph_objects as go

from sim.report.page import Panel, missing
from sim.report.series import Series
from sim.report.theme import TIER_COLORS, fmt_percent, layout, new_figure
from sim.report.timeaxis import Cell, TimeAxis, bucket_caption, cluster_value, level_grid_figure, pool_sum

TIERS = {"hbm": "HBM", "dram": "DRAM", "ssd": "SSD"}  # summary key suffix -> label (theme.TIER_COLORS)
PREFILL = "computed by prefill"  # the rest of the input tokens
# Bytes moved per measured run, from summary.json: (key, label).
BYTES_MOVED = (
    ("bytes_loaded_dram", "loaded from DRAM"),
    ("bytes_loaded_ssd", "loaded from SSD"),
    ("bytes_loaded_swa_pool", "loaded from SWA pool"),
    ("bytes_kv_transfer", "prefill → decode"),
    ("bytes_written_dram", "written to DRAM"),
    ("bytes_written_ssd", "written to SSD"),
)
# (tier, cluster-wide bytes held, capacity of that tier); KV bytes of the model's whole cluster.
KV_TIERS = (
    ("HBM", cluster_value("hbm_kv_bytes"), pool_sum("hbm_kv_capacity_bytes")),
    ("host DRAM", cluster_value("dram_kv_bytes"), pool_sum("dram_kv_capacity_bytes")),
    ("SSD", cluster_value("ssd_kv_bytes"), cluster_value("ssd_kv_capacity_bytes")),
)
SWA_POOL = ("V4.1 SWA pool", cluster_value("swa_pool_bytes"))


def kv_bytes_panel(series: list[Series], axis: TimeAxis) -> Panel:
    """One subplot per tier, shared time axis, one line per series, its capacity dotted."""
    title = "KV cache bytes held per tier over simulated time"
    cells = [Cell(f"{tier} KV (bytes)", held, cap) for tier, held, cap in KV_TIERS]
    name, held = SWA_POOL
    if any((b := held(s, axis)) is not None and b.hi.max() > 0 for s in series):
        cells.append(Cell(f"{name} (bytes)", held))
    fig = level_grid_figure(title, axis, series, cells, "B", cols=2)
    if fig is None:
        return missing(title, "cluster time series with KV bytes per tier", wide=True)
    what = "KV bytes held in each tier across the model's cluster, capacity dotted (decimal: 1 GB = 1e9 B)"
    return Panel(title, fig, caption=bucket_caption(axis, what), wide=True)


def tier_fractions(series: list[Series]) -> dict[str, dict[str, float]]:
    """Share of measured input tokens whose KV came from each tier (summary.json `hit_rate_<tier>`); the
    rest (`1 - prefix_hit_rate`) was computed by prefill."""
    out = {}
    for s in series:
        rates = {label: s.value(f"hit_rate_{tier}") for tier, label in TIERS.items()}
        total = s.value("prefix_hit_rate")
        if total is None or any(v is None for v in rates.values()):
            continue
        out[s.name] = {**rates, PREFILL: max(0.0, 1.0 - total)}
    return out


def hit_breakdown_panel(series: list[Series]) -> Panel:
    """Stacked bars: share of input tokens found in each tier, the rest computed by prefill.

    `fractions[series name][tier]` for tiers HBM, DRAM, SSD and PREFILL, each in [0, 1].
    """
    title = "Where input tokens' KV came from"
    fractions = tier_fractions(series)
    shown = [s for s in series if s.name in fractions]
    if not shown:
        return missing(title, "hit rates per tier (hit_rate_hbm/dram/ssd, prefix_hit_rate) in summary.json")
    fig = new_figure()
    names = [s.name for s in shown]
    for tier, color in TIER_COLORS.items():
        values = [fractions[n].get(tier, 0.0) for n in names]
        fig.add_trace(
            go.Bar(
                y=names,
                x=[100 * v for v in values],
                name=tier,
                orientation="h",
                marker_color=color,
                text=[fmt_percent(v) if v >= 0.08 else "" for v in values],
                textangle=0,
                textposition="inside",
                hovertemplate="%{y}: %{x:.2f} % of input tokens from " + tier + "<extra></extra>",
            )
        )
    fig.update_layout(
        **layout(
            title,
            "share of input tokens (%)",
            "",
            height=max(220, 90 + 46 * len(names)),
            barmode="stack",
            margin=dict(l=20, r=20, t=80, b=50),
        )
    )
    fig.update_xaxes(range=[0, 100], ticksuffix=" %")
    fig.update_layout(legend_traceorder="normal")
    fig.update_yaxes(autorange="reversed", automargin=True)
    caption = (
        "HBM/DRAM/SSD: KV of the prefix reused from that tier. Computed by prefill: found in no tier (new tokens such as "
        "tool results, or prefixes evicted before reuse), so prefill computed it."
    )
    return Panel(title, fig, caption=caption)


def bytes_moved_panel(series: list[Series]) -> Panel:
    title = "KV bytes moved between tiers (measured window)"
    have = [s for s in series if any(s.value(k) is not None for k, _ in BYTES_MOVED)]
    if not have:
        return missing(title, "bytes loaded and written per tier in summary.json")
    fig = new_figure()
    labels = [label for _, label in BYTES_MOVED]
    for s in have:
        fig.add_trace(
            go.Bar(
                y=labels,
                x=[s.value(k) or 0.0 for k, _ in BYTES_MOVED],
                name=s.name,
                orientation="h",
                marker_color=s.color,
                marker_pattern_shape=s.pattern,
                legendgroup=s.name,
                hovertemplate="%{y}: %{x:.3~s}B<extra>" + s.name + "</extra>",
            )
        )
    fig.update_layout(
        **layout(
            title,
            "bytes (decimal: 1 TB = 1e12 B)",
            "",
            barmode="group",
            height=max(300, 120 + 28 * len(labels) * len(have)),
        )
    )
    fig.update_xaxes(tickformat=".2~s", ticksuffix="B")
    fig.update_yaxes(autorange="reversed", automargin=True)
    return Panel(title, fig, caption="Totals over measured requests; what the tiers cost in I/O.")
