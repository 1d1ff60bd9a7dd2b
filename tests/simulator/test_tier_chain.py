"""The tier chain in a run: each load from a lower tier pays its read path's software overhead, the path's
bandwidth share sets the link, and a tier added as data (a CXL expander) takes part like the others."""

from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from sim.api import run_scenario
from sim.cluster.build import build_simulation
from sim.config.scenario import load_scenario
from sim.errors import InputError
from sim.timing.arith import build_arith

from .helpers import DISAGG, scenario
from .traces import agent_trace

V4 = "deepseek-v4-flash"
REPO = Path(__file__).resolve().parents[2]


def _loads(tmp_path, name, tiers):
    trace = agent_trace(tmp_path / f"{name}.parquet", sessions=12, turns=4, gap_s=0.5, think_s=8.0)
    scn = scenario(tmp_path, trace, models=(V4,), cache={"tiers": {"hbm": {"ttl_s": 1.0}, **tiers}})
    run_scenario(scn, out_dir=tmp_path / name)
    log = pq.read_table(tmp_path / name / V4 / "requests.parquet").to_pandas()
    lower = log[log.prefix_source.isin(["dram", "ssd"])]
    assert len(lower) > 0  # the short HBM keep demotes finished turns to host DRAM
    return lower.load_end_s - lower.load_start_s


def test_every_lower_tier_load_pays_its_read_overhead(tmp_path):
    free = {"dram": {"read": {"per_request_s": 0.0}}, "ssd": {"read": {"per_request_s": 0.0}}}
    slow = {"dram": {"read": {"per_request_s": 0.25}}, "ssd": {"read": {"per_request_s": 0.25}}}
    assert _loads(tmp_path, "free", free).max() < 0.25
    assert _loads(tmp_path, "slow", slow).min() >= 0.25


def test_a_path_bandwidth_share_slows_its_loads(tmp_path):
    fast = _loads(tmp_path, "fast", {"dram": {"read": {"per_request_s": 0.0, "bw_frac": 1.0}}})
    slow = _loads(tmp_path, "slow", {"dram": {"read": {"per_request_s": 0.0, "bw_frac": 0.01}}})
    assert slow.median() > 10 * fast.median()


def test_copies_leaving_host_dram_go_to_the_rdma_pool_and_load_over_the_nics(tmp_path):
    pool = {"enabled": True, "capacity_gb_per_node": 64.0, "read": {"per_request_s": 0.05}}
    trace = agent_trace(tmp_path / "t.parquet", sessions=24, turns=5, gap_s=0.3, think_s=6.0)
    scn = scenario(tmp_path, trace, models=(V4,), pools=DISAGG, cluster={"node": {"dram_gb": 2.2}},
                   cache={"tiers": {"hbm": {"ttl_s": 1.0}, "dram": {"ttl_s": 2.0}, "rdma_pool": pool}})  # fmt: skip
    result = run_scenario(scn, out_dir=tmp_path / "out")
    s = result.summary["models"][V4]
    assert s["bytes_written_rdma_pool"] > 0 and s["hit_tokens_rdma_pool"] > 0
    assert s["tiers"]["rdma_pool"]["capacity_bytes"] == pytest.approx(3 * 64e9)  # one unit: all nodes
    log = pq.read_table(tmp_path / "out" / V4 / "requests.parquet").to_pandas()
    pooled = log[log.prefix_source == "rdma_pool"]
    assert (pooled.load_end_s - pooled.load_start_s >= 0.05).all()


def test_a_cxl_tier_added_in_yaml_only_serves_hits(tmp_path):
    """scenarios/tiers_cxl.yaml adds a CXL memory tier between host DRAM and SSD as data: copies leaving
    DRAM go there, later turns load from it over the GPUs' PCIe, and every per-tier metric names it."""
    data = yaml.safe_load((REPO / "scenarios" / "tiers_cxl.yaml").read_text())
    data["models"] = [V4]
    data["workload"] = {**data["workload"], "trace": str(REPO / "traces" / "agent_1M_sample.parquet"),
                        "max_requests": 250}  # fmt: skip
    path = tmp_path / "cxl.yaml"
    path.write_text(yaml.safe_dump(data))
    result = run_scenario(load_scenario(path), out_dir=tmp_path / "out")
    s = result.summary["models"][V4]
    assert s["hit_tokens_cxl"] > 0 and s["bytes_loaded_cxl"] > 0 and s["bytes_written_cxl"] > 0
    assert s["tiers"]["cxl"]["capacity_bytes"] == pytest.approx(1024e9)  # one node
    names = [k.removeprefix("hit_tokens_") for k in s if k.startswith("hit_tokens_")]
    assert names == ["hbm", "dram", "cxl", "rdma_pool", "ssd"]  # the chain by rank
    log = pq.read_table(tmp_path / "out" / V4 / "requests.parquet").to_pandas()
    from_cxl = log[log.prefix_source == "cxl"]
    assert len(from_cxl) > 0 and (from_cxl.load_end_s - from_cxl.load_start_s >= 0.014).all()
    cluster = pq.read_table(tmp_path / "out" / V4 / "timeseries" / "_cluster.parquet")
    assert cluster.schema.metadata and max(cluster["cxl_kv_bytes"].to_pylist()) > 0  # its occupancy over time


def test_a_demote_tier_narrower_than_the_one_above_it_is_refused(tmp_path):
    trace = agent_trace(tmp_path / "t.parquet", sessions=2, turns=2)
    per_gpu = {"rank": 15, "scope": "instance", "medium": "memory", "ttl_s": 60.0, "capacity_gb_per_node": 64.0,
               "read": {"link": "pcie_h2d"}, "write": {"link": "pcie_d2h"}}  # fmt: skip
    with pytest.raises(InputError, match="cache.tiers.gpu_side.scope"):
        scenario(tmp_path, trace, cache={"tiers": {"gpu_side": per_gpu}})


def test_tiers_on_one_link_kind_share_its_lanes_unless_a_path_sets_its_own_share(tmp_path):
    """Host DRAM and the CXL expander both read over an instance's PCIe at the profile's share: one link, so
    their loads contend; a path with its own `bw_frac` gets lanes of its own (sim.cluster.build LinkSet)."""
    scn = load_scenario(REPO / "scenarios" / "tiers_cxl.yaml")
    ref = scn.models[0]
    inst = build_simulation(scn, ref, build_arith(ref.name), out_dir=None).instances[0]
    dram, cxl, ssd = (inst.read_links[inst.store.tier_names.index(n)] for n in ("dram", "cxl", "ssd"))
    assert dram is cxl and ssd is not dram
    tiers = yaml.safe_load((REPO / "scenarios" / "tiers_cxl.yaml").read_text())["cache"]["tiers"]
    tiers["cxl"]["read"]["bw_frac"] = 0.25
    own = scenario(tmp_path, agent_trace(tmp_path / "t.parquet", sessions=2, turns=2), cache={"tiers": tiers})
    inst = build_simulation(own, own.models[0], build_arith(own.models[0].name), out_dir=None).instances[0]
    dram, cxl = (inst.read_links[inst.store.tier_names.index(n)] for n in ("dram", "cxl"))
    assert dram is not cxl and cxl.bw_bytes_per_s == pytest.approx(dram.bw_bytes_per_s * 0.25 / 0.8)
