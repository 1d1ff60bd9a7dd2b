"""Pricing formulas on hand-computed examples (hardware.md §3.3, §3.4) and the API price data."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.errors import InputError
from sim.hardware import (
    api_cost_usd,
    api_price_table,
    hours_per_year,
    load_api_prices,
    load_hw,
    node_cost,
    node_usd_per_hour,
)


def test_hours_per_year():
    assert hours_per_year() == 8760


def test_rental_is_gpu_price_times_gpus():
    hw = load_hw("nvidia-h200-hgx8")
    assert node_usd_per_hour(hw, "aws_on_demand") == pytest.approx(7.912 * 8)  # $63.296/instance-h, S44
    assert node_usd_per_hour(hw) == pytest.approx(63.296)  # default term
    gb200 = load_hw("nvidia-gb200-nvl72")
    assert node_usd_per_hour(gb200, "coreweave_on_demand") == pytest.approx(42.00)  # $42.00 per 4-GPU tray


def test_capex_hand_computed_h200():
    """8x H200 at $370k, 4 years, 10 %/yr support, 10.2 kW x PUE 1.3 x $0.0977/kWh."""
    hw = load_hw("nvidia-h200-hgx8")
    cost = node_cost(hw, "capex_4y")
    assert cost.amortization_usd_per_hour == pytest.approx(370000 / (4 * 8760))  # 10.559
    assert cost.amortization_usd_per_hour / 8 == pytest.approx(1.32, abs=0.005)  # hardware.md §3.3 table
    assert cost.support_usd_per_hour == pytest.approx(37000 / 8760)  # 4.224
    assert cost.energy_usd_per_hour == pytest.approx(10.2 * 1.3 * 0.0977)  # 1.2955
    assert cost.energy_usd_per_hour / 8 == pytest.approx(0.16, abs=0.005)  # hardware.md §3.4 table
    assert cost.total_usd_per_hour == pytest.approx(10.55936 + 4.22374 + 1.29550, abs=1e-4)
    no_energy = node_cost(hw, "capex_4y", include_energy=False)
    assert no_energy.energy_usd_per_hour == 0
    other = node_cost(hw, "capex_4y", energy_usd_per_kwh=0.08, pue=1.2)
    assert other.energy_usd_per_hour == pytest.approx(10.2 * 1.2 * 0.08)


def test_capex_rack_share_gb200():
    """GB200 NVL72: a tray is 4/72 of a $3.1M rack; 4 years -> $1.23/GPU-h (hardware.md §3.3)."""
    hw = load_hw("nvidia-gb200-nvl72")
    cost = node_cost(hw, "capex_4y")
    assert cost.amortization_usd_per_hour == pytest.approx(3.1e6 * 4 / 72 / (4 * 8760))
    assert cost.amortization_usd_per_hour / 4 == pytest.approx(1.23, abs=0.005)
    assert cost.energy_usd_per_hour / 4 == pytest.approx(0.21, abs=0.005)  # hardware.md §3.4, 120 kW / 72


def test_extras_are_amortised():
    hw = load_hw("nvidia-h200-hgx8")
    base = node_cost(hw, "capex_4y")
    more = node_cost(hw, "capex_4y", extra_dram_gb=1000, extra_ssd_tb=10)
    assert more.extras_usd_per_hour == pytest.approx((1000 * 11.0 + 10 * 300) / (4 * 8760))
    assert more.total_usd_per_hour - base.total_usd_per_hour == pytest.approx(more.extras_usd_per_hour)
    rent = node_cost(hw, "aws_on_demand", extra_dram_gb=1000, dram_usd_per_gb=5.0, extras_years=2)
    assert rent.extras_usd_per_hour == pytest.approx(5000 / (2 * 8760))


def test_unknown_term_lists_the_profiles_terms():
    hw = load_hw("nvidia-h200-hgx8")
    with pytest.raises(InputError) as err:
        node_usd_per_hour(hw, "aws_free_tier")
    assert "pricing.term: unknown pricing term for nvidia-h200-hgx8 (got 'aws_free_tier')" in str(err.value)
    assert "allowed: aws_on_demand, aws_savings_plan_3y" in str(err.value)
    assert "capex_4y" in str(err.value)


def test_profile_without_prices_says_so():
    with pytest.raises(InputError, match="amd-mi355x-ubb8 has no default pricing term"):
        node_usd_per_hour(load_hw("amd-mi355x-ubb8"))


@pytest.fixture(scope="module")
def b200():
    return load_hw("nvidia-b200-hgx8")


@given(price=st.floats(1e4, 1e7), years=st.integers(1, 10))
def test_capex_amortisation_is_linear_in_price(b200, price, years):
    hw = b200
    capex = hw.pricing.capex["capex_4y"]
    term = capex.model_copy(update={"purchase_usd": capex.purchase_usd.model_copy(update={"value": price}),
                                    "amortization_years": years})  # fmt: skip
    hw2 = hw.model_copy(update={"pricing": hw.pricing.model_copy(update={"capex": {"capex_4y": term}})})
    cost = node_cost(hw2, "capex_4y", include_energy=False)
    assert cost.total_usd_per_hour == pytest.approx(price / (years * 8760))


def test_api_prices_match_hardware_md_section_4():
    rows = {(r.family, r.tier): r for r in api_price_table()}
    v41 = rows[("v41", "peak")]
    assert (v41.cache_hit_usd_per_mtok, v41.cache_miss_usd_per_mtok, v41.output_usd_per_mtok) == (
        0.006,
        0.30,
        1.20,
    )
    off = rows[("v41", "off_peak")]
    assert (off.cache_hit_usd_per_mtok, off.cache_miss_usd_per_mtok, off.output_usd_per_mtok) == (
        0.003,
        0.15,
        0.60,
    )
    v4 = rows[("v4", "peak")]
    assert (v4.cache_hit_usd_per_mtok, v4.cache_miss_usd_per_mtok, v4.output_usd_per_mtok) == (
        0.014,
        0.44,
        1.32,
    )
    book = load_api_prices()
    assert len(book.periods) == 4
    # 1M hits + 1M misses + 1M output on V4.1-Flash at peak: 0.006 + 0.30 + 1.20
    assert api_cost_usd(book.latest("v41").peak, cache_hit_tokens=1e6, cache_miss_tokens=1e6,
                        output_tokens=1e6) == pytest.approx(1.506)  # fmt: skip
