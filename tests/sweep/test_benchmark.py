"""The benchmark client (workload.benchmark) and pools sized in instances."""

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from sim.api import run_scenario
from sim.config.errors import validate_or_raise
from sim.config.scenario import Scenario
from sim.config.yamlio import read_yaml_mapping
from sim.errors import InputError
from sim.plan.overrides import apply_overrides

TINY = Path(__file__).with_name("bench_tiny.yaml")


def scenario(**overrides) -> Scenario:
    doc = apply_overrides(read_yaml_mapping(TINY), overrides)
    return validate_or_raise(Scenario, doc, file=str(TINY), context={"base_dir": TINY.parent})


def test_closed_loop_holds_concurrency_exactly(tmp_path):
    bench = {"concurrency": 6, "think_s": 0.0, "length_jitter_frac": 0.0}
    run_scenario(scenario(**{"workload.benchmark": bench}), out_dir=tmp_path)
    t = pq.read_table(tmp_path / "deepseek-v4-flash" / "requests.parquet").to_pandas()
    arrive, finish = t["arrival_s"].to_numpy(), t["finish_s"].to_numpy()
    assert (t["status"] == "completed").all()
    # at every instant before the horizon (between events, after each boundary) exactly 6 are in flight
    events = np.unique(np.concatenate([arrive, finish]))
    probes = (events[:-1] + events[1:]) / 2
    probes = probes[probes < 40.0]
    in_flight = [int(((arrive <= x) & (finish > x)).sum()) for x in probes]
    # enough boundaries to mean something (how many fit before 40 s depends on the calibrated step time)
    assert len(probes) > 20 and set(in_flight) == {6}
    # sessions: the second and later turns reuse 90% of the input from the previous turn
    later = t[t["request_index"] > 0]
    assert (later["prefix_tokens"] == np.round(0.9 * later["input_tokens"]).astype(int)).all()
    assert t["request_index"].max() == 3  # turns_per_session 4


def test_throughput_rises_and_per_user_speed_falls_with_concurrency():
    points = []
    for c in (1, 4, 16):
        s = run_scenario(scenario(**{"workload.benchmark": {"concurrency": c}})).summary["models"]
        points.append(s["deepseek-v4-flash"])
    per_gpu = [p["output_tokens_per_s_per_gpu"] for p in points]
    per_user = [p["tokens_per_s_per_user"] for p in points]
    assert per_gpu[0] < per_gpu[1] < per_gpu[2], per_gpu
    assert per_user[0] > per_user[1] > per_user[2], per_user
    assert points[0]["gpus"] == 4


def test_open_loop_rate_and_same_seed_same_bytes(tmp_path):
    scn = scenario(**{"workload.benchmark": {"concurrency": None, "request_rate_per_s": 2.0}})
    a = run_scenario(scn, out_dir=tmp_path / "a").summary["models"]["deepseek-v4-flash"]
    run_scenario(scn, out_dir=tmp_path / "b")
    assert 40 < a["requests_arrived_incl_warmup"] < 120  # ~2/s for 40 s
    for name in ("summary.json", "deepseek-v4-flash/requests.parquet"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_a_named_clients_draws_give_each_request_its_lengths_in_the_order_sent(tmp_path):
    """`lengths_drawn_by`: the k-th request sent has the k-th of the client's draws (sim.workload.bench_clients),
    whatever the scenario's seed, and the run otherwise draws nothing."""
    from sim.workload.bench_clients import sglang_random_lengths

    bench = {"isl_tokens": 2048, "osl_tokens": 64, "length_jitter_frac": 0.0, "turns_per_session": 1,
             "lengths_drawn_by": {"client": "sglang_bench_serving_random", "seed": 7}}  # fmt: skip
    drawn = sglang_random_lengths(2048, 64, 12, 0.0, 7)
    tables = []
    for seed in (3, 4):
        scn = scenario(**{"workload.benchmark": bench, "workload.max_requests": 12, "workload.horizon_s": None,
                          "workload.warmup_s": 0, "seed": seed})  # fmt: skip
        run_scenario(scn, out_dir=tmp_path / str(seed))
        t = pq.read_table(tmp_path / str(seed) / "deepseek-v4-flash" / "requests.parquet").to_pandas()
        tables.append(t.sort_values("request_id"))
    t = tables[0]
    assert (t["status"] == "completed").all() and len(t) == 12
    assert t["input_tokens"].tolist() == list(drawn.input_tokens)
    assert t["output_tokens"].tolist() == list(drawn.output_tokens)
    assert len(set(t["input_tokens"])) > 6  # drawn in [1, 2048], not the nominal length
    assert (
        tables[1]["input_tokens"].tolist() == t["input_tokens"].tolist()
    )  # the client's seed, not the scenario's


def test_trace_quantile_sessions_reuse_their_growing_context(tmp_path):
    """`trace_quantiles`: each slot runs a session of neighbouring lengths that grow turn by turn, so nearly every
    later turn's prefix (90 % of its input) is its predecessor's context and hits; the run sends exactly
    max_requests and the seed of the draw, not the scenario's, fixes the lengths."""
    draw = {"client": "trace_quantiles", "seed": 5,
            "input_quantiles": [{"q": 0, "tokens": 512}, {"q": 0.5, "tokens": 2048}, {"q": 1, "tokens": 8192}],
            "output_quantiles": [{"q": 0, "tokens": 8}, {"q": 0.5, "tokens": 32}, {"q": 1, "tokens": 256}]}  # fmt: skip
    bench = {"length_jitter_frac": 0.0, "turns_per_session": 5, "lengths_drawn_by": draw}
    runs = []
    for seed in (3, 4):
        scn = scenario(
            **{
                "workload.benchmark": bench,
                "workload.max_requests": 40,
                "workload.horizon_s": None,
                "workload.warmup_s": 0,
                "seed": seed,
                "cluster.pools[name=worker]": {"tp": 4, "ep": 1, "dp": 1},  # one cache: no DP rank to miss
                "engine": {"name": "vllm", "version": "0.23.0"},
            }
        )  # its cache keeps V4's window a block
        run_scenario(scn, out_dir=tmp_path / str(seed))
        runs.append(
            pq.read_table(tmp_path / str(seed) / "deepseek-v4-flash" / "requests.parquet").to_pandas()
        )
    t = runs[0].sort_values(["session_id", "request_index"])
    assert len(t) == 40 and (t["status"] == "completed").all()
    assert sorted(t["input_tokens"]) == sorted(runs[1]["input_tokens"])
    for _, sess in t.groupby("session_id"):
        assert (np.diff(sess["input_tokens"].to_numpy()) >= 0).all()
    later = t[t["request_index"] > 0]
    assert later["hit_tokens"].sum() > 0.8 * later["prefix_tokens"].sum()


def test_pool_in_instances_pays_per_gpu():
    one = scenario()
    two = scenario(**{"cluster.pools[name=worker]": {"instances": 2}})
    whole = scenario(**{"cluster.pools[name=worker]": {"instances": None, "nodes": 1}})
    pool = lambda s: s.cluster.pools[0]  # noqa: E731
    assert one.pool_layout(pool(one)).nodes == 1 and one.pool_layout(pool(one)).gpus == 4
    assert two.pool_layout(pool(two)).instances == 2 and two.pool_layout(pool(two)).nodes == 1
    assert whole.pool_layout(pool(whole)).instances == 2
    assert one.pool_usd_per_hour(pool(one)) == pytest.approx(whole.pool_usd_per_hour(pool(whole)) / 2)
    three = scenario(**{"cluster.pools[name=worker]": {"instances": 3}})
    assert three.pool_layout(pool(three)).nodes == 2  # 12 GPUs on 8-GPU nodes


def _trace_quantiles(input_q, output_q, trace=None, **bench) -> dict:
    """Overrides giving the benchmark a `trace_quantiles` draw of these (quantile, tokens) points."""
    draw = {"client": "trace_quantiles"}
    if trace is not None:
        draw["trace"] = trace
    for key, points in (("input_quantiles", input_q), ("output_quantiles", output_q)):
        if points is not None:
            draw[key] = [{"q": q, "tokens": t} for q, t in points]
    return {"workload.benchmark": {"length_jitter_frac": 0.0, "lengths_drawn_by": draw, **bench},
            "workload.max_requests": 9}  # fmt: skip


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"workload.benchmark": {"request_rate_per_s": 1.0}},
            "both concurrency and request_rate_per_s given",
        ),
        ({"workload.horizon_s": None}, "a benchmark runs until horizon_s or max_requests"),
        ({"workload.trace": "x.parquet"}, "workload.trace"),
        ({"workload.benchmark": {"prefix_reuse_frac": 1.5}}, "workload.benchmark.prefix_reuse_frac"),
        ({"cluster.pools[name=worker]": {"nodes": 1}}, "both nodes and instances given"),
        (
            {"workload.benchmark": {"lengths_drawn_by": {"client": "sglang_bench_serving_random"}}},
            "workload.benchmark.length_jitter_frac: the client draws the lengths",
        ),
        (
            {
                "workload.benchmark": {
                    "length_jitter_frac": 0.0,
                    "lengths_drawn_by": {"client": "sglang_bench_serving_random"},
                }
            },
            "workload.max_requests: the client draws one length per prompt it sends",
        ),
        (
            {"workload.benchmark": {"length_jitter_frac": 0.0, "lengths_drawn_by": {"client": "vllm_bench"}}},
            "workload.benchmark.lengths_drawn_by: Input tag 'vllm_bench' found using 'client' does not match any of "
            "the expected tags: 'sglang_bench_serving_random', 'trace_quantiles'",
        ),
        (
            _trace_quantiles([(0.1, 10), (1, 20)], [(0, 10), (1, 20)]),
            "workload.benchmark.lengths_drawn_by.trace_quantiles.input_quantiles: quantiles run from 0.1 to 1",
        ),
        (
            _trace_quantiles([(0, 10), (1, 20)], [(0, 30), (1, 20)]),
            "output_quantiles: q 1 (20 tokens) after q 0 (30 tokens)",
        ),
        (
            _trace_quantiles(
                [(0, 10), (1, 20)], [(0, 10), (1, 20)], concurrency=None, request_rate_per_s=1.0
            ),
            "lengths_drawn_by: a trace's rows are replayed by a closed loop here",
        ),
        (
            _trace_quantiles(None, None, trace="nope"),
            "lengths_drawn_by.trace_quantiles.trace: no published trace 'nope'",
        ),
        (
            {"cluster.pools[name=worker]": {"instances": 1, "gpus_per_instance": 16, "dp": 16, "ep": 16}},
            "an instance cannot span nodes",
        ),
    ],
)
def test_bad_benchmark_and_instances_give_one_clear_message(overrides, message):
    with pytest.raises(InputError) as err:
        scenario(**overrides)
    assert message in str(err.value) and "bench_tiny.yaml" in str(err.value)
