"""Cost: what the cluster costs per hour by pool, and cost per task and per 1M tokens next to what the
DeepSeek API would bill for the same tokens (list prices recorded in the run's summary, hardware.md §4)."""

from __future__ import annotations

import html

import plotly.graph_objects as go

from sim.report.page import Panel, missing, swatch
from sim.report.series import Series
from sim.report.theme import fmt_usd, layout, new_figure
from sim.units import HOUR_S

ROLE_COLORS = {"prefill": "#4e79a7", "decode": "#f28e2b", "colocated": "#59a14f"}


def api_block(s: Series) -> dict:
    api = s.summary.get("api")
    return api if isinstance(api, dict) else {}


def pools_panel(series: list[Series]) -> Panel:
    """Stacked bars: each pool's $/h, coloured by role (prefill, decode, colocated)."""
    title = "Cluster cost per hour by pool"
    have = [s for s in series if s.summary.get("pools")]
    if not have:
        return missing(title, "pools with usd_per_hour in summary.json")
    fig = new_figure()
    names = [s.name for s in have]
    shown_roles: set[str] = set()
    n_pools = max(len(s.summary["pools"]) for s in have)
    for i in range(n_pools):
        for s in have:
            pools = s.summary["pools"]
            if i >= len(pools):
                continue
            p = pools[i]
            role = str(p.get("role", ""))
            detail = f"{p.get('name')}: {p.get('nodes')} nodes × {p.get('hardware')}, {p.get('gpus')} GPUs"
            if isinstance(p.get("gpus"), int) and (window := s.value("window_s")):
                detail += f", {p['gpus'] * window / HOUR_S:,.1f} GPU-hours in the measured window"
            fig.add_trace(
                go.Bar(
                    x=[s.name], y=[p.get("usd_per_hour")], name=role, legendgroup=role,
                    showlegend=role not in shown_roles, marker_color=ROLE_COLORS.get(role, "#bab0ac"),
                    marker_pattern_shape=s.pattern, marker_line=dict(color="#ffffff", width=1),
                    customdata=[detail], hovertemplate="%{customdata}<br>$%{y:,.2f}/h<extra>" + role + "</extra>",
                )
            )  # fmt: skip
            shown_roles.add(role)
    fig.update_layout(**layout(title, "", "USD per hour", barmode="stack"))
    fig.update_xaxes(categoryorder="array", categoryarray=names)
    fig.update_yaxes(tickprefix="$")
    caption = (
        "Each block is one pool (hover for nodes, hardware and GPU-hours). The split of a pool's price into GPU, "
        "DRAM, SSD and energy is not in this run's summary.json."
    )
    return Panel(title, fig, caption=caption)


def per_task_panel(series: list[Series]) -> Panel:
    """Cluster cost per task vs what the API would bill for the same tokens, per task."""
    title = "Cost per task: simulated cluster vs DeepSeek API"
    have = [
        s for s in series if s.value("cost_per_task_usd") is not None or "bill_usd_per_task" in api_block(s)
    ]
    if not have:
        return missing(title, "cost_per_task_usd and api.bill_usd_per_task in summary.json")
    cats = ["cluster (simulated)", "DeepSeek API bill"]
    fig = new_figure()
    for s in have:
        api = api_block(s)
        values = [s.value("cost_per_task_usd"), api.get("bill_usd_per_task")]
        fig.add_trace(
            go.Bar(
                x=cats, y=values, name=s.name, marker_color=s.color, marker_pattern_shape=s.pattern,
                legendgroup=s.name, text=[fmt_usd(v) for v in values], textposition="outside", cliponaxis=False,
                hovertemplate="%{x}: $%{y:.4f} per task<extra>" + s.name + "</extra>",
            )
        )  # fmt: skip
    fig.update_layout(**layout(title, "", "USD per task", barmode="group"))
    fig.update_yaxes(tickprefix="$")
    caption = (
        "API bill: the run's input tokens at the cache-hit price where the prefix was found and the "
        "cache-miss price otherwise, plus output tokens at the output price (peak list price)."
    )
    return Panel(title, fig, caption=caption)


def price_table_panel(series: list[Series]) -> Panel:
    """$ per 1M tokens: the cluster's (input = prefill share, output = decode share) and the API's list prices."""
    title = "USD per 1M tokens: simulated vs DeepSeek API list price"
    rows = []
    for s in series:
        api = api_block(s)
        if s.value("usd_per_mtok_input") is None and not api:
            continue
        ratio = api.get("cluster_cost_over_bill")
        cells = [
            f"<td>{swatch(s.color)} {html.escape(s.name)}</td>",
            *(f'<td class="num">{fmt_usd(s.value(k))}</td>' for k in ("usd_per_mtok_input", "usd_per_mtok_output")),
            f"<td>{html.escape(str(api.get('api_model', '–')))} ({html.escape(str(api.get('tier', '')))}, "
            f"from {html.escape(str(api.get('valid_from_utc', '–')))})</td>",
            *(f'<td class="num">{fmt_usd(api.get(k))}</td>' for k in
              ("cache_hit_usd_per_mtok", "cache_miss_usd_per_mtok", "output_usd_per_mtok")),
            f'<td class="num">{f"{ratio:.2f}×" if isinstance(ratio, int | float) else "–"}</td>',
            f"<td>{html.escape(', '.join(api.get('src') or []))}</td>",
        ]  # fmt: skip
        rows.append(f"<tr>{''.join(cells)}</tr>")
    if not rows:
        return missing(title, "usd_per_mtok_* and the api block in summary.json")
    head = (
        "<tr><th>model</th><th>sim input</th><th>sim output</th><th>API model</th><th>API hit</th>"
        "<th>API miss</th><th>API output</th><th>cluster ÷ API bill</th><th>price sources</th></tr>"
    )
    table = f'<table class="data"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'
    caption = (
        "Sim input/output: the cluster's cost over the measured window split by pool role (prefill vs "
        "decode), per 1M tokens. Sources are hardware.md §4 ids. Below 1× the cluster is cheaper than the API."
    )
    return Panel(title, html=table, caption=caption, wide=True)


def cost_panels(series: list[Series]) -> list[Panel]:
    return [per_task_panel(series), pools_panel(series), price_table_panel(series)]
