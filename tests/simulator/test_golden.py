"""The summary of `scenarios/smoke.yaml` against a committed golden copy, beside the invariants
(sim/metrics/invariants.py, checked in every run): the golden file catches any change of the
numbers, the invariants say whether a changed number can be right.

A change of the simulator that is meant to change the smoke numbers regenerates the golden file
and commits it with the change, saying why the numbers moved:

    .venv/bin/python tests/simulator/test_golden.py

Only the `models` block is compared (the run id and the scenario echo hold absolute paths).
Floats are compared to 1e-9 relative (an ulp of a libm function on another machine must not fail
CI; any real change of the model moves them far more), everything else exactly.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

GOLDEN = Path(__file__).parent / "golden" / "smoke_summary.json"
REL_TOL = 1e-9


def smoke_models(out_dir: Path) -> dict:
    from sim.api import run_scenario
    from sim.paths import project_root

    result = run_scenario(project_root() / "scenarios" / "smoke.yaml", out_dir=out_dir)
    return json.loads(json.dumps(result.summary["models"]))  # as written to summary.json


def differences(got, want, path: str = "models") -> list[str]:
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{path}.{k}: missing" for k in want if k not in got]
        out += [f"{path}.{k}: new field" for k in got if k not in want]
        for k in want.keys() & got.keys():
            out += differences(got[k], want[k], f"{path}.{k}")
        return out
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return [
            d
            for i, (g, w) in enumerate(zip(got, want, strict=True))
            for d in differences(g, w, f"{path}[{i}]")
        ]
    if isinstance(want, float) and isinstance(got, float | int) and not isinstance(got, bool):
        if math.isclose(got, want, rel_tol=REL_TOL, abs_tol=0.0) or (math.isnan(got) and math.isnan(want)):
            return []
    elif got == want and type(got) is type(want):
        return []
    return [f"{path}: {got!r} (golden {want!r})"]


def test_smoke_summary_matches_the_golden_file(tmp_path):
    want = json.loads(GOLDEN.read_text())
    diff = differences(smoke_models(tmp_path / "out"), want)
    assert not diff, (
        f"scenarios/smoke.yaml's summary differs from {GOLDEN.name} in {len(diff)} places "
        "(if the change is meant, regenerate: .venv/bin/python tests/simulator/test_golden.py):\n"
        + "\n".join(diff[:40])
    )


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        models = smoke_models(Path(tmp) / "out")
    GOLDEN.write_text(json.dumps(models, indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}", file=sys.stderr)
