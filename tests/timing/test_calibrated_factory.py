"""`timing.model: auto` picks the calibrated timing where tables exist (H200) and, elsewhere, the
roofline at the efficiency measured on the H200; explicit choices are honoured or refused."""

from __future__ import annotations

import pytest

from sim.errors import InputError
from sim.hardware import load_hw
from sim.timing.calibrated import CalibratedTiming, measured_efficiency
from sim.timing.factory import available_timing_models, make_timing, resolve_timing_name
from sim.timing.roofline import RooflineTiming
from sim.timing.stacks import load_stack

K = 1024


def test_auto_is_calibrated_on_h200_and_roofline_elsewhere(h200_tables):
    assert "calibrated" in available_timing_models()
    assert resolve_timing_name("auto", load_hw("nvidia-h200-hgx8")) == "calibrated"
    for other in ("nvidia-b200-hgx8", "nvidia-gb200-nvl72", "nvidia-h100-hgx8", "amd-mi355x-ubb8"):
        assert resolve_timing_name("auto", load_hw(other)) == "roofline"


def test_calibrated_without_tables_is_refused(context, h200_tables):
    with pytest.raises(InputError, match="no calibrated tables for this hardware"):
        make_timing("calibrated", context(hardware="nvidia-b200-hgx8"))


@pytest.mark.parametrize("model", ["deepseek-v4-flash", "deepseek-v4.1-flash"])
def test_factory_builds_calibrated_for_h200(context, h200_tables, model):
    ctx = context(model)
    assert isinstance(make_timing("auto", ctx), CalibratedTiming)
    assert isinstance(make_timing("calibrated", ctx), CalibratedTiming)
    roof = make_timing("roofline", ctx)
    assert type(roof) is RooflineTiming and roof.eff == ctx.eff  # explicit roofline: the profile's fractions


def test_auto_elsewhere_is_the_roofline_at_the_measured_efficiency(context, h200_tables):
    ctx = context("deepseek-v4-flash", hardware="nvidia-b200-hgx8")
    auto = make_timing("auto", ctx)
    assert type(auto) is RooflineTiming
    # the fallback reads the H200 tables of the context's kernel stack (production by default)
    frac = measured_efficiency(ctx, load_stack("h200", ctx.kernels))
    assert 0.05 < frac["decode"] < 0.5 and 0.05 < frac["prefill"] < 0.5
    assert auto.eff.mfu_decode == pytest.approx(frac["decode"])
    assert auto.eff.hbm_bw_frac == pytest.approx(frac["decode"])
    assert auto.eff.mfu_prefill == pytest.approx(frac["prefill"])
    assert auto.eff.step_overhead_s == 0.0  # launch costs live in the measured efficiency
    plain = make_timing("roofline", ctx)
    a, b, _, _ = plain.decode_seq_terms(128 * K, 1)
    assert auto.step_s(64, a * 64, b * 64, ()) > plain.step_s(64, a * 64, b * 64, ())


@pytest.mark.parametrize("model", ["deepseek-v4-flash", "deepseek-v4.1-flash"])
def test_measured_efficiency_reproduces_calibrated_on_h200(context, h200_tables, model):
    """On the H200 itself the fallback roofline lands near the calibrated steps it was fitted to
    (geometric mean of the ratio 1 by construction; the spread is the roofline's shape)."""
    from dataclasses import replace

    ctx = context(model)
    frac = measured_efficiency(ctx, h200_tables)
    eff = replace(
        ctx.eff,
        mfu_decode=frac["decode"],
        hbm_bw_frac=frac["decode"],
        mfu_prefill=frac["prefill"],
        step_overhead_s=0.0,
    )
    fallback = RooflineTiming(ctx.arith, ctx.hw, ctx.par, eff)
    cal = make_timing("calibrated", ctx)
    for batch in (8, 64, 512):
        for context_tokens in (8 * K, 128 * K, 1024 * K):
            a, b, _, _ = fallback.decode_seq_terms(context_tokens, 1)
            c0, c1, _, _ = cal.decode_seq_terms(context_tokens, 1)
            ratio = fallback.step_s(batch, a * batch, b * batch, ()) / cal.step_s(
                batch, c0 * batch, c1 * batch, ()
            )
            assert 0.5 < ratio < 2.0, (batch, context_tokens, ratio)
