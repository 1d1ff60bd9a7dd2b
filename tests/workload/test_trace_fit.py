"""`sim trace fit`: a spec fitted to a trace regenerates its input, output and think-time
percentiles (p10/p50/p90) within 10 %."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
from typer.testing import CliRunner

from sim.cli import app
from sim.paths import project_root
from sim.workload.generator import generate_trace
from sim.workload.spec import load_spec

SAMPLE = project_root() / "traces" / "agent_1M_sample.parquet"


def percentiles(path) -> dict[str, np.ndarray]:
    """p10/p50/p90 of top-level input and output tokens and of think times (think arrivals)."""
    t = pq.read_table(
        path, columns=["agent_id", "arrival", "input_tokens", "output_tokens", "think_time_s"]
    ).to_pandas()
    t = t[t["agent_id"] == 0]
    think = t.loc[t["arrival"] == "think", "think_time_s"]
    return {name: np.percentile(values, [10, 50, 90])
            for name, values in (("input", t["input_tokens"]), ("output", t["output_tokens"]), ("think", think))}  # fmt: skip


def fit_and_regenerate(source, tmp_path, days: float, seed: int) -> dict[str, np.ndarray]:
    spec_path = tmp_path / "fitted.yaml"
    result = CliRunner().invoke(app, ["trace", "fit", str(source), "-o", str(spec_path)])
    assert result.exit_code == 0, result.output
    load_spec(spec_path)  # the written YAML is a valid spec
    out = tmp_path / "regenerated.parquet"
    generate_trace(spec_path, out, seed=seed, days=days)
    want, got = percentiles(source), percentiles(out)
    return {name: got[name] / want[name] - 1 for name in want}


def test_weka_fit_reproduces_percentiles(weka_trace, tmp_path):
    # days=4: about four times the source's 530 sessions (the fit lays one day out to hold as many)
    errors = fit_and_regenerate(weka_trace, tmp_path, days=4, seed=0)
    for name, err in errors.items():
        assert np.all(np.abs(err) <= 0.10), f"{name} p10/p50/p90 off by {np.round(err * 100, 1)} %"


def test_fit_on_the_generated_sample(tmp_path):
    """No ../shared needed: fit the committed sample and regenerate it."""
    errors = fit_and_regenerate(SAMPLE, tmp_path, days=0.25, seed=1)
    for name, err in errors.items():
        assert np.all(np.abs(err) <= 0.10), f"{name}: {np.round(err * 100, 1)} %"
