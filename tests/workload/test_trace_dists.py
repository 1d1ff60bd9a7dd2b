"""Distributions of generator specs: sampling, conditioning and fitting."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from sim.workload.dists import Dist, _normal_ppf, fit_quantiles, normal_cdf


def test_quantile_table_reproduces_its_quantiles():
    rng = np.random.default_rng(0)
    values = rng.lognormal(5, 1.5, 20_000)
    dist = fit_quantiles(values)
    draws = dist.sample(np.random.default_rng(1), 200_000)
    for q in (0.1, 0.5, 0.9):
        assert np.quantile(draws, q) == pytest.approx(np.quantile(values, q), rel=0.03)


def test_lognormal_choice_constant_and_bounds():
    rng = np.random.default_rng(2)
    draws = Dist(lognormal={"median": 200, "sigma": 1.1}, max=1000).sample(rng, 100_000)
    assert np.median(draws) == pytest.approx(200, rel=0.02) and draws.max() == 1000
    assert set(Dist(choice={"values": [1, 5], "weights": [1, 0]}).sample(rng, 100)) == {1}
    assert (Dist(constant=3).counts(rng, 5) == 3).all()


def test_sample_at_least_is_conditioned_not_clipped():
    rng = np.random.default_rng(3)
    dist = Dist(lognormal={"median": 100, "sigma": 1.0})
    low = np.full(50_000, 300.0)
    draws = dist.sample_at_least(rng, low)
    assert draws.min() >= 300
    # the conditional median of a lognormal above 300 (= median 100 x e^1.0986): well above 300
    assert np.median(draws) == pytest.approx(
        100 * np.exp(_normal_ppf(np.array([(1 + normal_cdf(np.log(3.0))) / 2]))[0]), rel=0.03
    )
    table = fit_quantiles(rng.lognormal(4, 1, 10_000))
    assert table.sample_at_least(rng, np.full(1000, 200.0)).min() >= 200


def test_normal_ppf_inverts_the_cdf():
    p = np.array([1e-10, 0.001, 0.0243, 0.3, 0.5, 0.9, 0.9999])
    assert normal_cdf(_normal_ppf(p)) == pytest.approx(p, rel=1e-7)


def test_bad_distributions_are_rejected():
    with pytest.raises(ValidationError, match="exactly one"):
        Dist(constant=1, lognormal={"median": 1, "sigma": 1})
    with pytest.raises(ValidationError, match="non-decreasing"):
        Dist(quantiles=[3, 2])
    with pytest.raises(ValidationError, match="one entry per value"):
        Dist(choice={"values": [1, 2], "weights": [1]})
