"""`sim validate`: case files (clear messages for bad ones), the three operating points (a concurrency,
a floor pick, a TPOT target) and the JSON shape of a tiny case."""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sim.cli import app
from sim.paths import project_root
from sim.validate.cases import load_cases

TINY = project_root() / "tests" / "sweep" / "bench_tiny.yaml"


def write_case(folder: Path, **fields) -> Path:
    case = {
        "name": "tiny",
        "source": "a test fixture, 2026-12-03",
        "scenario": str(TINY),
        "model": "deepseek-v4-flash",
        "at": {"tpot_p50_ms": 16},
        "published": {"output_tokens_per_s_per_gpu": 100.0},
    }
    case.update(fields)
    case = {k: v for k, v in case.items() if v is not None}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{case.get('name', 'case')}.yaml"
    path.write_text(yaml.safe_dump(case))
    return path


def test_shipped_cases_load():
    cases = load_cases(project_root() / "scenarios" / "validation")
    names = {c.case.name for c in cases}
    assert {"v4-flash-4xh200-agg", "v4-flash-4xb200-agg", "v4-flash-24xb200-disagg"} <= names
    assert len(cases) >= 10
    assert len({c.scenario["hardware"] for c in cases}) >= 2
    for c in cases:  # every published point compares per-GPU and per-user speed, each with its setup
        assert c.case.source and c.case.setup
        assert {"output_tokens_per_s_per_gpu", "tokens_per_s_per_user"} <= set(c.case.published)


def test_validate_json_shape(tmp_path):
    write_case(tmp_path / "cases")
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["validate", "--cases", str(tmp_path / "cases"), "--json", "--out", str(out), "--workers", "2"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data == json.loads((out / "validate.json").read_text())
    (case,) = data["cases"]
    assert {"name", "published", "simulated", "error_frac"} <= set(case)
    assert case["name"] == "tiny" and case["published"] == {"output_tokens_per_s_per_gpu": 100.0}
    simulated = case["simulated"]["output_tokens_per_s_per_gpu"]
    if simulated is not None:
        assert case["error_frac"]["output_tokens_per_s_per_gpu"] == pytest.approx((simulated - 100.0) / 100.0)
    else:
        assert case["note"]
    assert (out / "validate.html").read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"published": {"speed": 1.0}}, "published: not a metric a case can compare: speed"),
        ({"published": None}, "published"),
        ({"published": {}}, "published"),
        ({"at": {"concurrency": 4, "tpot_p50_ms": 20}}, "at: 2 forms given (concurrency, tpot_p50_ms)"),
        (
            {"at": {"floor_pick": {"min_tokens_per_s_per_user": 50, "concurrencies": []}}},
            "at.floor_pick.concurrencies",
        ),
        ({"at": {"concurrency": 0}}, "at.concurrency"),
        ({"model": "deepseek-v4.1-flash"}, "model: not one of the scenario's models"),
        ({"scenario": "missing.yaml"}, "scenario: scenario file not found"),
        ({"at": {"tpot_p50_ms": -5}}, "at.tpot_p50_ms"),
        ({"scenario": {"name": "x"}}, "scenario"),
    ],
)
def test_bad_case_file_gives_one_clear_message(tmp_path, fields, message):
    path = write_case(tmp_path, **fields)
    result = CliRunner().invoke(app, ["validate", "--cases", str(tmp_path)])
    assert result.exit_code != 0
    text = str(result.exception)
    assert message in text and str(path.name) in text, text


def test_validate_needs_a_folder_of_cases(tmp_path):
    result = CliRunner().invoke(app, ["validate", "--cases", str(tmp_path)])
    assert "no case files" in str(result.exception)


def _run(tmp_path, **fields) -> dict:
    write_case(tmp_path / "cases", **fields)
    result = CliRunner().invoke(
        app, ["validate", "--cases", str(tmp_path / "cases"), "--json", "--workers", "2"]
    )
    assert result.exit_code == 0, result.output
    (case,) = json.loads(result.stdout)["cases"]
    return case


def test_at_concurrency_reads_every_published_metric_at_that_point(tmp_path):
    published = {"output_tokens_per_s_per_gpu": 100.0, "tokens_per_s_per_user": 50.0, "ttft_mean_s": 0.5}
    case = _run(tmp_path, at={"concurrency": 2}, published=published)
    (point,) = case["points"]
    assert point["concurrency"] == case["concurrency"] == 2 and case["note"] is None
    for metric, value in published.items():
        assert case["simulated"][metric] == point[metric] and case["simulated"][metric] is not None
        assert case["error_frac"][metric] == pytest.approx((point[metric] - value) / value)


def test_floor_pick_takes_the_best_point_that_clears_the_floor(tmp_path):
    # a floor every point clears picks the most tok/s/GPU; one no point clears gives a reason, no number
    case = _run(tmp_path, at={"floor_pick": {"min_tokens_per_s_per_user": 1.0, "concurrencies": [1, 4]}})
    best = max(case["points"], key=lambda p: p["output_tokens_per_s_per_gpu"])
    assert case["concurrency"] == best["concurrency"]
    assert case["simulated"]["output_tokens_per_s_per_gpu"] == best["output_tokens_per_s_per_gpu"]
    none = _run(
        tmp_path / "b", at={"floor_pick": {"min_tokens_per_s_per_user": 1e6, "concurrencies": [1, 4]}}
    )
    assert none["simulated"]["output_tokens_per_s_per_gpu"] is None and "clears" in none["note"]


def test_tpot_target_never_reached_reads_the_floor_pick(tmp_path):
    """A disaggregated cluster whose TPOT stays under the target at every load (its prefill pool
    saturates first) still gets a number: the best tok/s/GPU of the points run, with a note."""
    from types import SimpleNamespace

    from sim.validate.cases import load_case
    from sim.validate.runner import _read

    loaded = load_case(write_case(tmp_path, at={"tpot_p50_ms": 20}))
    tpot_s = {1: 0.008, 2: 0.009, 4: 0.010}
    gpu = {1: 50.0, 2: 90.0, 4: 80.0}  # past saturation throughput falls while TPOT stays low
    summaries = {c: {"tpot_p50_s": tpot_s[c], "output_tokens_per_s_per_gpu": gpu[c]} for c in tpot_s}
    fake = SimpleNamespace(
        summaries={"deepseek-v4-flash": summaries},
        models={"deepseek-v4-flash": {"points": [{"concurrency": c, "wall_s": 0.0} for c in gpu]}},
    )
    point, points, note = _read(loaded, lambda concurrencies, target_s: fake)
    assert point["concurrency"] == 2 and point["output_tokens_per_s_per_gpu"] == 90.0
    assert "stays under 20 ms" in note and "floor pick" in note and len(points) == 3
    summaries.update({c: {**summaries[c], "tpot_p50_s": 0.05} for c in summaries})  # over at the lowest
    point, _, note = _read(loaded, lambda concurrencies, target_s: fake)
    assert point is None and "over 20 ms already" in note


def test_a_fixed_prompt_count_is_timed_over_the_whole_run(tmp_path):
    """SGLang's bench_serving shape (sim.validate.cases): N prompts at concurrency C, the whole run timed
    from the first send to the last completion; the mean TPOT over requests can be compared too."""
    scenario = yaml.safe_load(TINY.read_text())
    scenario["workload"] = {**scenario["workload"], "warmup_s": 0, "max_requests": 12}
    del scenario["workload"]["horizon_s"]
    published = {"output_tokens_per_s_per_gpu": 100.0, "tokens_per_s_per_user": 50.0, "tpot_mean_s": 0.02}
    case = _run(tmp_path, scenario=scenario, at={"concurrency": 4}, published=published)
    (point,) = case["points"]
    assert point["requests_completed"] == 12 and point["requests_rejected"] == 0
    assert case["simulated"]["tokens_per_s_per_user"] == pytest.approx(1.0 / point["tpot_p50_s"])
    mean = case["simulated"]["tpot_mean_s"]
    assert mean is not None and mean != point["tpot_p50_s"]


def test_within_counts_cases_per_metric_and_on_both_speed_axes():
    from sim.validate.runner import CaseResult
    from sim.validate.summary import within_counts

    def case(name, **errors):
        published = dict.fromkeys(errors, 1.0)
        return CaseResult(name, "src", "m", {}, "", published, dict(errors), dict(errors), None, None)

    results = [
        case("a", output_tokens_per_s_per_gpu=0.10, tokens_per_s_per_user=-0.15),  # both within (edge)
        case("b", output_tokens_per_s_per_gpu=0.05, tokens_per_s_per_user=0.30),
        case("c", output_tokens_per_s_per_gpu=None, tokens_per_s_per_user=0.0),  # no number: not within
        case("d", ttft_p50_s=-0.5),  # publishes no speed metric: not in the speed count
    ]
    counts = within_counts(results, 0.15)
    assert counts["output_tokens_per_s_per_gpu"] == {"within": 2, "scored": 2}
    assert counts["tokens_per_s_per_user"] == {"within": 2, "scored": 3}
    assert counts["ttft_p50_s"] == {"within": 0, "scored": 1}
    assert counts["speed"] == {"within": 1, "scored": 3}
    assert within_counts(results, 0.5)["speed"] == {"within": 2, "scored": 3}


def test_group_errors_give_each_deployments_signed_and_absolute_medians():
    from sim.validate.runner import CaseResult
    from sim.validate.summary import ALL_CASES, group_errors

    def case(name, group, gpu, user):
        errors = {"output_tokens_per_s_per_gpu": gpu, "tokens_per_s_per_user": user}
        published = dict.fromkeys(errors, 1.0)
        return CaseResult(name, "src", "m", {}, "", published, dict(errors), errors, None, None, group=group)

    results = [
        case("a", "B200, sglang 0.5.15", 0.30, 0.40),
        case("b", "B200, sglang 0.5.15", 0.10, -0.20),
        case("c", "B200, sglang 0.5.15", -0.05, 0.02),
        case("d", "H200, vllm 0.28.1", None, -0.10),  # no throughput number: left out of that median only
        CaseResult("e", "src", "m", {}, "", {"ttft_p50_s": 1.0}, {"ttft_p50_s": 2.0}, {"ttft_p50_s": 1.0}, None,
                   None, group="H100, sglang 0.5.15"),  # publishes no speed: in no group
    ]  # fmt: skip
    b200, h200, every = group_errors(results, 0.15)
    assert (b200.group, b200.cases, b200.within) == ("B200, sglang 0.5.15", 3, 1)
    assert b200.median_error_frac["output_tokens_per_s_per_gpu"] == pytest.approx(0.10)
    assert b200.median_abs_error_frac["tokens_per_s_per_user"] == pytest.approx(0.20)
    assert b200.median_error_frac["tokens_per_s_per_user"] == pytest.approx(0.02)
    assert h200.median_error_frac["output_tokens_per_s_per_gpu"] is None and h200.within == 0
    assert (every.group, every.cases, every.within) == (ALL_CASES, 4, 1)
    assert every.median_abs_error_frac["output_tokens_per_s_per_gpu"] == pytest.approx(0.10)
    assert group_errors(results[4:], 0.15) == []
    assert every.to_json()["median_error_frac"] == every.median_error_frac


def test_each_shipped_case_names_the_gpus_and_engines_it_runs():
    cases = {c.case.name: c for c in load_cases(project_root() / "scenarios" / "validation")}
    assert cases["sglang-v4-flash-4xb200-balanced-c64"].group == "B200, sglang 0.5.15"
    assert cases["dynamo-v41-flash-8xh200-disagg"].group == "H200, vllm 0.28.1"
    assert cases["dynamo-v41-flash-8xgb200-agg"].group.startswith("GB200, vllm")
    assert all(c.group and ", " in c.group for c in cases.values())


def test_the_report_prints_the_error_by_deployment(tmp_path):
    published = {"output_tokens_per_s_per_gpu": 100.0, "tokens_per_s_per_user": 50.0}
    write_case(tmp_path / "cases", at={"concurrency": 4}, published=published)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["validate", "--cases", str(tmp_path / "cases"), "--workers", "2", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    group = load_cases(tmp_path / "cases")[0].group
    assert "error by deployment" in result.output and group in result.output
    data = json.loads((out / "validate.json").read_text())
    assert [g["group"] for g in data["groups"]] == [group, "all"]
    assert data["groups"][1]["cases"] == 1 and data["cases"][0]["group"] == group
    assert "By deployment" in (out / "validate.html").read_text()


def test_implied_throughput_is_the_closed_loops_from_the_medians():
    from sim.validate.consistency import consistency, implied_output_tokens_per_s_per_gpu

    # 16 clients, 4 GPUs, 513 output tokens: 0.5 s to the first token, 512 more at 128 tok/s = 4.5 s a request
    assert implied_output_tokens_per_s_per_gpu(16, 4, 513.0, 0.5, 128.0) == pytest.approx(16 * 513 / 4.5 / 4)
    assert implied_output_tokens_per_s_per_gpu(16, 4, 513.0, 0.5, 0.0) is None
    sim_side = {"output_tokens_per_s_per_gpu": 400.0, "tokens_per_s_per_user": 128.0, "ttft_p50_s": 0.5}
    # the same medians with 0.6 of the throughput: a stall neither median sees
    stalled = {**sim_side, "output_tokens_per_s_per_gpu": 240.0}
    c = consistency(16, 4, 513.0, stalled, sim_side)
    assert c.published_ratio == pytest.approx(0.6 * c.simulated_ratio) and c.gap_frac == pytest.approx(-0.4)
    assert consistency(16, 4, 513.0, {"output_tokens_per_s_per_gpu": 1.0}, sim_side) is None  # no medians


def test_validate_sets_each_published_point_beside_its_own_medians(tmp_path):
    """A case publishing sim's own figures reads no gap; the same medians at half the throughput read -50 % and
    the report names the case."""
    first = _run(tmp_path / "a", at={"concurrency": 4},
                 published={"output_tokens_per_s_per_gpu": 1.0, "tokens_per_s_per_user": 1.0, "ttft_p50_s": 1.0})  # fmt: skip
    (point,) = first["points"]
    assert point["mean_output_tokens"] > 1
    own = {k: point[k] for k in ("output_tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft_p50_s")}
    same = _run(tmp_path / "b", at={"concurrency": 4}, published=own)
    assert same["consistency"]["gap_frac"] == pytest.approx(0.0, abs=1e-9)
    half = {**own, "output_tokens_per_s_per_gpu": own["output_tokens_per_s_per_gpu"] / 2}
    write_case(tmp_path / "c", at={"concurrency": 4}, published=half)
    result = CliRunner().invoke(app, ["validate", "--cases", str(tmp_path / "c"), "--workers", "2"],
                                env={"COLUMNS": "300"})  # fmt: skip
    assert result.exit_code == 0, result.output
    words = " ".join(result.output.split())
    assert "tiny: its published tok/s/GPU is" in words and "(-50%)" in words
    assert "apart from sim's run by more than +-15%: 1 of 1 cases" in words
