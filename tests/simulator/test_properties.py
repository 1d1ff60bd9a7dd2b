"""Property tests: random small scenarios keep every invariant (conservation, causality, hits
within the prompt, tiers within capacity, run-twice determinism of the summary)."""

import numpy as np
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.api import run_scenario

from .helpers import scenario
from .traces import agent_trace

POOLS = {
    "colocated": [
        {"name": "c", "role": "colocated", "nodes": 1, "gpus_per_instance": 8, "tp": 1, "ep": 8, "dp": 8}
    ],
    "colocated_tp": [
        {"name": "c", "role": "colocated", "nodes": 2, "gpus_per_instance": 8, "tp": 8, "ep": 8, "dp": 1}
    ],
    "disaggregated": [
        {"name": "p", "role": "prefill", "nodes": 1, "gpus_per_instance": 8, "tp": 1, "ep": 8, "dp": 8},
        {"name": "d", "role": "decode", "nodes": 1, "gpus_per_instance": 8, "tp": 2, "ep": 8, "dp": 4},
    ],
}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    pools=st.sampled_from(sorted(POOLS)),
    model=st.sampled_from(["deepseek-v4-flash", "deepseek-v4.1-flash"]),
    sessions=st.integers(1, 8),
    turns=st.integers(1, 4),
    gap_s=st.floats(0.05, 5.0),
    first_input=st.integers(200, 60_000),
    open_loop=st.booleans(),
    hbm_keep_s=st.sampled_from([0.0, 2.0, 30.0]),
    dram_gb=st.sampled_from([None, 2.1, 50.0]),
    budget=st.sampled_from([2048, 16384]),
    spec=st.booleans(),
    seed=st.integers(0, 3),
)
def test_random_small_scenarios_keep_the_invariants(tmp_path_factory, pools, model, sessions, turns, gap_s,
                                                     first_input, open_loop, hbm_keep_s, dram_gb, budget, spec,
                                                     seed):  # fmt: skip
    tmp = tmp_path_factory.mktemp("prop")
    trace = agent_trace(tmp / "t.parquet", sessions=sessions, turns=turns, gap_s=gap_s, first_input=first_input,
                        seed=seed)  # fmt: skip
    cluster = {"node": {"dram_gb": dram_gb}} if dram_gb else {}
    scn = scenario(tmp, trace, models=(model,), pools=POOLS[pools], cluster=cluster,
                   workload={"replay": "open_loop" if open_loop else "closed_loop"},
                   cache={"tiers": {"hbm": {"ttl_s": hbm_keep_s}}}, spec_decode={"enabled": spec},
                   scheduler={"prefill_budget_tokens": budget, "chunk_tokens": min(budget, 8192)},
                   outputs={"timeseries_interval_s": 0.5})  # fmt: skip
    result = run_scenario(scn, out_dir=tmp / "out")
    s = result.summary["models"][model]
    n = sessions * turns
    assert s["requests_arrived"] == s["requests_completed"] + s["requests_rejected"] == n
    log = pq.read_table(tmp / "out" / model / "requests.parquet").to_pandas()
    assert len(log) == n and log.request_id.is_unique
    done = log[log.status == "completed"]
    assert (done.arrival_s <= done.prefill_start_s).all()
    assert (done.prefill_start_s < done.first_token_s).all()
    assert (done.first_token_s <= done.finish_s).all()
    assert (done.hit_tokens <= done.input_tokens - 1).all()
    assert (done.computed_tokens == done.input_tokens - done.hit_tokens + done.replay_tokens).all()
    assert ((done.output_tokens > 1) == (done.finish_s > done.first_token_s)).all()
    # a hit whose sliding window is gone re-runs at most the window's receptive field (V4: 5,632 tokens at
    # 256-token blocks) or V4.1's bounded replay (128), never more than it hit (sim.kvcache.lookup)
    rebuild = 5_632 if model == "deepseek-v4-flash" else 128
    assert (done.replay_tokens <= np.minimum(done.hit_tokens, rebuild)).all()
    for tier in s["tiers"].values():
        assert tier["peak_unit_frac"] <= 1.0 + 1e-12
    ts = pq.read_table(tmp / "out" / model / "timeseries" / "_cluster.parquet").to_pandas()
    assert (ts.completed + ts.rejected <= ts.arrived).all()
    assert np.all(np.diff(ts.arrived) >= 0)
    # same seed, same numbers
    again = run_scenario(scn).summary["models"][model]
    assert again == s
