"""Speculative-decoding acceptance from measurements (sim.model.acceptance): every point sourced and
possible, scenarios read it per drafter, draft length and workload kind, an unmeasured combination is
refused with what is measured, and `sim model show` prints the curve."""

import json

import pytest
import yaml
from typer.testing import CliRunner

from sim.cli import app
from sim.config.errors import validate_or_raise
from sim.config.families import family_names
from sim.config.timing import SpecDecode
from sim.errors import InputError
from sim.model.acceptance import WORKLOAD_KINDS, acceptance_points, curve, lookup
from sim.paths import project_root


def _scenario(**changes) -> dict:
    data = yaml.safe_load((project_root() / "tests" / "sweep" / "bench_tiny.yaml").read_text())
    return {**data, "models": ["deepseek-v4.1-flash"], **changes}


def test_every_point_is_sourced_and_possible():
    points = acceptance_points()
    assert points
    for p in points:
        assert p.family in family_names() and p.workload in WORKLOAD_KINDS and p.tag in ("A", "B", "D")
        assert p.source and p.measured_on
        assert 1.0 <= p.accepted <= p.draft_tokens + 1  # the bonus token plus at most every draft
    keys = [(p.family, p.drafter, p.draft_tokens, p.workload) for p in points]
    assert len(keys) == len(set(keys))  # one point per combination


def test_the_curves_the_families_default_to():
    assert lookup("v41", "dspark", 5, "coding").accepted == 3.51
    assert lookup("v41", "dspark", 5, "math").accepted == 2.82  # GSM8K accepts less than coding
    mtp = [p.accepted for p in curve("v4", "mtp") if p.workload == "coding"]
    assert len(mtp) == 8 and mtp[0] == 1.79 and max(mtp) < 2.6  # V4 MTP flattens past 3 draft tokens
    sd = SpecDecode.model_validate({"enabled": True})
    assert sd.choice("v4").accepted_tokens_per_step == 1.79
    choice = sd.choice("v41")
    assert choice.accepted_tokens_per_step == 3.51 and "InferenceX" in choice.acceptance_source
    # a number given overrides the measurement, and says so
    given = SpecDecode.model_validate(
        {"enabled": True, "v41": {"method": "dspark", "draft_tokens": 5, "accepted_tokens_per_step": 2.5}}
    )
    assert given.choice("v41").acceptance_source == "spec_decode.v41.accepted_tokens_per_step"
    sd3 = SpecDecode.model_validate({"enabled": True, "v4": {"method": "mtp", "draft_tokens": 3}})
    assert sd3.choice("v4").accepted_tokens_per_step == 2.49 and sd3.choice("v4").verify_rows == 4


def test_sglang_random_text_points_follow_one_per_position_rate():
    """V4 MTP on SGLang's `random` text (repeated_text) is derived, not measured: one per-position acceptance a,
    fitted to the V4 DSpark run on the same client (AL 4.84 at k = 5), gives every draft length."""
    pts = {p.draft_tokens: p for p in curve("v4", "mtp") if p.workload == "repeated_text"}
    assert sorted(pts) == [1, 2, 3, 4, 5] and all(p.tag == "D" and "#30964" in p.source for p in pts.values())

    def al(a: float, k: int) -> float:
        return sum(a**i for i in range(k + 1))

    lo, hi = 0.5, 1.0  # the rate that gives the k = 5 point, by bisection
    for _ in range(50):
        lo, hi = ((lo + hi) / 2, hi) if al((lo + hi) / 2, 5) < pts[5].accepted else (lo, (lo + hi) / 2)
    for k, p in pts.items():
        assert p.accepted == pytest.approx(al(lo, k), abs=0.01)
    assert pts[5].accepted == pytest.approx(4.84, abs=0.01)  # the measured DSpark point it is fitted to
    assert lookup("v41", "dspark", 5, "repeated_text").accepted == 4.84  # that point itself, V4.1's analog
    # the repeated question accepts more than coding with thinking off at 3 draft tokens, about the same at 1
    assert pts[3].accepted > lookup("v4", "mtp", 3, "coding_no_think").accepted + 0.4
    assert abs(pts[1].accepted - lookup("v4", "mtp", 1, "coding_no_think").accepted) < 0.05
    # the cookbook cells read it
    from sim.config.scenario import Scenario

    cell = project_root() / "scenarios" / "validation" / "sglang-v4-flash-4xb200-low-latency-c16.yaml"
    case = yaml.safe_load(cell.read_text())
    scn = validate_or_raise(Scenario, case["scenario"], file="case.yaml")
    assert scn.spec_decode.workload_kind == "repeated_text"
    assert scn.spec_decode.choice("v4").accepted_tokens_per_step == pts[3].accepted


def test_an_unmeasured_combination_is_refused_with_what_is_measured(tmp_path):
    from sim.config.scenario import Scenario

    data = _scenario(
        spec_decode={
            "enabled": True,
            "workload_kind": "prose",
            "v41": {"method": "dspark", "draft_tokens": 5},
        }
    )
    with pytest.raises(InputError) as err:
        validate_or_raise(Scenario, data, file="s.yaml", context={"base_dir": tmp_path})
    text = str(err.value)
    assert (
        "spec_decode.v41.draft_tokens: no measured acceptance for dspark with 5 draft tokens on prose" in text
    )
    assert "5/coding, 5/math" in text
    data = _scenario(spec_decode={"enabled": False, "workload_kind": "prose"})  # off: nothing to look up
    assert not validate_or_raise(
        Scenario, data, file="s.yaml", context={"base_dir": tmp_path}
    ).spec_decode.enabled


def test_model_show_prints_the_curve():
    result = CliRunner().invoke(app, ["model", "show", "deepseek-v4.1-flash"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "measured accepted tokens per verify step" in result.stdout and "3.51" in result.stdout
    data = json.loads(CliRunner().invoke(app, ["model", "show", "deepseek-v4-flash", "--json"]).stdout)
    assert {p["workload"] for p in data["acceptance"]} == {
        "coding",
        "coding_no_think",
        "prose",
        "repeated_text",
    }
    assert all(p["source"] for p in data["acceptance"])
    assert (
        json.loads(CliRunner().invoke(app, ["model", "show", "deepseek-v3.2", "--json"]).stdout)["acceptance"]
        == []
    )
