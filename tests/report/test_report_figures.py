"""Figure builders on synthetic run folders written with the simulator's schemas (report_synth)."""

import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from report_synth import V4, V41, write_run

from sim.errors import InputError
from sim.report import cost, headline, kvtiers, latency, timeaxis, timeseries
from sim.report.build import build_page, sections_for, unique_labels
from sim.report.compare import successor_pairs
from sim.report.inputs import flatten
from sim.report.page import figures_of
from sim.report.reduce import MAX_POINTS_PER_TRACE
from sim.report.rundata import load_run
from sim.report.series import build_series
from sim.report.theme import fit_legend, new_figure


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return load_run(write_run(tmp_path_factory.mktemp("runs") / "both"))


@pytest.fixture(scope="module")
def v41_only(tmp_path_factory):
    return load_run(
        write_run(tmp_path_factory.mktemp("runs") / "v41_only", models=(V41,), seed=1, n_requests=500)
    )


@pytest.fixture(scope="module")
def sections2(run, v41_only):
    return sections_for([run, v41_only])


@pytest.fixture(scope="module")
def page2(run, v41_only):
    """The comparison page of both runs, built once for the tests that only read it."""
    return build_page([run, v41_only])


def test_load_run_reads_the_run_layout(run):
    assert run.models == [V4, V41]
    assert set(run.requests) == {V4, V41}
    assert set(run.pools["pool"]) == {"prefill", "decode"}
    assert set(run.cluster["model"]) == {V4, V41}
    assert "hbm_kv_bytes" in run.cluster and "queue_len" in run.pools


def test_load_run_rejects_a_folder_without_summary(tmp_path):
    with pytest.raises(InputError, match="summary.json is missing"):
        load_run(tmp_path)
    (tmp_path / "summary.json").write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        load_run(tmp_path)


def test_a_model_keeps_its_colour_across_runs_and_runs_differ_by_dash(run, v41_only):
    series = build_series([run, v41_only])
    v41 = [s for s in series if s.model == V41]
    assert len({s.color for s in v41}) == 1
    assert len({s.dash for s in v41}) == 2
    assert {s.name for s in series} == {f"both · {V4}", f"both · {V41}", f"v41_only · {V41}"}
    assert build_series([run])[0].name == V4  # one run: no run label in names


def test_pairs_v41_with_v4_within_a_run_then_across_runs(run, v41_only, tmp_path):
    pairs = successor_pairs(build_series([run, v41_only]))
    assert [(p.new.name, p.old.name, p.label) for p in pairs] == [
        (f"both · {V41}", f"both · {V4}", "V4.1 / V4")
    ]
    v4_only = load_run(write_run(tmp_path / "v4_only", models=(V4,), n_requests=300))
    pairs = successor_pairs(build_series([v4_only, v41_only]))
    assert [(p.new.model, p.old.model) for p in pairs] == [(V41, V4)]


def test_latency_cdfs_end_at_the_worst_measured_request(run):
    series = build_series([run])
    panels = latency.latency_panels(series)
    assert [p.figure is not None for p in panels] == [True, True, True]
    ttft = panels[0].figure
    for s, trace in zip(series, ttft.data, strict=True):
        measured = run.measured_values(s.model, "ttft_s")
        assert trace.x[-1] == pytest.approx(measured.max())
        assert trace.y[-1] == pytest.approx(100.0)
        assert trace.line.color == s.color


def test_task_latency_is_first_arrival_to_last_finish_of_complete_tasks():
    df = pd.DataFrame(
        dict(session_id=[1, 1, 2, 2, 3], completed=[True, True, True, False, True],
             measured=[True, True, True, True, False], arrival_s=[0.0, 5.0, 1.0, 2.0, 0.0],
             finish_s=[3.0, 9.0, 4.0, 2.0, 1.0])
    )  # fmt: skip
    # task 2 has a rejected request, task 3 began in the warm-up: only task 1 counts
    assert list(latency.task_latencies_s(df)) == [9.0]


def test_throughput_integrates_to_the_output_tokens_of_completed_requests(run):
    series = build_series([run])
    axis = timeaxis.time_axis([run])
    fig = timeseries.throughput_panel(series, axis).figure
    for s, trace in zip(series, fig.data, strict=True):
        done = run.requests[s.model].query("completed")
        assert np.nansum(trace.y * axis.covered_s()) == pytest.approx(done["output_tokens"].sum(), rel=1e-9)


def test_every_trace_of_the_page_is_capped(sections2):
    for fig in figures_of(sections2):  # two runs: more traces than any one-run page
        for trace in fig.data:
            for dim in ("x", "y"):
                values = getattr(trace, dim, None)
                assert values is None or len(values) <= MAX_POINTS_PER_TRACE


def test_kv_tiers_show_capacity_and_the_v41_swa_pool(run):
    series = build_series([run])
    fig = kvtiers.kv_bytes_panel(series, timeaxis.time_axis([run])).figure
    titles = [fig.layout[f"yaxis{i or ''}"].title.text for i in range(5)]
    assert "V4.1 SWA pool (bytes)" in titles
    caps = [t for t in fig.data if t.name and t.name.endswith("capacity")]
    assert {t.name for t in caps} == {f"{V4} capacity", f"{V41} capacity"}
    hbm_cap = [t for t in caps if t.xaxis == "x" and t.name == f"{V4} capacity"][0]
    assert hbm_cap.y[0] == pytest.approx(800e9)  # two pools x 400 GB


def test_hit_breakdown_is_summary_hit_rates_and_adds_up_to_100(run):
    series = build_series([run])
    fig = kvtiers.hit_breakdown_panel(series).figure
    totals = np.sum([t.x for t in fig.data], axis=0)
    np.testing.assert_allclose(totals, 100.0)
    hbm = [t for t in fig.data if t.name == "HBM"][0]
    assert hbm.x[0] == pytest.approx(100 * run.model_summary(V4)["hit_rate_hbm"])


def test_cards_show_values_and_the_v41_over_v4_ratio(run):
    html = headline.cards_html(build_series([run]))
    assert "Cost per task" in html and "$5.33" in html and "$3.33" in html
    assert "V4.1 / V4: 0.63×" in html and "37 % lower" in html


def test_verdict_names_the_cheaper_model_how_much_and_why(run):
    (verdict, _cards) = headline.headline_panels(build_series([run]))
    text = re.sub("<[^>]+>", "", verdict.html)
    assert f"{V41} is cheaper per task: $3.33 vs $5.33 for {V4}, 37 % less" in text
    assert "KV cache per token: 890 B vs 3,514 B (3.9× smaller for V4.1)" in text
    assert "DeepSeek API would bill $2.50 vs $4.00 per task" in text


def test_cost_per_task_against_the_api_bill(run):
    fig = cost.per_task_panel(build_series([run])).figure
    assert [list(t.y) for t in fig.data] == [[400 / 75, 4.0], [400 / 120, 2.5]]


def test_a_run_with_only_its_summary_degrades_to_notes(run, tmp_path):
    (tmp_path / "summary.json").write_text('{"models": {"deepseek-v4-flash": {"ttft_p50_s": 1.0}}}')
    page, n = build_page([load_run(tmp_path)])
    assert n == 0
    assert page.count("Not in this run") >= 8
    assert "1 s" in page


def test_scenario_table_flattens_nested_inputs():
    rows = flatten({"a": {"b": 1, "c": [1, 2]}, "pools": [{"name": "p", "nodes": 2}], "x": 0.1})
    assert rows == [
        ("a.b", "1"),
        ("a.c", "[1, 2]"),
        ("pools[0].name", "p"),
        ("pools[0].nodes", "2"),
        ("x", "0.1"),
    ]


def test_page_inlines_plotly_once_fetches_nothing_and_is_deterministic(run, v41_only, page2):
    page, n = page2
    assert n == len(re.findall(r'<div class="chart" id="fig-\d+"', page)) == 14
    assert page.count("plotly.js v") <= 2 and page.count("<script>/**") == 1  # the bundle's banner, once
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=|<img[^>]+src=", page)
    assert page == build_page([run, v41_only])[0]


def test_unique_labels_add_parent_folders_until_distinct(tmp_path):
    a, b = tmp_path / "x" / "out", tmp_path / "y" / "out"
    assert unique_labels([a, b]) == ["x/out", "y/out"]


def test_report_never_imports_simpy_or_the_cluster():
    code = "import sys, sim.report.build; print([m for m in sys.modules if m == 'simpy' or m.startswith('sim.cluster')])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_log_axis_ticks_are_round_durations():
    assert latency.log_ticks(0.005, 0.8) == [0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5]
    assert latency.log_ticks(0.001, 5000) == [0.001, 0.01, 0.1, 1.0, 10.0, 100.0, 1000.0]
    assert [latency.tick_label(v) for v in (0.005, 0.2, 20.0, 5000.0)] == [
        "5 ms",
        "200 ms",
        "20 s",
        "5,000 s",
    ]


def test_time_charts_share_one_axis_over_the_run_span(run, v41_only, sections2):
    axis = timeaxis.time_axis([run, v41_only])
    synced = [f for f in figures_of(sections2) if f.layout.meta and f.layout.meta.get("time_sync")]
    assert len(synced) == 4  # throughput, queue, KV tiers, bandwidth
    for fig in synced:
        assert list(fig.layout.xaxis.range) == pytest.approx(
            [axis.start_s / axis.unit_s, axis.end_s / axis.unit_s]
        )
        others = [fig.layout[k] for k in fig.layout if k.startswith("xaxis") and k != "xaxis"]
        assert all(ax.matches == "x" for ax in others)


def test_a_long_legend_pushes_the_plot_down_instead_of_covering_the_title():
    fig = new_figure()
    for i in range(6):
        fig.add_scatter(x=[0], y=[0], name=f"run_{i} · deepseek-v4.1-flash")
    fig.update_layout(margin_t=80, height=380)
    fit_legend(fig, 620)
    assert fig.layout.margin.t > 80 and fig.layout.height - 380 == fig.layout.margin.t - 80


def test_an_engine_refusal_is_a_caveat_beside_the_verdict(tmp_path):
    import json

    folder = write_run(tmp_path / "refused")
    summary = json.loads((folder / "summary.json").read_text())
    summary["models"][V41]["engine_refusal"] = "SGLang would not start this deployment: a reason"
    summary["models"][V4]["engine_refusal"] = None
    (folder / "summary.json").write_text(json.dumps(summary))
    panels = headline.headline_panels(build_series([load_run(folder)]))
    assert len(panels) == 3  # verdict, caveat, cards
    text = re.sub("<[^>]+>", "", panels[1].html)
    assert (
        text
        == f"Caveat:{V41}: SGLang would not start this deployment: a reason. Its figures are what the engine would serve if it started."
    )
    assert headline.refusal_html(build_series([load_run(write_run(tmp_path / "fine"))])) == ""
