"""kernels_bench.aic_validate's command per validation case and its operating-point score (no AIC needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernels_bench.aic_validate import at_tpot, command
from sim.validate.cases import load_cases


def _cases():
    return {c.case.name: c for c in load_cases(Path("scenarios/validation"))}


def test_command_mirrors_the_case_setup():
    cases = _cases()
    b200 = " ".join(command("aic", cases["v4-flash-4xb200-agg"], 38))
    assert "--system b200_sxm" in b200 and "--model-path nvidia/DeepSeek-V4-Flash-NVFP4" in b200
    assert "--tp 4 --attention-dp-size 1 --moe-ep-size 1 --moe-tp-size 4 --bs 38" in b200
    assert "--prefix 58982" in b200 and "--ctx-tokens 16384" in b200 and "--nextn" not in b200
    h200 = " ".join(command("aic", cases["v4-flash-4xh200-agg"], 16, "static_gen"))
    assert "--tp 1 --attention-dp-size 4 --moe-ep-size 4 --moe-tp-size 1 --bs 4" in h200
    assert "--nextn 1 --nextn-accepted 0.85" in h200 and "--ctx-tokens" not in h200


def test_at_tpot_takes_the_best_point_meeting_the_target():
    pts = [
        {"tpot_ms": t, "tokens_per_s_per_gpu": x}
        for t, x in ((10, 50), (19, 100), (21, 120), (18, 200), (30, 300))
    ]
    # met: 50, 100, 200; crossings 19->21: 110, 21->18: ~146.7, 18->30: ~216.7 (the best)
    assert at_tpot(pts, 20.0) == pytest.approx(200 + 2 / 12 * 100)
    assert at_tpot([{"tpot_ms": 25.0, "tokens_per_s_per_gpu": 9.0}], 20.0) is None
