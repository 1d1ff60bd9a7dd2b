"""Per-model capacity: KV bytes per token and per session, sessions per node, load and headroom per
pool at the SLO (sim.metrics.capacity), and the 'why' lines of the verdict that follow from them."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sim.metrics.capacity import low_load_line
from sim.report.page import Panel, missing
from sim.report.series import Series
from sim.report.theme import fmt_bytes, fmt_number, layout, new_figure

SERVING_ROLES = ("decode", "colocated")  # pools whose instances hold sessions while they generate
RUNNING_COLUMN = "running_seqs"
SESSION_BYTES = (
    ("session_kv_bytes_mean", "mean session"),
    ("session_kv_bytes_at_1m_tokens", "1M-token session"),
    ("session_ssd_bytes_mean", "mean session on SSD"),
)


def _bars(
    title: str,
    y_title: str,
    have: list[tuple[Series, list[float | None]]],
    cats: list[str],
    unit: str,
    hover_fmt: str,
) -> go.Figure:
    fig = new_figure()
    for s, values in have:
        fig.add_trace(
            go.Bar(
                x=cats,
                y=values,
                name=s.name,
                marker_color=s.color,
                marker_pattern_shape=s.pattern,
                legendgroup=s.name,
                text=[_label(v, unit) for v in values],
                textposition="outside",
                cliponaxis=False,
                hovertemplate="%{x}: %{y:" + hover_fmt + "}" + unit + "<extra>" + s.name + "</extra>",
            )
        )
    fig.update_layout(**layout(title, "", y_title, barmode="group"))
    return fig


def _label(v: float | None, unit: str) -> str:
    if v is None:
        return "n/a"
    return fmt_bytes(v) if unit == "B" else fmt_number(v)


def kv_per_token_panel(series: list[Series]) -> Panel:
    title = "KV cache bytes per token"
    have = [(s, [s.value("kv_bytes_per_token")]) for s in series if s.value("kv_bytes_per_token") is not None]
    if not have:
        return missing(title, "kv_bytes_per_token in summary.json")
    fig = _bars(title, "bytes per token (all layers)", have, ["KV bytes per token"], "", ",.2f")
    return Panel(title, fig, caption="From each model's architecture (sim.model), as recorded by the run.")


def session_bytes_panel(series: list[Series]) -> Panel:
    title = "KV bytes per session"
    have = [(s, [s.value(k) for k, _ in SESSION_BYTES]) for s in series]
    have = [(s, v) for s, v in have if any(x is not None for x in v)]
    if not have:
        return missing(title, "session_kv_bytes_* in summary.json")
    fig = _bars(
        title, "bytes (decimal: 1 GB = 1e9 B)", have, [label for _, label in SESSION_BYTES], "B", ".3~s"
    )
    fig.update_yaxes(tickformat=".2~s", ticksuffix="B")
    caption = "Mean session: at the mean final context of completed sessions; SSD: what persisting it writes."
    return Panel(title, fig, caption=caption)


def serving_pools(s: Series) -> list[dict]:
    return [p for p in s.summary.get("pools") or [] if isinstance(p, dict) and p.get("role") in SERVING_ROLES]


def sessions_per_node(s: Series) -> dict[str, float | None]:
    """Sessions per serving node: decoding now (time mean and peak of the sampled counts), and how many
    sessions of mean size the HBM KV budget of a node could hold."""
    pools = serving_pools(s)
    nodes = sum(p.get("nodes") or 0 for p in pools)
    out: dict[str, float | None] = {"decoding, mean": None, "decoding, peak": None, "fit in HBM": None}
    if not nodes:
        return out
    frames = s.run.pools_of(s.model)
    names = {p.get("name") for p in pools}
    if RUNNING_COLUMN in frames and not frames.empty:
        serving = frames[frames["pool"].isin(names)]
        total = serving.groupby("t_s", sort=True)[RUNNING_COLUMN].sum()
        if len(total):
            out["decoding, mean"] = float(total.mean()) / nodes
            out["decoding, peak"] = float(total.max()) / nodes
    budget = sum((p.get("kv_bytes_per_instance") or 0.0) * (p.get("instances") or 0) for p in pools)
    session = s.value("session_kv_bytes_mean")
    if budget > 0 and session:
        out["fit in HBM"] = budget / nodes / session
    return out


def sessions_panel(series: list[Series]) -> Panel:
    """Two scales side by side: sessions decoding per node (tens) and sessions that fit in HBM (thousands)."""
    title = "Sessions per serving node"
    values = {s.name: sessions_per_node(s) for s in series}
    groups = (
        (["decoding, mean", "decoding, peak"], "decoding now (sampled)"),
        (["fit in HBM"], "fit in HBM KV"),
    )
    if all(v is None for s in series for v in values[s.name].values()):
        return missing(
            title, "pools (role, nodes, kv_bytes_per_instance) in summary.json and running_seqs samples"
        )
    fig = make_subplots(
        figure=new_figure(),
        rows=1,
        cols=2,
        column_widths=[0.62, 0.38],
        horizontal_spacing=0.14,
    )
    for col, (cats, x_title) in enumerate(groups, start=1):
        fig.update_xaxes(title_text=x_title, row=1, col=col)
        for s in series:
            ys = [values[s.name][c] for c in cats]
            fig.add_trace(
                go.Bar(x=cats, y=ys, name=s.name, marker_color=s.color, marker_pattern_shape=s.pattern,
                       legendgroup=s.name, showlegend=col == 1, text=[_label(v, "") for v in ys],
                       textposition="outside", cliponaxis=False,
                       hovertemplate="%{x}: %{y:,.1f} per node<extra>" + s.name + "</extra>"),
                row=1, col=col,
            )  # fmt: skip
    fig.update_layout(**layout(title, "", "sessions per node", barmode="group"))
    fig.update_xaxes(title_text=groups[0][1], row=1, col=1)
    fig.update_yaxes(title_text="sessions per node", row=1, col=1)
    fig.update_yaxes(title_text="", row=1, col=2)
    caption = (
        "Serving node = node of a decode or colocated pool. Decoding: sampled running sequences ÷ nodes. "
        "Fit in HBM: the nodes' HBM KV budget (kv_bytes_per_instance × instances) ÷ the mean session's KV."
    )
    return Panel(title, fig, caption=caption)


def load_panel(series: list[Series]) -> Panel:
    """Load per pool at the SLO (bars), headroom and sessions per serving node at the SLO in the caption,
    and the low-load warning when it applies."""
    title = "Load per pool at the SLO"
    have = [(s, (s.summary.get("capacity") or {}).get("pools") or []) for s in series]
    have = [(s, pools) for s, pools in have if any(p.get("load") is not None for p in pools)]
    if not have:
        return missing(title, "capacity.pools in summary.json (runs before the capacity block)")
    fig = new_figure()
    for s, pools in have:
        loads = [p.get("load") for p in pools]
        fig.add_trace(
            go.Bar(x=[p["name"] for p in pools], y=[None if v is None else v * 100 for v in loads], name=s.name,
                   marker_color=s.color, marker_pattern_shape=s.pattern, legendgroup=s.name,
                   text=["n/a" if v is None else f"{v:.0%}" for v in loads], textposition="outside",
                   cliponaxis=False, hovertemplate="%{x}: %{y:.1f}%<extra>" + s.name + "</extra>")
        )  # fmt: skip
    fig.update_layout(**layout(title, "pool", "load (% of what the SLO allows)", barmode="group"))
    notes = []
    for s, _pools in have:
        cap = s.summary.get("capacity") or {}
        at = cap.get("sessions_per_serving_node_at_slo")
        if at is not None:
            notes.append(
                f"{s.name}: at most about {at:,.1f} sessions per serving node at the SLO (extrapolated)."
            )
        elif cap.get("sessions_in_progress_per_serving_node") is not None:
            notes.append(
                f"{s.name}: the run already misses its p99 SLO; the cluster sustains fewer sessions."
            )
        warning = low_load_line(cap)
        if warning:
            notes.append(f"{s.name}: {warning}")
    caption = (
        "Load: prefill pools, busy share; decode pools, mean decode batch / the largest batch whose TPOT meets "
        "the SLO at the run's mean context; colocated, the larger. Headroom = 1 - load. " + " ".join(notes)
    )
    return Panel(title, fig, caption=caption)


def capacity_panels(series: list[Series]) -> list[Panel]:
    return [
        kv_per_token_panel(series),
        session_bytes_panel(series),
        sessions_panel(series),
        load_panel(series),
    ]
