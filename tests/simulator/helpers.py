"""Scenario builders for the simulator's tests (YAML written next to a tiny trace)."""

from __future__ import annotations

from pathlib import Path

import yaml

from sim.config.scenario import load_scenario


def scenario(tmp_path: Path, trace: Path, *, models=("deepseek-v4.1-flash",), pools=None, **sections):
    """A validated Scenario over `trace`; `sections` override top-level blocks (dicts are merged
    into the workload block when given as workload=...)."""
    data = {
        "name": "test",
        "seed": 0,
        "models": list(models),
        "hardware": "nvidia-h200-hgx8",
        "cluster": {
            "pools": pools
            or [
                {
                    "name": "coloc",
                    "role": "colocated",
                    "nodes": 1,
                    "gpus_per_instance": 8,
                    "tp": 1,
                    "ep": 8,
                    "dp": 8,
                }
            ]
        },
        "workload": {"trace": trace.name, "replay": "closed_loop"},
        "outputs": {"timeseries_interval_s": 5.0},
    }
    for key, value in sections.items():
        if key == "workload":
            data["workload"] = {**data["workload"], **value}
        elif key == "cluster":
            data["cluster"] = {**data["cluster"], **value}
        else:
            data[key] = value
    path = trace.parent / f"scenario_{len(list(trace.parent.glob('scenario_*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_scenario(path)


DISAGG = [
    {"name": "prefill", "role": "prefill", "nodes": 1, "gpus_per_instance": 8, "tp": 1, "ep": 8, "dp": 8},
    {"name": "decode", "role": "decode", "nodes": 2, "gpus_per_instance": 8, "tp": 1, "ep": 8, "dp": 8},
]
