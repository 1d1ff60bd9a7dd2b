"""Session start times: a Poisson process whose rate follows a daily/weekly envelope.

The envelope is a piecewise-constant shape with mean 1 (parametric diurnal, or the summed rate of an
imported ServeGen envelope, repeated past its end); starts are drawn by inverting the cumulative
rate, so the whole horizon costs one sort of uniform numbers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sim.errors import InputError
from sim.units import DAY_S, HOUR_S

from .importers.servegen import aggregate_rate
from .io import file_format, open_parquet
from .schema import ENVELOPE_FORMAT_VERSION, ENVELOPE_SCHEMA
from .spec import DiurnalEnvelope, FileEnvelope

DIURNAL_STEP_S = 300.0  # resolution of the parametric shape
WEEKEND = (5, 6)  # Saturday, Sunday with 0 = Monday


def envelope_shape(
    envelope: DiurnalEnvelope | FileEnvelope, horizon_s: float, base: Path
) -> tuple[float, np.ndarray]:
    """(step_s, shape per step over the horizon), shape normalised to mean 1 over whole periods."""
    if isinstance(envelope, DiurnalEnvelope):
        step = DIURNAL_STEP_S
        period_steps = int(7 * DAY_S / step)
        t = (np.arange(period_steps) + 0.5) * step
        hour = (t % DAY_S) / HOUR_S
        weekday = ((t // DAY_S).astype(int) + envelope.start_weekday) % 7
        shape = 1.0 + envelope.amplitude * np.cos(2 * np.pi * (hour - envelope.peak_hour) / 24.0)
        shape *= np.where(np.isin(weekday, WEEKEND), envelope.weekend_factor, 1.0)
    else:
        step, shape = _file_shape(envelope, base)
    shape = shape / shape.mean()
    reps = int(np.ceil(horizon_s / step / len(shape))) + 1
    return step, np.tile(shape, reps)[: int(np.ceil(horizon_s / step))]


def read_envelope_table(path: str | Path) -> pa.Table:
    """An imported envelope file (`sim trace import servegen`), checked."""
    pf = open_parquet(path)
    if file_format(pf) != ENVELOPE_FORMAT_VERSION:
        raise InputError("not an arrival envelope (import one with `sim trace import servegen`)", file=str(path),
                         where="metadata format", value=file_format(pf), allowed=ENVELOPE_FORMAT_VERSION)  # fmt: skip
    try:
        return pq.read_table(path).select(ENVELOPE_SCHEMA.names).cast(ENVELOPE_SCHEMA)
    except (pa.ArrowException, KeyError) as err:
        raise InputError(
            f"envelope columns do not match {ENVELOPE_FORMAT_VERSION} ({err})", file=str(path)
        ) from None


def _file_shape(envelope: FileEnvelope, base: Path) -> tuple[float, np.ndarray]:
    path = Path(envelope.file) if Path(envelope.file).is_absolute() else base / envelope.file
    table = read_envelope_table(path)
    if envelope.select:
        table = table.filter(pc.starts_with(table.column("client"), envelope.select))
    if table.num_rows == 0:
        raise InputError(
            "no clients match", file=str(path), where="arrivals.envelope.select", value=envelope.select
        )
    starts, rate = aggregate_rate(table)
    step = float(np.median(table.column("window_s").to_numpy()))
    if rate.sum() <= 0:
        raise InputError(
            "the selected clients never send requests", file=str(path), where="arrivals.envelope.select"
        )
    # windows may be missing: place them on a regular grid
    grid = np.zeros(int(round((starts[-1] - starts[0]) / step)) + 1)
    grid[np.rint((starts - starts[0]) / step).astype(int)] = rate
    return step, grid


def session_starts(rng: np.random.Generator, sessions_per_s: float, step_s: float, shape: np.ndarray,
                   horizon_s: float) -> np.ndarray:  # fmt: skip
    """Sorted start times in [0, horizon_s) of a Poisson process with rate sessions_per_s * shape."""
    weights = shape * step_s * sessions_per_s
    edge = np.concatenate([[0.0], np.cumsum(weights)])
    total = edge[-1] - weights[-1] * (1 - (horizon_s - step_s * (len(shape) - 1)) / step_s)
    n = rng.poisson(total)
    u = np.sort(rng.random(n)) * total
    k = np.clip(np.searchsorted(edge, u, side="right") - 1, 0, len(shape) - 1)
    frac = (u - edge[k]) / np.where(weights[k] > 0, weights[k], 1.0)
    return np.minimum((k + frac) * step_s, np.nextafter(horizon_s, 0))
