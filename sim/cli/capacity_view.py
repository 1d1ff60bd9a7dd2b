"""The capacity views of `sim run`: first the capacity search's answer per model (sim.capacity), then,
at the scenario's own rate, load and headroom per pool, sessions per serving node at the SLO, and the
one-line warning when decode capacity sits mostly idle (definitions: sim.metrics.capacity)."""

from __future__ import annotations

from rich.table import Table

from sim.capacity.verdict import model_label
from sim.metrics.capacity import low_load_line


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def search_table(summary: dict) -> Table | None:
    """Per model, the highest load its SLO held at (measured) and what binds there; None when no model
    searched."""
    models = [m for m, s in summary["models"].items() if (s.get("capacity") or {}).get("search")]
    if not models:
        return None
    slo = summary["scenario"]["slo"]
    table = Table(title=f"Capacity: the highest load measured to hold the SLO (TTFT p99 <= "
                        f"{slo.get('ttft_p99_s') or slo['ttft_s']:g} s, TPOT p99 <= "
                        f"{(slo.get('tpot_p99_s') or slo['tpot_s']) * 1e3:g} ms, nothing rejected)")  # fmt: skip
    table.add_column("metric")
    for m in models:
        table.add_column(model_label(m), justify="right")
    caps = [summary["models"][m]["capacity"] for m in models]
    sessions = any(c.get("sessions_per_hour") is not None for c in caps)

    def row(label: str, cell) -> None:
        table.add_row(label, *[cell(c) for c in caps])

    if sessions:
        row("sustained sessions/h", lambda c: _fmt(c.get("sessions_per_hour"), ",d"))
        row("  per GPU", lambda c: _fmt(c.get("sessions_per_hour_per_gpu"), ".2f"))
    else:
        row("sustained concurrency", lambda c: _fmt(c.get("concurrency"), ",d"))
    row("output tokens/s per GPU", lambda c: _fmt(c.get("output_tokens_per_s_per_gpu"), ",.1f"))
    row(
        "TTFT p50 / p99 (s)",
        lambda c: f"{_fmt(c.get('ttft_p50_s'), '.2f')} / {_fmt(c.get('ttft_p99_s'), '.2f')}",
    )
    row(
        "TPOT p50 / p99 (ms)",
        lambda c: f"{_fmt(_ms(c.get('tpot_p50_s')), '.1f')} / {_fmt(_ms(c.get('tpot_p99_s')), '.1f')}",
    )
    row("SLO attainment", lambda c: _fmt(c.get("slo_attainment"), ".3f"))
    if sessions:
        row("cost per task ($, steady)", lambda c: _fmt(c.get("cost_per_task_usd"), ".4f"))
    row("binding limit", lambda c: c.get("binding_limit") or "-")
    row("SLO fails at", lambda c: _above(c.get("slo_fails_above")))
    row(
        "points run",
        lambda c: f"{c['search']['points_run']}" + ("" if c["search"]["converged"] else " (cap)"),
    )
    return table


def _ms(v):
    return None if v is None else v * 1e3


def _above(a) -> str:
    return "-" if not a else f"{a['load']:,}: {'; '.join(a['violations'])}"


def _pct(v) -> str:
    return "-" if v is None else f"{v:.0%}"


def capacity_table(summary: dict) -> Table:
    models = list(summary["models"])
    tpot_ms = summary["scenario"]["slo"]["tpot_s"] * 1e3
    table = Table(title=f"Capacity at the SLO (TPOT {tpot_ms:g} ms): load = busy share (prefill) or "
                        "decode batch / the batch the SLO allows (decode); headroom = 1 - load")  # fmt: skip
    for column in ("model", "pool", "role", "busy", "decode batch", "SLO batch", "load", "headroom"):
        table.add_column(column, justify="left" if column in ("model", "pool", "role") else "right")
    for m in models:
        cap = summary["models"][m].get("capacity") or {}
        for p in cap.get("pools", []):
            batch = "-" if p.get("decode_batch_mean") is None else f"{p['decode_batch_mean']:.1f}"
            table.add_row(m.removeprefix("deepseek-"), p["name"], p["role"], _pct(p.get("busy")), batch,
                          "-" if p.get("slo_batch") is None else str(p["slo_batch"]),
                          _pct(p.get("load")), _pct(p.get("headroom")))  # fmt: skip
    return table


def capacity_lines(summary: dict) -> list[str]:
    """Sessions per serving node now and at the SLO per model, then any low-load warning."""
    lines = []
    for m, s in summary["models"].items():
        cap = s.get("capacity") or {}
        now, at = (
            cap.get("sessions_in_progress_per_serving_node"),
            cap.get("sessions_per_serving_node_at_slo"),
        )
        if now is not None and at is not None:
            lines.append(
                f"{m}: {now:,.1f} sessions in progress per serving node; at most about {at:,.1f} at the SLO "
                "(extrapolated to the most-loaded pool reaching 100%; queueing binds earlier)"
            )
        elif now is not None:
            lines.append(
                f"{m}: {now:,.1f} sessions in progress per serving node already miss the p99 SLO: "
                "the cluster sustains fewer"
            )
        warning = low_load_line(cap)
        if warning:
            lines.append(f"{m}: {warning}")
    return lines
