"""A stand-in simulator for testing the plan machinery alone: closed-form latency that falls with
node counts (monotone, as the search assumes) and cost linear in nodes. Importable by spawned
workers (pytest puts this folder on sys.path, and spawn children inherit it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sim.errors import InputError
from sim.plan.space import EvalTask, Inspection, PoolUnit
from sim.plan.steady import WorkloadRate

PRICE_USD_PER_NODE_HOUR = {"small": 10.0, "big": 25.0, "tiny": 1.0}
SPEED = {"small": 1.0, "big": 3.0, "tiny": 0.1}
GPUS_PER_NODE = 8
TASKS_PER_HOUR = 100.0
REQUESTS_PER_TASK = 10.0  # the fake run's window serves the workload's rate: steady busy = run busy
OUTPUT_TOKENS_PER_S = 1000.0  # the workload's

TEMPLATE = {
    "name": "fake",
    "models": ["m-a"],
    "hardware": "small",
    "cache": {"dram_per_node_gb": 1000},
    "cluster": {
        "pools": [
            {"name": "prefill", "role": "prefill", "nodes": 1},
            {"name": "decode", "role": "decode", "nodes": 1},
        ]
    },
}


def fake_evaluate(task: EvalTask) -> dict[str, Any]:
    doc = task.scenario
    hw = doc["hardware"]
    nodes = {p["name"]: p["nodes"] for p in doc["cluster"]["pools"]}
    assert all(p["nodes"] % p.get("nodes_per_instance", 1) == 0 for p in doc["cluster"]["pools"])
    slow = 2.0 if task.model == "m-b" else 1.0  # m-b needs about twice the nodes
    cache = 0.8 if doc["cache"]["dram_per_node_gb"] > 1000 else 1.0
    ttft = 40.0 * slow * cache / (SPEED[hw] * nodes["prefill"])
    tpot = 0.4 * slow / (SPEED[hw] * nodes["decode"])
    usd_h = PRICE_USD_PER_NODE_HOUR[hw] * sum(nodes.values())
    summary = {
        "requests_arrived": int(TASKS_PER_HOUR * REQUESTS_PER_TASK),
        "window_s": 3600.0,
        "requests_completed": 1000,
        "requests_rejected": 0,
        "ttft_p50_s": ttft / 2,
        "ttft_p90_s": ttft * 0.9,
        "ttft_p99_s": ttft,
        "tpot_p50_s": tpot / 2,
        "tpot_p99_s": tpot,
        "e2e_p50_s": ttft + 100 * tpot,
        "output_tokens_per_s": 1e4,
        "input_tokens_per_s": 1e5,
        "tasks_per_hour": TASKS_PER_HOUR,
        "slo_attainment": 1.0,
        "cluster_usd_per_hour": usd_h,
        "cost_per_task_usd": usd_h / TASKS_PER_HOUR,
        # steady loads that fall with node counts, under 0.5 wherever the latency bounds hold:
        # prefill busy ttft / 10, decode load tpot / 0.2 (its capacity below)
        "capacity": {
            "pools": [
                {"name": "prefill", "role": "prefill", "busy": ttft / 10},
                {"name": "decode", "role": "decode"},
            ]
        },  # fmt: skip
    }
    decode = {"decode": OUTPUT_TOKENS_PER_S / (tpot / 0.2)}
    return {"summary": summary, "decode_tokens_per_s": decode, "wall_s": 0.01}


class FakeBackend:
    evaluate = staticmethod(fake_evaluate)

    def fingerprint(self, scenario: dict[str, Any]) -> str:
        return "fake-v1"

    def workload_rate(self, scenario: dict[str, Any], seed: int) -> WorkloadRate:
        return WorkloadRate(TASKS_PER_HOUR, TASKS_PER_HOUR * REQUESTS_PER_TASK, OUTPUT_TOKENS_PER_S * 3600)

    def load_template(self, path: Path) -> dict[str, Any]:
        return yaml.safe_load(path.read_text())

    def model_overrides(self, template: dict[str, Any], model: str) -> dict[str, Any]:
        return {"models": [model]}

    def node_steps(self, scenario: dict[str, Any]) -> dict[str, int]:
        return {p["name"]: p.get("nodes_per_instance", 1) for p in scenario["cluster"]["pools"]}

    def inspect(self, scenario: dict[str, Any], model: str, *, file: str) -> Inspection:
        hw = scenario["hardware"]
        if hw not in SPEED:
            raise InputError("unknown hardware", file=file, value=hw)
        pools = {
            p["name"]: PoolUnit(
                p["nodes"], GPUS_PER_NODE, PRICE_USD_PER_NODE_HOUR[hw], p.get("nodes_per_instance", 1)
            )
            for p in scenario["cluster"]["pools"]
        }
        return Inspection(pools, "weights do not fit in HBM" if hw == "tiny" else None)


def write_plan(folder: Path, **changes: Any) -> Path:
    """A small plan over the fake backend (2 models x 2 hardware x 2 cache x 2 ratios)."""
    (folder / "tmpl.yaml").write_text(yaml.safe_dump(TEMPLATE, sort_keys=False))
    plan = {
        "name": "fake-plan",
        "template": "tmpl.yaml",
        "seed": 3,
        "models": ["m-a", "m-b"],
        "space": {
            "hardware": {"small": {"hardware": "small"}, "big": {"hardware": "big"}},
            "dram": {"1TB": {"cache.dram_per_node_gb": 1000}, "2TB": {"cache.dram_per_node_gb": 2000}},
        },
        "nodes": {
            "min": 1,
            "max": 16,
            "ratios": {"p1d1": {"prefill": 1, "decode": 1}, "p2d1": {"prefill": 2, "decode": 1}},
        },
        "constraints": {"ttft_p99_s": 5.0, "tpot_p99_s": 0.1, "min_slo_attainment_frac": 0.9},
    }
    plan.update(changes)
    path = folder / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path
