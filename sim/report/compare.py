"""Which series is the newer model and which its predecessor (V4.1 and V4), and their ratio: the pairing
every headline number uses. Which family succeeds which is the family registry's (sim.config.families)."""

from __future__ import annotations

from dataclasses import dataclass

from sim.config.families import FAMILIES, family, model_family
from sim.errors import InputError
from sim.report.series import Series


@dataclass(frozen=True)
class Pair:
    """A series of a family and one of its predecessor: ratios read new / old."""

    new: Series
    old: Series
    new_label: str  # the families' short names: "V4.1"
    old_label: str  # "V4"

    @property
    def label(self) -> str:
        """'V4.1 / V4': how the page heads the ratio."""
        return f"{self.new_label} / {self.old_label}"


def series_family(s: Series) -> str | None:
    """The family key the run recorded for the model, else the one its name maps to; None when neither."""
    recorded = s.summary.get("family")
    if isinstance(recorded, str):
        return recorded
    try:
        return model_family(s.model)
    except InputError:
        return None


def _pairs_in(series: list[Series]) -> list[Pair]:
    """One pair per (family, predecessor) of which `series` holds exactly one of each."""
    pairs = []
    for f in FAMILIES:
        if f.predecessor is None:
            continue
        new = [s for s in series if series_family(s) == f.key]
        old = [s for s in series if series_family(s) == f.predecessor]
        if len(new) == 1 and len(old) == 1:
            pairs.append(Pair(new[0], old[0], f.label, family(f.predecessor).label))
    return pairs


def successor_pairs(series: list[Series]) -> list[Pair]:
    """(new, old) pairs: within each run that has one of each; failing that, across the page when it holds
    exactly one of each (e.g. `sim compare v4_run v41_run`)."""
    pairs = [
        p
        for i in sorted({s.run_index for s in series})
        for p in _pairs_in([s for s in series if s.run_index == i])
    ]
    return pairs or _pairs_in(series)


def ratio(new: float | None, old: float | None) -> float | None:
    if new is None or old is None or old == 0 or new != new or old != old:
        return None
    return new / old
