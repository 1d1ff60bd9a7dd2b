"""The plan spec: strict, with one-line errors that name the field."""

import pytest
import yaml

from sim.errors import InputError
from sim.plan.spec import load_plan

BASE = {
    "name": "p",
    "template": "s.yaml",
    "seed": 1,
    "models": ["a"],
    "space": {"hw": {"x": {"hardware": "x"}}},
    "nodes": {"min": 1, "max": 4, "ratios": {"r": {"prefill": 1, "decode": 2}}},
    "constraints": {"ttft_p99_s": 10},
}


def _load(tmp_path, **changes):
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump({**BASE, **changes}))
    return load_plan(path)


def test_valid_plan_resolves_the_template_next_to_it(tmp_path):
    spec, template = _load(tmp_path)
    assert template == (tmp_path / "s.yaml").resolve()
    assert spec.nodes.ratios == {"r": {"prefill": 1.0, "decode": 2.0}}
    assert spec.constraints.min_completed_frac == 1.0
    assert spec.objective == "min_cost_per_task"


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"nodes": {"min": 5, "max": 4, "ratios": {"r": {"d": 1}}}}, "nodes.max: must be >= min"),
        ({"nodes": {"max": 4, "ratios": {"r": {"d": 0}}}}, "nodes.ratios.r.d: weight must be > 0"),
        ({"models": ["a", "a"]}, "models: a model is listed twice"),
        ({"space": {"hw": {}}}, "space.hw: needs at least one option"),
        ({"constraints": {"ttft_p99_ms": 10}}, "constraints.ttft_p99_ms"),
        ({"objective": "fastest"}, "objective: not one of the allowed values"),
        ({"sed": 1}, "sed: unknown key; did you mean 'seed'?"),
    ],
)
def test_bad_plans_fail_with_one_line_naming_the_field(tmp_path, changes, expected):
    with pytest.raises(InputError) as err:
        _load(tmp_path, **changes)
    assert expected in str(err.value)
    assert str(tmp_path / "plan.yaml") in str(err.value)


def test_constraints_name_every_violated_bound(tmp_path):
    spec, _ = _load(
        tmp_path, constraints={"ttft_p99_s": 2, "tpot_p99_s": 0.05, "min_slo_attainment_frac": 0.9}
    )
    ok = {
        "ttft_p99_s": 1.5,
        "tpot_p99_s": 0.05,
        "slo_attainment": 0.95,
        "requests_arrived": 10,
        "requests_completed": 10,
        "cost_per_task_usd": 0.1,
    }
    assert spec.constraints.violations(ok, 1.0) == []
    bad = {**ok, "ttft_p99_s": 2.5, "tpot_p99_s": None, "slo_attainment": 0.8, "requests_completed": 9}
    assert spec.constraints.violations(bad, 1.2) == [
        "ttft_p99_s 2.5 > 2.0",
        "tpot_p99_s None > 0.05",
        "slo_attainment 0.8 < 0.9",
        "completed fraction 0.9000 < 1.0",
        "steady load 1.200 > 1.0 (cannot keep up with the task arrivals)",
    ]
    assert spec.constraints.violations(ok, None) == [
        "steady load unknown > 1.0 (cannot keep up with the task arrivals)"
    ]
    unchecked = spec.constraints.model_copy(update={"max_steady_load": None})
    assert unchecked.violations(ok, None) == unchecked.violations(ok, 5.0) == []
