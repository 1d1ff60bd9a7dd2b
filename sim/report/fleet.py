"""The page of a fleet run (sim.fleet): the merged figures per model, the spread over cells (each cell's
bottleneck load, p99 TTFT and requests, hottest against mean) and the cells the peak hour needs. Drawn
from the fleet's summary.json alone; a cell's own page is `sim report RUN_DIR/cells/cell_NNNN`."""

from __future__ import annotations

import html

import plotly.graph_objects as go

from sim.report.page import Panel, Section, render_page
from sim.report.theme import layout, model_colors, new_figure


def _f(v, fmt: str) -> str:
    return "–" if v is None else format(v, fmt)


ROWS = (
    ("requests arrived (measured)", lambda m: f"{m['requests_arrived']:,}"),
    ("completed / rejected", lambda m: f"{m['requests_completed']:,} / {m['requests_rejected']:,}"),
    ("TTFT p50 / p90 / p99 (s)", lambda m: " / ".join(_f(m[f"ttft_{p}_s"], ".2f") for p in ("p50", "p90", "p99"))),
    ("TPOT p50 / p90 / p99 (ms)",
     lambda m: " / ".join(_f(m[f"tpot_{p}_s"] and m[f"tpot_{p}_s"] * 1e3, ".1f") for p in ("p50", "p90", "p99"))),
    ("SLO attainment", lambda m: _f(m["slo_attainment"], ".4f")),
    ("output tokens/s per GPU", lambda m: _f(m["output_tokens_per_s_per_gpu"], ",.0f")),
    ("GPUs; cluster $/h", lambda m: f"{m['gpus']:,}; {m['cluster_usd_per_hour']:,.0f}"),
    ("cost per task ($)", lambda m: _f(m["cost_per_task_usd"], ".3f")),
    ("hottest cell's load / mean", lambda m: f"{_f(m['spread']['hottest_load'], '.3f')} / {_f(m['spread']['mean_load'], '.3f')}"),
    ("busiest cell's requests / mean", lambda m: _f(m["spread"]["max_over_mean_requests"], ".3f")),
    ("cells needed at the peak hour (>=)", lambda m: f"{_f(m['peak']['cells_needed_at_peak'], 'd')} of {m['cells']}"),
)  # fmt: skip


def _table(models: dict) -> str:
    head = "".join(f"<th>{html.escape(name)}</th>" for name in models)
    rows = "".join(
        f"<tr><td>{html.escape(label)}</td>"
        + "".join(f'<td class="num">{html.escape(cell(m))}</td>' for m in models.values())
        + "</tr>"
        for label, cell in ROWS
    )
    return f'<table class="data"><thead><tr><th></th>{head}</tr></thead><tbody>{rows}</tbody></table>'


def _per_cell(models: dict, key: str, title: str, y_title: str, scale: float = 1.0) -> go.Figure:
    fig = new_figure()
    colors = model_colors(models)
    for name, m in models.items():
        cells = m["per_cell"]
        fig.add_trace(go.Bar(x=[c["cell"] for c in cells], name=name, marker_color=colors[name],
                             y=[None if c[key] is None else c[key] * scale for c in cells]))  # fmt: skip
    fig.update_layout(**layout(title, "cell", y_title), barmode="group")
    return fig


def build_fleet_page(summary: dict) -> tuple[str, int]:
    """The page and its number of charts."""
    models, fleet = summary["models"], summary["fleet"]
    figures = [
        _per_cell(models, "bottleneck_load", "Bottleneck load per cell", "load (1 = the busiest pool at its limit)"),
        _per_cell(models, "ttft_p99_s", "TTFT p99 per cell", "s"),
        _per_cell(models, "requests_arrived", "Requests per cell (measured)", "requests"),
    ]  # fmt: skip
    peak = "; ".join(
        f"{name}: peak hour {m['peak']['peak_hour']}, {m['peak'].get('peak_hour_arrivals', 0):,} requests, "
        f"cell load there: hottest {_f(m['peak'].get('cell_load_at_peak_max'), '.3f')}, "
        f"mean {_f(m['peak'].get('cell_load_at_peak_mean'), '.3f')}"
        for name, m in models.items()
    )
    sections = [
        Section(
            "Fleet",
            [Panel("Merged over every request of every cell", html=_table(models), caption=peak, wide=True)],
            intro=f"{fleet['cells']} cells behind a {fleet['router']} router; percentiles over the merged values of "
            "all cells, never averaged (sim/fleet/merge.py). Cells needed at the peak hour: the cells' loads that "
            "hour packed into cells at load 1, a lower bound.",
        ),
        Section("Spread over cells", [Panel(f.layout.title.text, figure=f, wide=True) for f in figures]),
    ]
    title = f"{summary['scenario']['name']}: a fleet of {fleet['cells']} cells"
    return render_page(title, f"run {summary['run_id']}", sections, (summary["run_id"],)), len(figures)
