"""The `sim validate --real` page: measured against simulated request latencies, and each measured engine
step against sim's prediction of it; offline and deterministic (sim.report.page)."""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go

from sim.report.page import Panel, Section, render_page
from sim.report.theme import layout, new_figure
from sim.validate.real import LATENCIES, STEP_KINDS, RealReport

MEASURED, SIMULATED = "#4c72b0", "#dd8452"
KIND_COLOR = {"decode": "#4c72b0", "prefill": "#55a868", "mixed": "#c44e52"}
MAX_POINTS = 2000  # steps drawn per kind (evenly spaced), so the page stays small


def _fmt(v: float | None, pct: bool = False) -> str:
    if v is None or not np.isfinite(v):
        return "n/a"
    return f"{v:+.1%}" if pct else f"{v:,.4g}"


def metrics_table(report: RealReport) -> str:
    head = "<tr><th>metric</th><th>stat</th><th>measured</th><th>simulated</th><th>error</th></tr>"
    rows = [
        f"<tr><td>{html.escape(m.metric)}</td><td>{html.escape(m.stat)}</td><td class='num'>{_fmt(m.measured)}</td>"
        f"<td class='num'>{_fmt(m.simulated)}</td><td class='num'>{_fmt(m.error_frac, True)}</td></tr>"
        for m in report.metrics
    ]
    return f'<table class="data">{head}{"".join(rows)}</table>'


def steps_table(report: RealReport) -> str:
    head = ("<tr><th>steps</th><th>count</th><th>median error</th><th>median |error|</th><th>p10</th><th>p90</th>"
            "<th>total time error</th></tr>")  # fmt: skip
    rows = []
    labelled = [(kind, kind, report.steps.get(kind)) for kind in STEP_KINDS]
    labelled += [(f"all, forward_term {t}", "all", by.get("all")) for t, by in report.steps_by_term.items()]
    for label, _kind, s in labelled:
        if s is None:
            continue
        rows.append(
            f"<tr><td>{html.escape(label)}</td><td class='num'>{s['steps']:,}</td>"
            + "".join(
                f"<td class='num'>{_fmt(s[k], True)}</td>"
                for k in (
                    "median_error_frac",
                    "median_abs_error_frac",
                    "p10_error_frac",
                    "p90_error_frac",
                    "total_error_frac",
                )
            )  # fmt: skip
            + "</tr>"
        )
    return f'<table class="data">{head}{"".join(rows)}</table>'


def _settings(report: RealReport) -> str:
    items = "".join(
        f"<li>{html.escape(str(k))}: {html.escape(str(v))}</li>" for k, v in report.settings.items()
    )
    return f"<ul>{items}</ul>"


def _sample(idx: np.ndarray) -> np.ndarray:
    if len(idx) <= MAX_POINTS:
        return idx
    return idx[np.linspace(0, len(idx) - 1, MAX_POINTS).astype(int)]


def _scatter(report: RealReport) -> go.Figure:
    fig = new_figure()
    ms, ps = report.measured_step_s * 1e3, report.predicted_step_s * 1e3
    for kind, color in KIND_COLOR.items():
        idx = _sample(np.flatnonzero(report.step_kind == kind))
        if len(idx):
            fig.add_trace(go.Scattergl(x=ms[idx], y=ps[idx], mode="markers", name=kind,
                                       marker=dict(color=color, size=4, opacity=0.5)))  # fmt: skip
    hi = float(max(ms.max(), ps.max())) if len(ms) else 1.0
    fig.add_trace(go.Scatter(x=[0, hi], y=[0, hi], mode="lines", name="predicted = measured",
                             line=dict(color="#888", dash="dot")))  # fmt: skip
    fig.update_layout(
        **layout("Step time: predicted by sim vs measured", "measured step (ms)", "predicted (ms)")
    )
    return fig


def _error_by_batch(report: RealReport) -> go.Figure:
    fig = new_figure()
    err = (report.predicted_step_s - report.measured_step_s) / report.measured_step_s
    for kind, color in KIND_COLOR.items():
        idx = _sample(np.flatnonzero(report.step_kind == kind))
        if len(idx):
            fig.add_trace(go.Scattergl(x=report.decode_batch[idx], y=err[idx] * 100, mode="markers", name=kind,
                                       marker=dict(color=color, size=4, opacity=0.5)))  # fmt: skip
    fig.update_layout(**layout("Step error by decode batch", "decode batch (sequences)",
                               "(predicted - measured) / measured (%)"))  # fmt: skip
    return fig


def _error_hist(report: RealReport) -> go.Figure:
    fig = new_figure()
    err = (report.predicted_step_s - report.measured_step_s) / report.measured_step_s * 100
    counts, edges = np.histogram(err, bins=80)  # binned here: the page carries 80 bars, not every step
    fig.add_trace(go.Bar(x=(edges[:-1] + edges[1:]) / 2, y=counts, width=np.diff(edges), marker_color=MEASURED,
                         name="steps"))  # fmt: skip
    fig.update_layout(
        **layout("Distribution of step errors", "(predicted - measured) / measured (%)", "steps")
    )
    return fig


def _cdf(report: RealReport, metric: str) -> go.Figure:
    fig = new_figure()
    for side, color in (("measured", MEASURED), ("simulated", SIMULATED)):
        v = np.sort(report.latencies[side][metric])
        v = v[np.isfinite(v)]
        if len(v):
            y = np.arange(1, len(v) + 1) / len(v)
            fig.add_trace(go.Scatter(x=v, y=y, mode="lines", name=side, line=dict(color=color)))
    fig.update_layout(**layout(f"{metric}: measured vs simulated", f"{metric.removesuffix('_s')} (s)",
                               "fraction of requests"))  # fmt: skip
    return fig


def real_page(report: RealReport) -> str:
    sections = [
        Section(
            "Requests",
            [Panel("", html=metrics_table(report), wide=True)]
            + [Panel(m, _cdf(report, m)) for m in LATENCIES],
            intro="A measurement of the simulator's error against a real serving run, not a test: nothing is "
            "tuned to these numbers. error = (simulated - measured) / measured.",
        ),  # fmt: skip
        Section(
            "Engine steps",
            [
                Panel("", html=steps_table(report), wide=True),
                Panel("Predicted vs measured", _scatter(report)),
                Panel("Errors", _error_hist(report)),
                Panel("By batch", _error_by_batch(report)),
            ],
            intro="Each measured step predicted from its recorded composition with the timing model of sim run.",
        ),  # fmt: skip
        Section("Setup", [Panel("", html=_settings(report), wide=True)]),
    ]
    return render_page("sim validate --real", f"{report.model}: {report.run_dir}", sections)
