"""The simulator end to end on tiny scenarios: queueing theory, Little's law, conservation,
capacity, determinism, and the decode jump-ahead against step-by-step decoding."""

import hashlib
import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from sim.api import run_scenario
from sim.timing import factory
from sim.timing.base import SummedDecodeSpans
from sim.timing.roofline import RooflineTiming

from .helpers import DISAGG, scenario
from .traces import agent_trace, fixed_trace


def _requests(result, model):
    return pq.read_table(result.out_dir / model / "requests.parquet").to_pandas()


def test_md1_mean_wait_matches_the_closed_form(tmp_path):
    # GIVEN one instance serving one fixed-size, one-token request per step (budget = prompt),
    # Poisson arrivals at load rho, no cache hits: an M/D/1 queue. One attention group (TP 8): with
    # DP attention each rank would serve its own requests, eight queues sharing steps
    n_tokens = 2048
    tp8 = [
        {"name": "coloc", "role": "colocated", "nodes": 1, "gpus_per_instance": 8, "tp": 8, "ep": 8, "dp": 1}
    ]
    # at the tables' burst times: a board carrying heat from step to step serves in a time that depends on the
    # steps before (sim.timing.sustained), and M/D/1 wants a fixed service time
    burst = {"power_limit": "off"}
    probe = scenario(tmp_path, fixed_trace(tmp_path / "one.parquet", [0.0], n_tokens, 1), pools=tp8,
                     scheduler={"prefill_budget_tokens": n_tokens, "chunk_tokens": n_tokens}, timing=burst)  # fmt: skip
    one = _requests(run_scenario(probe, out_dir=tmp_path / "probe"), "deepseek-v4.1-flash")
    service = float(one.first_token_s[0] - one.prefill_start_s[0])
    rho, n = 0.6, 12_000
    rng = np.random.default_rng(7)
    arrivals = np.cumsum(rng.exponential(service / rho, n))
    scn = scenario(tmp_path, fixed_trace(tmp_path / "md1.parquet", arrivals.tolist(), n_tokens, 1), pools=tp8,
                   scheduler={"prefill_budget_tokens": n_tokens, "chunk_tokens": n_tokens},
                   workload={"replay": "open_loop"}, timing=burst)  # fmt: skip
    # WHEN it runs
    log = _requests(run_scenario(scn, out_dir=tmp_path / "md1"), "deepseek-v4.1-flash")
    # THEN every service takes D and the mean wait is rho D / (2 (1 - rho))
    assert np.allclose(log.first_token_s - log.prefill_start_s, service, rtol=1e-9)
    wait = float((log.prefill_start_s - log.arrival_s).mean())
    assert wait == pytest.approx(rho * service / (2 * (1 - rho)), rel=0.06)


def test_littles_law_and_conservation_on_an_agent_run(tmp_path):
    trace = agent_trace(tmp_path / "agent.parquet", sessions=12, turns=4)
    scn = scenario(tmp_path, trace, models=("deepseek-v4-flash", "deepseek-v4.1-flash"), pools=DISAGG)
    result = run_scenario(scn, out_dir=tmp_path / "out")
    for name, s in result.summary["models"].items():
        assert s["requests_arrived"] == s["requests_completed"] + s["requests_rejected"] == 48
        little = s["little"]
        assert little["mean_in_system"] == pytest.approx(
            little["arrival_rate_per_s"] * little["mean_time_in_system_s"], rel=1e-9
        )
        log = _requests(result, name)
        assert len(log) == 48 and set(log.status) == {"completed"}
        # causality along each request's path
        assert (log.arrival_s <= log.admitted_s).all()
        assert (log.admitted_s <= log.prefill_start_s).all()
        assert (log.prefill_start_s < log.first_token_s).all()
        assert (log.first_token_s <= log.kv_transfer_start_s).all()
        assert (log.kv_transfer_end_s <= log.decode_start_s).all()
        assert (log.decode_start_s < log.finish_s).all()
        # later turns find their prefix; the computed part is what was not cached (+ replay)
        assert (log.computed_tokens == log.input_tokens - log.hit_tokens + log.replay_tokens).all()
        assert (log[log.request_index > 0].hit_tokens > 0).all()


def test_rejections_are_counted_with_their_reason(tmp_path):
    trace = fixed_trace(tmp_path / "long.parquet", [0.0, 1.0], 900_000, 200_000)  # > 1M-token context
    result = run_scenario(scenario(tmp_path, trace), out_dir=tmp_path / "out")
    s = result.summary["models"]["deepseek-v4.1-flash"]
    assert s["requests_rejected"] == 2 and s["rejected_by_reason"] == {"context_too_long": 2}
    log = _requests(result, "deepseek-v4.1-flash")
    assert list(log.reject_reason) == ["context_too_long"] * 2


def test_no_tier_exceeds_its_capacity_under_pressure(tmp_path):
    # tiny host DRAM and a short HBM keep force demotions and evictions
    trace = agent_trace(tmp_path / "agent.parquet", sessions=30, turns=5, gap_s=0.5)
    scn = scenario(tmp_path, trace, cluster={"node": {"dram_gb": 2.2}}, cache={"tiers": {"hbm": {"ttl_s": 1.0}, "dram": {"ttl_s": 20.0}}},
                   outputs={"timeseries_interval_s": 1.0})  # fmt: skip
    result = run_scenario(scn, out_dir=tmp_path / "out")
    s = result.summary["models"]["deepseek-v4.1-flash"]
    assert s["bytes_written_dram"] > 0
    ts = pq.read_table(result.out_dir / "deepseek-v4.1-flash" / "timeseries" / "coloc.parquet").to_pandas()
    assert ((ts.hbm_reserved_bytes + ts.hbm_cached_bytes) <= ts.hbm_kv_capacity_bytes * (1 + 1e-12)).all()
    assert (ts.dram_kv_bytes <= ts.dram_kv_capacity_bytes * (1 + 1e-12)).all()
    for tier in s["tiers"].values():
        assert tier["peak_unit_frac"] <= 1.0 + 1e-12


def _digest(folder):
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}  # fmt: skip


def test_same_seed_gives_byte_identical_outputs(tmp_path):
    trace = agent_trace(tmp_path / "agent.parquet", sessions=10, turns=4)
    scn = scenario(tmp_path, trace, models=("deepseek-v4-flash", "deepseek-v4.1-flash"), pools=DISAGG)
    run_scenario(scn, out_dir=tmp_path / "a")
    run_scenario(scn, out_dir=tmp_path / "b")
    a, b = _digest(tmp_path / "a"), _digest(tmp_path / "b")
    # summary.json and the .sim-output marker, and per model the request log and 3 series
    assert a == b and "summary.json" in a and len(a) == 2 + 2 * 4


class _StepByStep(SummedDecodeSpans, RooflineTiming):
    """The roofline's step time, but decode spans summed one step at a time."""

    exact_steps = 10**9


def test_decode_jump_ahead_equals_step_by_step(tmp_path, monkeypatch):
    trace = agent_trace(tmp_path / "agent.parquet", sessions=8, turns=3, gap_s=0.3, first_input=30_000,
                        output_tokens=(100, 600), shared_prefix_tokens=0)  # fmt: skip
    scn = scenario(tmp_path, trace, timing={"model": "roofline"})
    fast = _requests(run_scenario(scn, out_dir=tmp_path / "fast"), "deepseek-v4.1-flash")

    built = []

    def build_stepwise(ctx):
        built.append(ctx.model_name)
        return _StepByStep(ctx.arith, ctx.hw, ctx.par, ctx.eff, accepted_tokens_per_step=ctx.accepted_tokens_per_step,
                           draft_tokens=ctx.draft_tokens)  # fmt: skip

    monkeypatch.setitem(factory._REGISTRY, "roofline", factory._Entry(build_stepwise, lambda _hw: True))
    slow = _requests(run_scenario(scn, out_dir=tmp_path / "slow"), "deepseek-v4.1-flash")
    assert built  # the step-by-step timing ran
    # sequences joined while others were decoding (so spans were cut), not one after another
    d = fast.sort_values("decode_start_s")
    assert (d.decode_start_s.values[1:] < d.finish_s.cummax().values[:-1]).sum() >= 5
    assert (fast.request_id.values == slow.request_id.values).all()
    assert np.allclose(fast.finish_s, slow.finish_s, rtol=1e-9)
    assert np.allclose(fast.first_token_s, slow.first_token_s, rtol=1e-9)


def test_summary_json_has_the_documented_keys(tmp_path):
    trace = agent_trace(tmp_path / "agent.parquet", sessions=4, turns=3)
    run_scenario(scenario(tmp_path, trace), out_dir=tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    s = summary["models"]["deepseek-v4.1-flash"]
    for key in ("requests_arrived", "requests_completed", "requests_rejected", "ttft_p50_s", "ttft_p90_s",
                "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "e2e_p50_s", "output_tokens_per_s", "input_tokens_per_s",
                "tasks_per_hour", "slo_attainment", "prefix_hit_rate", "hit_rate_hbm", "hit_rate_dram",
                "hit_rate_ssd", "bytes_loaded_dram", "bytes_loaded_ssd", "bytes_written_ssd", "hbm_peak_bytes",
                "hbm_mean_bytes", "dram_peak_bytes", "ssd_peak_bytes", "cluster_usd_per_hour", "cost_per_task_usd",
                "usd_per_mtok_input", "usd_per_mtok_output", "session_kv_bytes_mean", "session_ssd_bytes_mean"):  # fmt: skip
        assert key in s, key
    assert s["kv_bytes_per_token"] == 890.0  # model.md §5.1 [A]
    assert s["session_ssd_bytes_at_1m_tokens"] == pytest.approx(
        1_048_576 * 890.0
    )  # V4.1 persists global KV only


def test_the_running_cap_holds_requests_before_their_prefill():
    """vLLM --max-num-seqs / SGLang --max-running-requests (scheduler.max_decode_batch) count requests in
    prefill too: over the cap a request waits for its prefill (TTFT), and TPOT is the decode step alone."""
    import yaml

    from sim.api import run_scenario
    from sim.config.errors import validate_or_raise
    from sim.config.scenario import Scenario
    from sim.paths import project_root

    base = yaml.safe_load((project_root() / "tests" / "sweep" / "bench_tiny.yaml").read_text())
    bench = base["workload"]["benchmark"]
    base["workload"]["benchmark"] = {**bench, "concurrency": 8, "prefix_reuse_frac": 0.0}
    out = {}
    for cap in (2, 8):
        doc = {**base, "scheduler": {"max_decode_batch": cap}}
        scn = validate_or_raise(Scenario, doc, file="cap", context={"base_dir": project_root()})
        out[cap] = run_scenario(scn, 3, out_dir=None).summary["models"]["deepseek-v4-flash"]
    # six of eight wait a whole request's turn before prefill: TTFT grows by more than a decode of 128 tokens
    assert out[2]["ttft_p50_s"] > out[8]["ttft_p50_s"] + 100 * out[2]["tpot_p50_s"]
    # a smaller batch decodes no slower, and no wait to join the batch is in its TPOT
    assert out[2]["tpot_p50_s"] <= out[8]["tpot_p50_s"]
