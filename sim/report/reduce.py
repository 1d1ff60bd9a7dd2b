"""Data reduction for the page: a multi-week run has millions of rows, a chart needs a few thousand points.

Every helper here is a pure numpy function. Time series are reduced onto a fixed grid of buckets
(mean, min and max per bucket, so peaks survive the reduction); latency distributions are reduced to
quantiles; token rates are integrated exactly over each bucket.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_POINTS_PER_TRACE = 2000  # hard cap on the points of any trace
TIME_BUCKETS = 500  # target buckets of a time chart: two weeks in 1-h buckets, six hours in 1-min ones
CDF_POINTS = 1200  # quantiles per CDF curve, denser in the tail (p99, p99.9 stay visible)


@dataclass(frozen=True)
class Buckets:
    """Per-bucket statistics of a level (queue length, bytes held) on a shared time grid."""

    centers_s: np.ndarray
    mean: np.ndarray
    lo: np.ndarray
    hi: np.ndarray


# Bucket widths a reader can name ("15-min averages"), in seconds.
NICE_BUCKETS_S = (1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 3 * 3600.0, 6 * 3600.0, 86400.0)


def time_grid(t_start_s: float, t_end_s: float, max_points: int = MAX_POINTS_PER_TRACE) -> np.ndarray:
    """Bucket edges covering [t_start_s, t_end_s]: the smallest nice width that needs at most
    `max_points` buckets, edges on multiples of that width."""
    if not (np.isfinite(t_start_s) and np.isfinite(t_end_s)) or t_end_s <= t_start_s:
        t_start_s, t_end_s = 0.0, 1.0
    for width in NICE_BUCKETS_S:
        first = np.floor(t_start_s / width) * width
        n = max(1, int(np.ceil((t_end_s - first) / width)))
        if n <= max_points:
            return first + width * np.arange(n + 1)
    return np.linspace(t_start_s, t_end_s, max_points + 1)


def bucket_levels(t_s: np.ndarray, y: np.ndarray, edges_s: np.ndarray) -> Buckets:
    """Mean, min and max of samples `y` taken at `t_s`, per bucket of `edges_s`.

    Empty buckets are dropped (they carry no sample, and a gap is better than an invented zero);
    non-finite samples are ignored.
    """
    t_s = np.asarray(t_s, dtype=float)
    y = np.asarray(y, dtype=float)
    ok = np.isfinite(t_s) & np.isfinite(y)  # a NaN sample means "not measured", not zero
    t_s, y = t_s[ok], y[ok]
    nb = len(edges_s) - 1
    idx = np.clip(np.searchsorted(edges_s, t_s, side="right") - 1, 0, nb - 1)
    count = np.bincount(idx, minlength=nb)
    total = np.bincount(idx, weights=y, minlength=nb)
    lo = np.full(nb, np.inf)
    hi = np.full(nb, -np.inf)
    np.minimum.at(lo, idx, y)
    np.maximum.at(hi, idx, y)
    keep = count > 0
    centers = 0.5 * (edges_s[:-1] + edges_s[1:])
    return Buckets(centers[keep], total[keep] / count[keep], lo[keep], hi[keep])


def summed_levels(parts: list[tuple[np.ndarray, np.ndarray]], edges_s: np.ndarray) -> Buckets | None:
    """Sum of several sampled levels (e.g. the queues of every pool of a model) on one grid.

    Each part is bucketed on its own first, so parts sampled at different instants still add up;
    only buckets where every part has a sample are kept.
    """
    if not parts:
        return None
    nb = len(edges_s) - 1
    centers = 0.5 * (edges_s[:-1] + edges_s[1:])
    mean = np.zeros(nb)
    lo = np.zeros(nb)
    hi = np.zeros(nb)
    keep = np.ones(nb, dtype=bool)
    for t_s, y in parts:
        b = bucket_levels(t_s, y, edges_s)
        present = np.isin(centers, b.centers_s)
        keep &= present
        mean[present] += b.mean
        lo[present] += b.lo
        hi[present] += b.hi
    return Buckets(centers[keep], mean[keep], lo[keep], hi[keep])


def spread_amounts(
    start_s: np.ndarray, end_s: np.ndarray, amount: np.ndarray, edges_s: np.ndarray
) -> np.ndarray:
    """Amount produced in each bucket when each `amount` is produced evenly over [start_s, end_s].

    Used for output tokens (decoded between first token and finish): the result is exact for that
    assumption, so a 40 s decode straddling two one-minute buckets is split between them instead of
    landing as a spike in one. Instants (and intervals under 1/1000 of a bucket) count in the bucket
    holding their start.
    """
    start_s = np.asarray(start_s, dtype=float)
    end_s = np.maximum(np.asarray(end_s, dtype=float), start_s)
    amount = np.asarray(amount, dtype=float)
    widths = np.diff(edges_s)
    dur = end_s - start_s
    # Intervals far shorter than a bucket count as instants: their rate would be huge and the prefix
    # sums below would lose it to cancellation.
    inst = dur <= 1e-3 * widths.min()
    # Cumulative produced by time t: F(t) = sum_i r_i * (clip(t, a_i, b_i) - a_i), from sorted prefix sums.
    rate = np.where(inst, 0.0, amount / np.where(inst, 1.0, dur))
    cum = np.zeros(len(edges_s))
    for points, sign in ((start_s, 1.0), (end_s, -1.0)):
        order = np.argsort(points, kind="stable")
        p = points[order]
        r = rate[order]
        c_r = np.concatenate([[0.0], np.cumsum(r)])
        c_rp = np.concatenate([[0.0], np.cumsum(r * p)])
        k = np.searchsorted(p, edges_s, side="right")
        cum += sign * (c_r[k] * edges_s - c_rp[k])
    produced = np.diff(cum)
    if inst.any():
        idx = np.clip(np.searchsorted(edges_s, start_s[inst], side="right") - 1, 0, len(widths) - 1)
        produced += np.bincount(idx, weights=amount[inst], minlength=len(widths))
    return produced


def cdf_points(values: np.ndarray, n_points: int = CDF_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(value, cumulative fraction) pairs of an empirical CDF, from at most `n_points` quantiles.

    Probabilities are spaced evenly up to 0.9 and logarithmically above, so the tail keeps as much
    detail as the body. NaN values (e.g. TPOT of a one-token answer) are ignored.
    """
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return np.empty(0), np.empty(0)
    body = np.linspace(0.0, 0.9, n_points // 2, endpoint=False)
    tail = 1.0 - np.logspace(-1, -5, n_points - n_points // 2)
    probs = np.unique(np.clip(np.concatenate([body, tail, [1.0]]), 0.0, 1.0))
    if v.size < probs.size:
        xs = np.sort(v)
        return xs, np.arange(1, v.size + 1) / v.size
    return np.quantile(v, probs, method="inverted_cdf"), probs
