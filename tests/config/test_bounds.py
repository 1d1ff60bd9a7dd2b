"""Non-finite and absurd numbers are refused in every config model (sim.config.base), each with the
field, the value and the bound; they never reach a run (issue 17)."""

from __future__ import annotations

import copy

import pytest
from test_scenario import VALID, errors_of, folder  # noqa: F401 - `folder` is a fixture

from sim.config.base import MAX_DURATION_S, MAX_INT
from sim.config.cluster import MAX_POOL_NODES
from sim.config.yamlio import parse_yaml
from sim.hardware.schema import HwProfile


def variant(dotted: str, value) -> dict:
    """VALID with `value` at a dotted path (missing mappings created; a number indexes a list)."""
    data = copy.deepcopy(VALID)
    *parents, last = dotted.split(".")
    node = data
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    node[last] = value
    return data


@pytest.mark.parametrize("text", [".inf", "-.inf", ".nan", ".NaN"])
@pytest.mark.parametrize(
    "dotted",
    ["workload.warmup_s", "workload.horizon_s", "slo.ttft_s", "outputs.timeseries_interval_s",
     "cache.v41.swa_pool_dram_frac", "scheduler.router.weights.prefix_hit", "pricing.pue"],
)  # fmt: skip
def test_non_finite_numbers_are_refused_everywhere(folder, dotted, text):  # noqa: F811
    lines = errors_of(folder, variant(dotted, parse_yaml(text, file="-")))
    assert any(line.startswith(f"{dotted}: not a finite number") for line in lines), lines


@pytest.mark.parametrize(
    "dotted", ["workload.warmup_s", "workload.drain_limit_s", "cache.v41.swa_ttl_s", "slo.tpot_s"]
)
def test_durations_beyond_a_year_are_refused_naming_the_bound(folder, dotted):  # noqa: F811
    lines = errors_of(folder, variant(dotted, 1e308))
    assert (
        f"{dotted}: longer than sim simulates (one year) (got 1e+308); allowed: <= {MAX_DURATION_S:,} s"
        in lines
    )


def test_a_year_itself_is_allowed(folder):  # noqa: F811
    assert errors_of(folder, variant("workload.warmup_s", float(MAX_DURATION_S))) == [
        f"workload.horizon_s: must be greater than warmup_s ({MAX_DURATION_S:g} s) (got 3600.0); "
        f"allowed: > {MAX_DURATION_S:g}"
    ]


def test_huge_integers_and_node_counts_are_refused(folder):  # noqa: F811
    lines = errors_of(folder, variant("scheduler.max_decode_batch", 10**20))
    assert lines == [
        f"scheduler.max_decode_batch: too large to count exactly (got {10**20}); allowed: <= {MAX_INT:,} (2^53)"
    ]
    lines = errors_of(folder, variant("cluster.pools.0.nodes", 10**20))
    assert lines[0].startswith("cluster.pools[0].nodes: ")
    lines = errors_of(folder, variant("cluster.pools.0.nodes", MAX_POOL_NODES + 1))
    assert lines == [
        f"cluster.pools[0].nodes: must be less than or equal to {MAX_POOL_NODES} (got {MAX_POOL_NODES + 1})"
    ]


def test_hardware_profiles_refuse_non_finite_numbers_too():
    from sim.hardware import load_hw

    data = load_hw("nvidia-h200-hgx8").model_dump(mode="python", by_alias=True)
    data["accelerator"]["hbm_capacity_gb"]["value"] = float("inf")
    with pytest.raises(Exception, match="finite"):
        HwProfile.model_validate(data)


@pytest.mark.parametrize(
    "days, message", [(float("inf"), "finite"), (float("nan"), "finite"), (1e308, "366")]
)
def test_a_generator_spec_refuses_non_finite_and_absurd_days(days, message):
    import yaml

    from sim.errors import InputError
    from sim.paths import project_root
    from sim.workload.spec import parse_spec

    raw = yaml.safe_load((project_root() / "traces" / "agent_1M_sample.yaml").read_text())
    raw["days"] = days
    with pytest.raises(InputError, match=message):
        parse_spec(raw, file="spec.yaml")
