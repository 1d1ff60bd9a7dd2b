"""The verdict: nodes and dollars per model for the same workload, and their ratios."""

from rich.console import Console

from sim.plan.verdict import configuration_lines, verdict, verdict_table


def _rec(nodes, usd_h, cost):
    return {
        "feasible": True,
        "choices": {"hardware": "b200", "nodes": "p1d2"},
        "nodes": nodes,
        "total_nodes": sum(nodes.values()),
        "total_gpus": 8 * sum(nodes.values()),
        "cluster_usd_per_hour": usd_h,
        "cost_per_task_usd": cost,
        "steady_state": {"task_arrivals_per_hour": 7200.0, "load": 0.8, "bottleneck_pool": "decode"},
        "metrics": {"ttft_p99_s": 1.0, "tpot_p99_s": 0.01},
    }


MODELS = {
    "v4": _rec({"prefill": 2, "decode": 2}, 64.0, 0.02),
    "v41": _rec({"prefill": 1, "decode": 2}, 48.0, 0.016),
}


def test_ratios_are_each_model_over_the_first():
    assert verdict(MODELS) == {
        "baseline": "v4",
        "ratios": {
            "v41": {
                "total_nodes": 0.75,
                "total_gpus": 0.75,
                "cluster_usd_per_hour": 0.75,
                "cost_per_task_usd": 0.8,
            }
        },
        "infeasible": [],
    }


def test_an_infeasible_model_gets_no_ratio_and_is_named():
    models = {**MODELS, "v41": {"feasible": False}}
    assert verdict(models) == {"baseline": "v4", "ratios": {}, "infeasible": ["v41"]}
    console = Console(width=200, record=True)
    console.print(verdict_table(models, verdict(models)))
    assert "none feasible in the search space" in console.export_text()


def test_table_and_configuration_lines_show_the_recommendation():
    console = Console(width=200, record=True)
    console.print(verdict_table(MODELS, verdict(MODELS)))
    text = console.export_text()
    assert "prefill 1, decode 2" in text and "48.00" in text and "0.75x the nodes" in text and "0.80x" in text
    assert "0.80 (decode)" in text and "$/task: steady state: cluster $/h x max(1, steady load)" in text
    assert configuration_lines(MODELS) == ["v4: hardware=b200 nodes=p1d2", "v41: hardware=b200 nodes=p1d2"]
