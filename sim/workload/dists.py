"""Distributions for generator specs: what the YAML says, vectorised sampling, and quantile fits.

A distribution is exactly one of
- `constant: v`
- `lognormal: {median: m, sigma: s}`
- `quantiles: [v0, v1, ..., vk]`: values at evenly spaced probabilities 0, 1/k, ..., 1 (an
  empirical inverse CDF, interpolated in log(1 + v) so heavy tails stay heavy); what `fit` writes,
  with the data's `mean`: the last segment (up to the maximum, where one extreme value would
  otherwise stretch a log-uniform stretch of 1/k of the draws) is then shaped, v = lo + (hi - lo) t^k
  in log(1 + v) for t uniform in it, with k set so that the distribution's mean is `mean`
- `choice: {values: [...], weights: [...]}`
with optional `min` / `max` bounds applied after sampling. Values are >= 0 (token counts and
seconds).
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

STRICT = ConfigDict(extra="forbid", frozen=True)


class LogNormal(BaseModel):
    model_config = STRICT
    median: float = Field(gt=0)
    sigma: float = Field(ge=0)


class Choice(BaseModel):
    model_config = STRICT
    values: list[float] = Field(min_length=1)
    weights: list[float] | None = None

    @model_validator(mode="after")
    def _check(self) -> Choice:
        if self.weights is not None:
            if len(self.weights) != len(self.values):
                raise ValueError("weights must have one entry per value")
            if min(self.weights) < 0 or sum(self.weights) <= 0:
                raise ValueError("weights must be >= 0 with a positive sum")
        if min(self.values) < 0:
            raise ValueError("values must be >= 0")
        return self


class Dist(BaseModel):
    """One distribution of non-negative values (see the module docstring)."""

    model_config = STRICT
    constant: float | None = Field(default=None, ge=0)
    lognormal: LogNormal | None = None
    quantiles: list[float] | None = Field(default=None, min_length=2)
    choice: Choice | None = None
    mean: float | None = Field(default=None, ge=0)  # quantiles only: the mean to match (see above)
    min: float | None = Field(default=None, ge=0)
    max: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _exactly_one(self) -> Dist:
        given = [k for k in ("constant", "lognormal", "quantiles", "choice") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                f"give exactly one of constant, lognormal, quantiles, choice (got {given or 'none'})"
            )
        if self.quantiles is not None:
            q = np.asarray(self.quantiles)
            if (q < 0).any() or (np.diff(q) < 0).any():
                raise ValueError("quantiles must be >= 0 and non-decreasing")
        if self.mean is not None and self.quantiles is None:
            raise ValueError("mean is given only with quantiles")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError("min must be <= max")
        return self

    @property
    def tail_power(self) -> float:
        """The exponent k of the last quantile segment (1 = log-uniform; see the module docstring)."""
        if self.mean is None or self.quantiles is None:
            return 1.0
        return _tail_power(np.log1p(np.asarray(self.quantiles)), self.mean)

    def _levels(self, u: np.ndarray) -> np.ndarray:
        """log(1 + v) at probabilities u of a quantiles distribution."""
        levels = np.log1p(np.asarray(self.quantiles))
        probs = np.linspace(0.0, 1.0, len(levels))
        out = np.interp(u, probs, levels)
        k = self.tail_power
        if k != 1.0:
            last = u > probs[-2]
            t = (u[last] - probs[-2]) / (1.0 - probs[-2])
            out[last] = levels[-2] + (levels[-1] - levels[-2]) * t**k
        return out

    def _probability(self, level: np.ndarray) -> np.ndarray:
        """The inverse of `_levels`: the probability below log(1 + v) = level."""
        levels = np.log1p(np.asarray(self.quantiles))
        probs = np.linspace(0.0, 1.0, len(levels))
        out = np.interp(level, levels, probs)
        k = self.tail_power
        span = levels[-1] - levels[-2]
        if k != 1.0 and span > 0:
            last = level > levels[-2]
            t = np.clip((level[last] - levels[-2]) / span, 0.0, 1.0) ** (1.0 / k)
            out[last] = probs[-2] + t * (1.0 - probs[-2])
        return out

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """n draws as float64."""
        if self.lognormal is not None:
            return self._bound(self.lognormal.median * np.exp(self.lognormal.sigma * rng.standard_normal(n)))
        return self.from_uniform(rng.random(n))

    def from_uniform(self, u: np.ndarray) -> np.ndarray:
        """The inverse CDF at probabilities u (for correlated draws through a copula)."""
        u = np.asarray(u, dtype=np.float64)
        if self.constant is not None:
            out = np.full(len(u), self.constant)
        elif self.lognormal is not None:
            out = self.lognormal.median * np.exp(
                self.lognormal.sigma * _normal_ppf(np.clip(u, 1e-12, 1 - 1e-12))
            )
        elif self.quantiles is not None:
            out = np.expm1(self._levels(u))
        else:
            weights = np.asarray(
                self.choice.weights if self.choice.weights else [1.0] * len(self.choice.values)
            )
            edges = np.cumsum(weights) / weights.sum()
            out = np.asarray(self.choice.values)[
                np.minimum(np.searchsorted(edges, u, side="right"), len(edges) - 1)
            ]
        return self._bound(out)

    def _bound(self, out: np.ndarray) -> np.ndarray:
        if self.min is not None or self.max is not None:
            out = np.clip(
                out, self.min if self.min is not None else 0.0, self.max if self.max is not None else np.inf
            )
        return out

    def sample_at_least(self, rng: np.random.Generator, low: np.ndarray) -> np.ndarray:
        """One draw per entry of `low`, from the distribution conditioned on being >= low (exact
        for quantiles and lognormal by inverting the CDF above low; max(draw, low) otherwise)."""
        low = np.asarray(low, dtype=np.float64)
        u = rng.random(len(low))
        if self.quantiles is not None:
            floor = self._probability(np.log1p(np.maximum(low, 0)))
            out = np.expm1(self._levels(floor + u * (1 - floor)))
        elif self.lognormal is not None:
            z_low = np.log(np.maximum(low, 1e-300) / self.lognormal.median) / max(self.lognormal.sigma, 1e-12)
            floor = normal_cdf(z_low)
            z = _normal_ppf(np.clip(floor + u * (1 - floor), 1e-12, 1 - 1e-12))
            out = self.lognormal.median * np.exp(self.lognormal.sigma * z)
        else:
            out = self.from_uniform(u)
        if self.max is not None:
            out = np.minimum(out, self.max)
        return np.maximum(out, low)

    def counts(self, rng: np.random.Generator, n: int, low: int = 0) -> np.ndarray:
        """n draws rounded to integers >= low (token counts, numbers of turns)."""
        return np.maximum(np.rint(self.sample(rng, n)), low).astype(np.int64)


def normal_cdf(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.vectorize(math.erf)(np.asarray(z) / math.sqrt(2.0)))


# Acklam's rational approximation of the inverse normal CDF (relative error < 1.2e-9).
_A = (
    -3.969683028665376e01,
    2.209460984245205e02,
    -2.759285104469687e02,
    1.383577518672690e02,
    -3.066479806614716e01,
    2.506628277459239e00,
)
_B = (
    -5.447609879822406e01,
    1.615858368580409e02,
    -1.556989798598866e02,
    6.680131188771972e01,
    -1.328068155288572e01,
)
_C = (
    -7.784894002430293e-03,
    -3.223964580411365e-01,
    -2.400758277161838e00,
    -2.549732539343734e00,
    4.374664141464968e00,
    2.938163982698783e00,
)
_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)
_P_LOW = 0.02425


def _normal_ppf(p: np.ndarray) -> np.ndarray:
    """The inverse standard normal CDF for p in (0, 1) (no scipy here)."""
    p = np.asarray(p, dtype=np.float64)
    tail = np.minimum(p, 1 - p)
    q = np.sqrt(-2 * np.log(np.maximum(tail, 1e-300)))
    x_tail = np.polyval(_C, q) / np.polyval((*_D, 1.0), q)
    x_tail = np.where(p < 0.5, x_tail, -x_tail)
    r = (p - 0.5) ** 2
    x_mid = np.polyval(_A, r) * (p - 0.5) / np.polyval((*_B, 1.0), r)
    return np.where(tail < _P_LOW, x_tail, x_mid)


def _segment_mean(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Mean of expm1(level) for level uniform between a and b (elementwise)."""
    d = b - a
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.abs(d) > 1e-12, (np.exp(b) - np.exp(a)) / d, np.exp(a)) - 1.0


_TAIL_GRID = (np.arange(4096) + 0.5) / 4096  # midpoints for the shaped last segment's mean


def _tail_power(levels: np.ndarray, mean: float) -> float:
    """k in [1/64, 4096] such that the quantile distribution over `levels` has mean `mean` (the
    closest bound when none does); bisection in log k, deterministic."""
    m = len(levels) - 1
    body = float(_segment_mean(levels[:-2], levels[1:-1]).sum()) / m
    a, b = levels[-2], levels[-1]
    if b <= a:
        return 1.0

    def total(k: float) -> float:
        return body + float(np.mean(np.expm1(a + (b - a) * _TAIL_GRID**k))) / m

    lo, hi = math.log(1 / 64), math.log(4096.0)
    if total(math.exp(hi)) >= mean:
        return 4096.0
    if total(math.exp(lo)) <= mean:
        return 1 / 64
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if total(math.exp(mid)) > mean else (lo, mid)
    return round(math.exp(0.5 * (lo + hi)), 6)


def fit_quantiles(values: np.ndarray, points: int = 101, digits: int = 4) -> Dist | None:
    """An empirical distribution of `values` (None when there are none), rounded to `digits`
    significant digits so the YAML stays readable, with their mean (module docstring)."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if not len(values):
        return None
    q = np.quantile(np.maximum(values, 0), np.linspace(0, 1, points))
    q = np.maximum.accumulate(np.array([_round_sig(v, digits) for v in q]))
    if q[0] == q[-1]:
        return Dist(constant=float(q[0]))
    return Dist(quantiles=[float(v) for v in q], mean=_round_sig(float(np.maximum(values, 0).mean()), digits))


def _round_sig(value: float, digits: int) -> float:
    if value == 0:
        return 0.0
    return float(f"{value:.{digits}g}")
