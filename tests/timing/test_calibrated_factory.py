"""`timing.model: auto` picks the calibrated timing wherever the H200 tables exist (measured on
the GPU, or carried to it); explicit choices are honoured or refused."""

from __future__ import annotations

import pytest

from sim.errors import InputError
from sim.hardware import load_hw
from sim.paths import hwprofiles_dir
from sim.timing.calibrated import CalibratedTiming
from sim.timing.factory import available_timing_models, make_timing, resolve_timing_name
from sim.timing.roofline import RooflineTiming

K = 1024


def test_auto_is_calibrated_everywhere_the_h200_tables_exist(h200_tables):
    assert "calibrated" in available_timing_models()
    for hw in (
        "nvidia-h200-hgx8",
        "nvidia-b200-hgx8",
        "nvidia-gb200-nvl72",
        "nvidia-h100-hgx8",
        "amd-mi355x-ubb8",
    ):
        assert resolve_timing_name("auto", load_hw(hw)) == "calibrated"


def test_without_any_tables_auto_is_the_roofline_and_calibrated_is_refused(context, tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / "hwprofiles").mkdir(parents=True)
    for profile in hwprofiles_dir().glob("*.yaml"):
        (home / "hwprofiles" / profile.name).write_text(profile.read_text())
    monkeypatch.setenv("SIM_HOME", str(home))
    assert resolve_timing_name("auto", load_hw("nvidia-b200-hgx8")) == "roofline"
    with pytest.raises(InputError, match="no calibrated tables for this hardware"):
        make_timing("calibrated", context(hardware="nvidia-b200-hgx8"))


@pytest.mark.parametrize("model", ["deepseek-v4-flash", "deepseek-v4.1-flash"])
def test_factory_builds_calibrated_for_h200(context, h200_tables, model):
    ctx = context(model)
    assert isinstance(make_timing("auto", ctx), CalibratedTiming)
    assert isinstance(make_timing("calibrated", ctx), CalibratedTiming)
    roof = make_timing("roofline", ctx)
    assert type(roof) is RooflineTiming and roof.eff == ctx.eff  # explicit roofline: the profile's fractions


def test_auto_elsewhere_is_calibrated_on_carried_tables(context, h200_tables):
    """No single efficiency fraction any more: B200 gets the H200 kernels carried to it."""
    auto = make_timing("auto", context("deepseek-v4-flash", hardware="nvidia-b200-hgx8"))
    assert isinstance(auto, CalibratedTiming)
    assert all(r.package.startswith("carried from h200") for r in auto.tables.rows)
    h200 = make_timing("auto", context("deepseek-v4-flash"))
    for batch in (8, 64, 512):
        terms = auto.decode_seq_terms(128 * K, 1).scaled(batch)
        assert auto.step_s(batch, terms, ()) < h200.step_s(batch, terms, ())


def test_auto_for_a_model_without_tables_is_the_roofline(h200_tables):
    for hw in ("nvidia-h200-hgx8", "nvidia-b200-hgx8"):
        assert resolve_timing_name("auto", load_hw(hw), "deepseek-llm-67b") == "roofline"
        assert resolve_timing_name("auto", load_hw(hw), "deepseek-v4-flash") == "calibrated"
