"""The capacity section leads the page when the run searched (summary `models.<m>.capacity.search`)."""

import json

from report_synth import V4, V41, write_run

from sim.report.build import build_page, sections_for
from sim.report.rundata import load_run


def _point(load: int, holds: bool, ttft_p99_s: float) -> dict:
    return {"load": load, "slo_holds": holds, "violations": [] if holds else [f"TTFT p99 {ttft_p99_s} s > 10 s"],
            "ttft_p99_s": ttft_p99_s, "tpot_p99_s": 0.03, "slo_attainment": 0.99 if holds else 0.9,
            "busiest": {"pool": "prefill", "limit": "prefill_busy", "share": load / 1000}}  # fmt: skip


def _with_search(path, sustained: dict[str, int]):
    summary = json.loads((path / "summary.json").read_text())
    for model, rate in sustained.items():
        points = [_point(rate // 2, True, 3.0), _point(rate, True, 9.0), _point(rate + 20, False, 12.0)]
        summary["models"][model].setdefault("capacity", {}).update(
            search={"load": "sessions_per_hour", "points": points, "points_run": 3, "converged": True},
            sessions_per_hour=rate, sessions_per_hour_per_gpu=rate / 24, cost_per_task_usd=190.0 / rate,
            binding_limit="prefill busy (prefill pool 85%)", ttft_p99_s=9.0,
        )  # fmt: skip
    (path / "summary.json").write_text(json.dumps(summary))
    return load_run(path)


def test_the_capacity_verdict_and_chart_come_first(tmp_path):
    run = _with_search(write_run(tmp_path / "run", n_requests=300), {V4: 900, V41: 1200})
    sections = sections_for([run])
    assert [s.title for s in sections[:2]] == ["Capacity at the SLO", "At the scenario's own load"]
    verdict, chart = sections[0].panels
    assert "sustains 50.00 sessions/h per GPU vs 37.50 for V4-Flash (1.33x)" in verdict.html
    assert "$0.158 vs $0.211 per task" in verdict.html
    stars = [t for t in chart.figure.data if t.name and t.name.endswith("sustained")]
    assert len(stars) == 6  # each model's sustained point on each of the three plots
    assert sorted({t.x[0] for t in stars}) == [900, 1200]
    page, _ = build_page([run])
    assert page.index("sustains 50.00") < page.index(f'id="{sections[1].anchor}"')


def test_a_run_without_a_search_keeps_its_summary_first(tmp_path):
    run = load_run(write_run(tmp_path / "run", n_requests=300))
    assert sections_for([run])[0].title == "Summary"
