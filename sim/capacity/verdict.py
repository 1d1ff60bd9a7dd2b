"""The verdict line that leads `sim run` and `sim report`: each model's sustained load from its capacity
search (summary.json's `models.<m>.capacity`, sim.capacity.run)."""

from __future__ import annotations

from typing import Any


def model_label(model: str) -> str:
    """'deepseek-v4.1-flash' -> 'V4.1-Flash'."""
    name = model.removeprefix("deepseek-")
    return "-".join(part.upper() if part[:1] == "v" else part.capitalize() for part in name.split("-"))


def _usd(v: float | None) -> str:
    return "-" if v is None else f"${v:.3f}"


def verdict_line(summary: dict[str, Any]) -> str | None:
    """'V4.1-Flash sustains X sessions/h per GPU vs Y for V4-Flash (Rx), at $A vs $B per task; binding
    limit: ...' (the last model against the first; one model: its figures alone); for a benchmark, the
    concurrency each model sustains; None when no model sustains a load (search off, a trace, or the
    SLO failing at the lowest load tried)."""
    caps = {m: s.get("capacity") or {} for m, s in summary["models"].items()}
    rated = {m: c for m, c in caps.items() if c.get("sessions_per_hour_per_gpu") is not None}
    if not rated:
        return _concurrency_line(caps)
    models = list(caps)
    if len(models) == 1 or len(rated) < 2:
        m, c = next(iter(rated.items()))
        return (f"{model_label(m)} sustains {c['sessions_per_hour']:,} sessions/h "
                f"({c['sessions_per_hour_per_gpu']:.2f} per GPU) within the SLO, at "
                f"{_usd(c['cost_per_task_usd'])} per task; binding limit: {c['binding_limit']}")  # fmt: skip
    first, last = models[0], models[-1]
    a, b = caps[first], caps[last]
    ratio = b["sessions_per_hour_per_gpu"] / a["sessions_per_hour_per_gpu"]
    return (
        f"{model_label(last)} sustains {b['sessions_per_hour_per_gpu']:.2f} sessions/h per GPU vs "
        f"{a['sessions_per_hour_per_gpu']:.2f} for {model_label(first)} ({ratio:.2f}x), at "
        f"{_usd(b['cost_per_task_usd'])} vs {_usd(a['cost_per_task_usd'])} per task; binding limit: "
        f"{model_label(last)} {b['binding_limit']}, {model_label(first)} {a['binding_limit']}"
    )


def _concurrency_line(caps: dict[str, dict[str, Any]]) -> str | None:
    """'V4-Flash sustains concurrency 8 (120 output tok/s per GPU); binding limit: ...', per model."""
    parts = [
        f"{model_label(m)} sustains concurrency {c['concurrency']:,} ("
        f"{c['output_tokens_per_s_per_gpu'] or 0:,.1f} output tok/s per GPU); binding limit: {c['binding_limit']}"
        for m, c in caps.items()
        if c.get("concurrency") is not None
    ]
    return " | ".join(parts) or None
