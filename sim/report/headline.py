"""The top of the page: the verdict (which model, how much cheaper, why) and headline cards with the
new / old ratio of each model and its predecessor (V4.1 / V4; sim.report.compare). Every number comes
from summary.json as written by the run."""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass

from sim.report import capacity
from sim.report.compare import Pair, ratio, successor_pairs
from sim.report.cost import api_block
from sim.report.kvtiers import PREFILL, tier_fractions
from sim.report.page import Panel, swatch
from sim.report.series import Series
from sim.report.theme import fmt_duration, fmt_number, fmt_percent, fmt_usd


@dataclass(frozen=True)
class Metric:
    key: str  # key in summary.json models.<name>
    label: str
    fmt: Callable[[float | None], str]
    higher_is_better: bool


HEADLINE = (
    Metric("cost_per_task_usd", "Cost per task", fmt_usd, False),
    Metric("output_tokens_per_s", "Output throughput", lambda v: fmt_number(v, "tok/s"), True),
    Metric("tasks_per_hour", "Tasks completed", lambda v: fmt_number(v, "/h"), True),
    Metric("ttft_p50_s", "TTFT p50", fmt_duration, False),
    Metric("ttft_p99_s", "TTFT p99", fmt_duration, False),
    Metric("tpot_p50_s", "TPOT p50", fmt_duration, False),
    Metric("tpot_p99_s", "TPOT p99", fmt_duration, False),
    Metric("slo_attainment", "SLO attainment", fmt_percent, True),
    Metric("requests_rejected", "Requests rejected", fmt_number, False),
    Metric(
        "cluster_usd_per_hour", "Cluster cost", lambda v: fmt_usd(v) + "/h" if v is not None else "–", False
    ),
)


def ratio_text(r: float, higher_is_better: bool) -> str:
    """'0.62× (38 % lower)' coloured green when that direction is better."""
    if round(r, 2) == 1.0:
        return f"{r:.2f}× (about the same)"
    change = f"{abs(r - 1) * 100:.0f} % {'higher' if r > 1 else 'lower'}"
    better = (r > 1) == higher_is_better
    return f'{r:.2f}× <span class="{"better" if better else "worse"}">({change})</span>'


def cards_html(series: list[Series]) -> str:
    pairs = successor_pairs(series)
    cards = []
    for m in HEADLINE:
        if all(s.value(m.key) is None for s in series):
            continue
        rows = [
            f'<div class="row"><span class="who">{swatch(s.color)}{html.escape(s.name)}</span>'
            f'<span class="val">{html.escape(m.fmt(s.value(m.key)))}</span></div>'
            for s in series
        ]
        for p in pairs:
            r = ratio(p.new.value(m.key), p.old.value(m.key))
            if r is not None:
                where = f" ({html.escape(p.new.run.label)})" if len({s.run_index for s in series}) > 1 else ""
                rows.append(f'<div class="ratio">{p.label}{where}: {ratio_text(r, m.higher_is_better)}</div>')
        cards.append(
            f'<div class="card"><div class="label">{html.escape(m.label)}</div>{"".join(rows)}</div>'
        )
    if not cards:
        return '<p class="missing">Not in this run: headline metrics in summary.json</p>'
    return f'<div class="cards">{"".join(cards)}</div>'


def headline_panels(series: list[Series]) -> list[Panel]:
    """Verdict (when the page holds a model and its predecessor), any engine refusal, then the cards."""
    panels = []
    for p in successor_pairs(series):
        panels.append(Panel("", html=verdict_html(p, reasons(p)), wide=True))
    if refusals := refusal_html(series):
        panels.append(Panel("", html=refusals, wide=True))
    panels.append(Panel("", html=cards_html(series), wide=True))
    return panels


def refusal_html(series: list[Series]) -> str:
    """Models the run served on a deployment their engine would not start (summary `engine_refusal`,
    sim.config.engine_rules): their figures are a what-if, said beside the verdict they feed."""
    lines = [
        f"<li>{html.escape(s.name)}: {html.escape(s.summary['engine_refusal'])}. Its figures are what the "
        "engine would serve if it started.</li>"
        for s in series
        if s.summary.get("engine_refusal")
    ]
    return f'<div class="verdict"><p>Caveat:</p><ul>{"".join(lines)}</ul></div>' if lines else ""


def verdict_html(p: Pair, reasons: list[str]) -> str:
    new, old = p.new, p.old
    c_new, c_old = new.value("cost_per_task_usd"), old.value("cost_per_task_usd")
    r = ratio(c_new, c_old)
    if r is None:
        head = (
            f"{html.escape(new.name)} vs {html.escape(old.name)}: "
            "cost per task is not in this run, so no verdict on cost."
        )
    elif round(r, 2) == 1.0:
        head = (
            f"Cost per task is about the same: <b>{html.escape(fmt_usd(c_new))}</b> for {html.escape(new.name)} "
            f"vs {html.escape(fmt_usd(c_old))} for {html.escape(old.name)} ({p.label} = {r:.3f}×)."
        )
    else:
        winner, loser = (new, old) if r < 1 else (old, new)
        saving = 1 - r if r < 1 else 1 - 1 / r
        head = (
            f"<b>{html.escape(winner.name)}</b> is cheaper per task: "
            f"<b>{html.escape(fmt_usd(winner.value('cost_per_task_usd')))}</b> vs "
            f"{html.escape(fmt_usd(loser.value('cost_per_task_usd')))} for {html.escape(loser.name)}, "
            f"<b>{100 * saving:.0f} % less</b> ({p.label} = {r:.2f}×)."
        )
    items = "".join(f"<li>{line}</li>" for line in reasons)
    why = f"<p>Why:</p><ul>{items}</ul>" if items else ""
    return f'<div class="verdict"><p>{head}</p>{decomposition(p)}{why}</div>'


def decomposition(p: Pair) -> str:
    """Cost per task = cluster $/h ÷ tasks per hour, so its ratio is the $/h ratio over the tasks/h ratio."""
    new, old = p.new, p.old
    usd = ratio(new.value("cluster_usd_per_hour"), old.value("cluster_usd_per_hour"))
    tasks = ratio(new.value("tasks_per_hour"), old.value("tasks_per_hour"))
    if usd is None or not tasks:
        return ""
    if round(usd, 3) == 1.0:
        text = (
            f"Both clusters cost {fmt_usd(new.value('cluster_usd_per_hour'))}/h, so the difference is tasks "
            f"completed per hour: {fmt_number(new.value('tasks_per_hour'))} vs "
            f"{fmt_number(old.value('tasks_per_hour'))} ({tasks:.2f}×)."
        )
    else:
        text = (
            f"Cost per task = cluster cost per hour ÷ tasks per hour: {p.label} = {usd:.2f}× the cost per hour "
            f"÷ {tasks:.2f}× the tasks per hour = {usd / tasks:.2f}×."
        )
    return f"<p>{text}</p>"


def reasons(p: Pair) -> list[str]:
    """The 'why' of the verdict: the measured differences behind the cost ratio."""
    new, old = p.new, p.old
    lines = []
    kv_new, kv_old = new.value("kv_bytes_per_token"), old.value("kv_bytes_per_token")
    if (r := ratio(kv_old, kv_new)) is not None:
        lines.append(
            f"KV cache per token: {fmt_number(kv_new)} B vs {fmt_number(kv_old)} B "
            f"({r:.1f}× smaller for {p.new_label})."
        )
    sn, so = capacity.sessions_per_node(new), capacity.sessions_per_node(old)
    for key in ("fit in HBM", "decoding, mean"):
        if (r := ratio(sn[key], so[key])) is not None:
            lines.append(
                f"Sessions per serving node ({key}): {fmt_number(sn[key])} vs {fmt_number(so[key])} ({r:.2f}×)."
            )
    fr = tier_fractions([new, old])
    if new.name in fr and old.name in fr:
        lines.append(
            f"Input tokens computed by prefill (found in no tier): {fmt_percent(fr[new.name][PREFILL])} vs "
            f"{fmt_percent(fr[old.name][PREFILL])}; KV found in HBM: {fmt_percent(fr[new.name]['HBM'])} "
            f"vs {fmt_percent(fr[old.name]['HBM'])}."
        )
    if (r := ratio(new.value("output_tokens_per_s"), old.value("output_tokens_per_s"))) is not None:
        lines.append(
            f"Output throughput: {fmt_number(new.value('output_tokens_per_s'), 'tok/s')} vs "
            f"{fmt_number(old.value('output_tokens_per_s'), 'tok/s')} ({r:.2f}×)."
        )
    bill_new, bill_old = api_block(new).get("bill_usd_per_task"), api_block(old).get("bill_usd_per_task")
    if isinstance(bill_new, int | float) and isinstance(bill_old, int | float):
        lines.append(
            f"For scale: the DeepSeek API would bill {fmt_usd(bill_new)} vs {fmt_usd(bill_old)} per task "
            "for the same tokens at list price."
        )
    return lines
