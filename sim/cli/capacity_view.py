"""The capacity lines of `sim run`: load and headroom per pool, sessions per serving node at the SLO,
and the one-line warning when decode capacity sits mostly idle (definitions: sim.metrics.capacity)."""

from __future__ import annotations

from rich.table import Table

from sim.metrics.capacity import low_load_line


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
