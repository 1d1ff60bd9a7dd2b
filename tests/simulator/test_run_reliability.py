"""`sim run` as a user meets it (issue 17): an output folder never mixes two runs, every file carries
the run id that `sim report` checks, the preflight stops a bad scenario before anything is simulated,
the seed says what it affects, the cost table keeps model names whole at 80 columns."""

from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest
from rich.console import Console
from typer.testing import CliRunner

from sim.api import run_scenario
from sim.cli import app
from sim.cli.run_cmd import cost_table
from sim.errors import InputError
from sim.metrics.schema import RUN_ID_KEY
from sim.outputs import MARKER
from sim.report.rundata import load_run

from .helpers import DISAGG, scenario
from .traces import agent_trace


@pytest.fixture
def trace(tmp_path):
    return agent_trace(tmp_path / "t.parquet", sessions=6, turns=3)


def _files(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def _invoke(*args) -> tuple[int, str]:
    """(exit code, output) as `sim` gives them: an InputError is exit 2 with its message (sim.cli.main)."""
    result = CliRunner().invoke(app, [*map(str, args)], env={"COLUMNS": "200"})
    if isinstance(result.exception, InputError):
        return 2, result.output + str(result.exception)
    return result.exit_code, result.output


def test_a_second_run_into_a_used_folder_is_refused_and_force_replaces_it_whole(tmp_path, trace):
    disagg = scenario(tmp_path, trace, pools=DISAGG)
    colocated = scenario(tmp_path, trace)
    out = tmp_path / "out"
    run_scenario(disagg, out_dir=out)
    before = _files(out)
    assert "deepseek-v4.1-flash/timeseries/prefill.parquet" in before

    with pytest.raises(InputError, match="holds an earlier output.*--force"):
        run_scenario(colocated, out_dir=out)
    assert _files(out) == before  # refused before anything was written

    run_scenario(colocated, out_dir=out, force=True)
    after = _files(out)
    assert "deepseek-v4.1-flash/timeseries/coloc.parquet" in after
    assert not any("prefill" in f or "decode" in f for f in after), "the old run's pools survived"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")], "a stage was left behind"


def test_a_folder_of_other_files_is_never_replaced_even_with_force(tmp_path, trace):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(InputError, match="not written by sim"):
        run_scenario(scenario(tmp_path, trace), out_dir=out, force=True)
    assert (out / "notes.txt").read_text() == "keep me"


def test_a_run_failing_in_its_second_model_leaves_the_previous_run_untouched(tmp_path, trace):
    one = scenario(tmp_path, trace)
    two = scenario(tmp_path, trace, models=["deepseek-v4-flash", "deepseek-v4.1-flash"])
    out = tmp_path / "out"
    run_scenario(one, out_dir=out)
    before = {name: (out / name).read_bytes() for name in _files(out)}

    def progress(model, index, models, now_s, ended, expected):
        if index == 1:
            raise KeyboardInterrupt  # what Ctrl-C or SIGTERM (sim.cli.signals) raises mid-run

    with pytest.raises(KeyboardInterrupt):
        run_scenario(two, out_dir=out, force=True, progress=progress)
    assert {name: (out / name).read_bytes() for name in _files(out)} == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_every_file_carries_the_run_id_and_report_refuses_a_mixed_folder(tmp_path, trace):
    out = tmp_path / "out"
    result = run_scenario(scenario(tmp_path, trace), out_dir=out)
    run_id = result.summary["run_id"]
    assert json.loads((out / "summary.json").read_text())["run_id"] == run_id
    assert json.loads((out / MARKER).read_text())["run_id"] == run_id
    parquet = list(out.rglob("*.parquet"))
    assert len(parquet) == 3
    for path in parquet:
        assert pq.read_schema(path).metadata[RUN_ID_KEY.encode()].decode() == run_id
    load_run(out)  # a whole run reads

    other = tmp_path / "other"
    run_scenario(scenario(tmp_path, trace, pools=DISAGG), out_dir=other)
    mixed = tmp_path / "mixed"
    shutil.copytree(out, mixed)
    stray = other / "deepseek-v4.1-flash" / "timeseries" / "prefill.parquet"
    shutil.copy(stray, mixed / "deepseek-v4.1-flash" / "timeseries" / "prefill.parquet")
    with pytest.raises(InputError, match="prefill.parquet: belongs to run .* this folder mixes runs"):
        load_run(mixed)
    code, _ = _invoke("report", mixed)
    assert code == 2 and not (mixed / "report.html").exists()


def test_the_same_inputs_give_the_same_run_id_and_another_seed_another(tmp_path, trace):
    scn = scenario(tmp_path, trace)
    a = run_scenario(scn).summary["run_id"]
    assert run_scenario(scn).summary["run_id"] == a
    assert run_scenario(scn, seed=9).summary["run_id"] != a


def test_weights_not_fitting_stop_check_and_run_before_any_model_runs(tmp_path, trace):
    # 4 H200s: V4 (160 GB) fits, V4.1 (545 GB with Engram in HBM) does not
    pools = [{"name": "small", "role": "colocated", "nodes": 1, "gpus_per_instance": 4, "tp": 1, "ep": 4,
              "dp": 4}]  # fmt: skip
    scn = scenario(tmp_path, trace, models=["deepseek-v4-flash", "deepseek-v4.1-flash"], pools=pools)
    started = []
    with pytest.raises(InputError) as err:
        run_scenario(scn, out_dir=tmp_path / "out", progress=lambda *a: started.append(a))
    assert started == [], "a model was simulated before the check"
    assert not (tmp_path / "out").exists()
    line = str(err.value)
    assert line.startswith(f"{scn.source_file}: cluster.pools[0].gpus_per_instance: deepseek-v4.1-flash")
    assert "pool 'small'" in line and "engram_placement" in line

    code, output = _invoke("scenario", "check", scn.source_file)
    assert code == 2 and output.count("deepseek-v4.1-flash weights") == 1


def test_w4a16_experts_off_the_gpu_marlin_was_measured_on_stop_check_and_run(tmp_path, trace):
    scn = scenario(tmp_path, trace, models=[{"name": "deepseek-v4-flash", "expert_activations": "bf16"}],
                   hardware="amd-mi300x-ubb8")  # fmt: skip
    code, output = _invoke("scenario", "check", scn.source_file)
    assert code == 2 and "models[0].expert_activations: W4A16 experts (Marlin)" in output
    assert "pool 'coloc'" in output and "bf16 on MI300X" in output
    code, _ = _invoke("run", scn.source_file, "--out", tmp_path / "out")
    assert code == 2 and not (tmp_path / "out").exists()
    # the H200, where it was measured, runs it
    ok = scenario(tmp_path, trace, models=[{"name": "deepseek-v4-flash", "expert_activations": "bf16"}])
    assert _invoke("scenario", "check", ok.source_file)[0] == 0


def test_an_invalid_trace_fails_check_and_run_before_simulating(tmp_path, trace):
    scn = scenario(tmp_path, trace)
    trace.write_bytes(trace.read_bytes()[:2000])  # truncated: the footer is gone
    code, output = _invoke("scenario", "check", scn.source_file)
    assert code == 2 and "workload.trace" in output and "t.parquet" in output
    code, _ = _invoke("run", scn.source_file, "--out", tmp_path / "out")
    assert code == 2 and not (tmp_path / "out").exists()


def test_a_warmup_after_the_last_arrival_is_refused(tmp_path, trace):
    # open loop: known before the run
    scn = scenario(tmp_path, trace, workload={"replay": "open_loop", "warmup_s": 100_000})
    with pytest.raises(InputError, match="workload.warmup_s: after the last arrival"):
        run_scenario(scn)
    # closed loop: arrival times are the run's; it refuses a window that measured nothing
    scn = scenario(tmp_path, trace, workload={"warmup_s": 100_000})
    with pytest.raises(InputError, match="workload.warmup_s: no request .* nothing was measured"):
        run_scenario(scn, out_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_sampling_interval_that_would_exhaust_memory_is_refused_naming_the_limit(tmp_path, trace):
    scn = scenario(tmp_path, trace, outputs={"timeseries_interval_s": 1e-6})
    with pytest.raises(InputError, match=r"outputs.timeseries_interval_s: .* the limit is 1,000,000"):
        run_scenario(scn)


def test_the_seed_says_what_it_affects_and_must_not_be_negative(tmp_path, trace):
    scn = scenario(tmp_path, trace)
    code, output = _invoke("run", scn.source_file, "--out", tmp_path / "out", "--seed", "8")
    assert code == 0, output
    assert "--seed 8 changes nothing here" in output
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["seed_affects"].startswith("nothing: the scenario replays a trace")
    code, _ = _invoke("run", scn.source_file, "--out", tmp_path / "neg", "--seed", "-1")
    assert code == 2 and not (tmp_path / "neg").exists()


def test_output_paths_that_cannot_be_written_fail_before_the_run(tmp_path, trace):
    scn = scenario(tmp_path, trace)
    started = []
    for bad in ("/proc/sim-out", trace):  # a pseudo file system; an existing file
        with pytest.raises(InputError, match="--out"):
            run_scenario(scn, out_dir=bad, progress=lambda *a: started.append(a))
    assert started == []
    code, output = _invoke("run", scn.source_file, "--out", "/proc/sim-out")
    assert code == 2 and "--out /proc/sim-out: cannot write here" in output


def test_cost_table_keeps_model_names_and_prices_whole_at_80_columns(tmp_path, trace):
    summary = run_scenario(
        scenario(tmp_path, trace, models=["deepseek-v4-flash", "deepseek-v4.1-flash"])
    ).summary
    console = Console(width=80, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(cost_table(summary))
    text = console.export_text()
    assert "V4-Flash" in text and "V4.1-Flash" in text
    assert "…" not in text


def test_a_folder_without_run_ids_is_refused_by_report(tmp_path, trace):
    out = tmp_path / "out"
    run_scenario(scenario(tmp_path, trace), out_dir=out)
    summary = json.loads((out / "summary.json").read_text())
    del summary["run_id"]  # as sim.run/v1 wrote it: its files cannot be told from another run's
    (out / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(InputError, match="summary.json has no run id"):
        load_run(out)
