"""The scenario a run was given, as a table, so the page stands alone without the YAML beside it."""

from __future__ import annotations

import html
import json

from sim.report.page import Panel, missing
from sim.report.series import Series
from sim.report.theme import fmt_bytes

MAX_LIST_ITEMS = 12  # longer lists (per-instance tables) are summarised, not spelled out
# Keys of summary.json models.<name> that describe the set-up rather than the outcome.
MODEL_INPUT_KEYS = (
    "family",
    "warmup_s",
    "window_s",
    "pools",
    "spec_decode",
    "engram_in_host_dram",
    "drain_limited",
    "engine_refusal",
)


def flatten(value: object, prefix: str = "") -> list[tuple[str, str]]:
    """Dotted key paths and printable values: {'a': {'b': 1}} -> [('a.b', '1')]."""
    if isinstance(value, dict):
        if not value:
            return [(prefix, "{}")]
        rows: list[tuple[str, str]] = []
        for k, v in value.items():
            rows.extend(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return rows
    if isinstance(value, list):
        if all(not isinstance(v, dict | list) for v in value):
            shown = ", ".join(_scalar(v) for v in value[:MAX_LIST_ITEMS])
            more = f", … ({len(value)} items)" if len(value) > MAX_LIST_ITEMS else ""
            return [(prefix, f"[{shown}{more}]")]
        rows = []
        for i, v in enumerate(value[:MAX_LIST_ITEMS]):
            rows.extend(flatten(v, f"{prefix}[{i}]"))
        if len(value) > MAX_LIST_ITEMS:
            rows.append((f"{prefix}[…]", f"{len(value) - MAX_LIST_ITEMS} more items"))
        return rows
    return [(prefix, _scalar(value, prefix))]


def _scalar(v: object, key: str = "") -> str:
    if isinstance(v, str):
        return v
    if "bytes" in key.rsplit(".", 1)[-1] and isinstance(v, int | float) and not isinstance(v, bool):
        return f"{fmt_bytes(v)} ({v:.6g} B)" if v >= 1000 else f"{v:g} B"
    if isinstance(v, float):
        return f"{v:.6g}"
    return json.dumps(v)


def run_inputs(series: Series) -> dict:
    """What the run recorded about its inputs: the scenario block (all of it when summary.json carries it,
    else its name), the seed, and the model's recorded set-up."""
    model = series.summary
    return {
        "scenario": series.run.scenario,
        "seed": series.run.summary.get("seed"),
        "model": series.model,
        **{k: model[k] for k in MODEL_INPUT_KEYS if k in model},
    }


def scenario_panel(series: list[Series]) -> Panel:
    """One column per series; rows where they differ are marked, so a comparison shows what changed."""
    title = "Scenario inputs"
    tables = [dict(flatten(run_inputs(s))) for s in series]
    if not any(tables):
        return missing(title, "the scenario block of summary.json", wide=True)
    keys: list[str] = []
    for t in tables:
        keys.extend(k for k in t if k not in keys)
    head = "".join(f"<th>{html.escape(s.name)}</th>" for s in series)
    rows = []
    for k in keys:
        values = [t.get(k, "") for t in tables]
        mark = " ≠" if len(series) > 1 and len(set(values)) > 1 else ""
        cells = "".join(f"<td>{html.escape(v)}</td>" for v in values)
        rows.append(f'<tr><td class="key">{html.escape(k)}{mark}</td>{cells}</tr>')
    table = (
        f'<div class="scroll"><table class="data"><thead><tr><th>input</th>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )
    caption = "As recorded in each run's summary.json; ≠ marks inputs that differ between columns."
    if not any(isinstance(s.run.summary.get("scenario"), dict) for s in series):
        caption += (
            " This run records only the scenario's name: cluster, workload, cache, scheduler, SLO and "
            "pricing settings are not in summary.json (see the scenario file)."
        )
    return Panel(title, html=table, caption=caption, wide=True)
