"""Which series is V4.1 and which is V4, and their ratio: the pairing every headline number uses."""

from __future__ import annotations

from sim.config.families import model_family
from sim.errors import InputError
from sim.report.series import Series


def family(s: Series) -> str | None:
    """'v41', 'v4' or None: the family the run recorded for the model, else the one its name maps to."""
    recorded = s.summary.get("family")
    if isinstance(recorded, str):
        return recorded
    try:
        return model_family(s.model)
    except InputError:
        return None


def v41_v4_pairs(series: list[Series]) -> list[tuple[Series, Series]]:
    """(V4.1 series, V4 series) pairs: within each run that has one of each; failing that, across the page
    when it holds exactly one of each (e.g. `sim compare v4_run v41_run`)."""
    pairs = []
    for run_index in sorted({s.run_index for s in series}):
        in_run = [s for s in series if s.run_index == run_index]
        new = [s for s in in_run if family(s) == "v41"]
        old = [s for s in in_run if family(s) == "v4"]
        if len(new) == 1 and len(old) == 1:
            pairs.append((new[0], old[0]))
    if not pairs:
        new = [s for s in series if family(s) == "v41"]
        old = [s for s in series if family(s) == "v4"]
        if len(new) == 1 and len(old) == 1:
            pairs.append((new[0], old[0]))
    return pairs


def ratio(new: float | None, old: float | None) -> float | None:
    if new is None or old is None or old == 0 or new != new or old != old:
        return None
    return new / old
