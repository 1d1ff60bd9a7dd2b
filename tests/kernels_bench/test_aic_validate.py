"""kernels_bench.aic_validate's command per validation case and its comparison (no AIC needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernels_bench.aic_validate import command, compare
from sim.validate.cases import load_cases


def _cases():
    return {c.case.name: c for c in load_cases(Path("scenarios/validation"))}


def test_command_mirrors_the_case_setup():
    cases = _cases()
    b200 = " ".join(command("aic", cases["v4-flash-4xb200-agg"], 38))
    assert "--system b200_sxm" in b200 and "--model-path nvidia/DeepSeek-V4-Flash-NVFP4" in b200
    assert (
        "--backend vllm" in b200
        and "--tp 4 --attention-dp-size 1 --moe-ep-size 1 --moe-tp-size 4 --bs 38" in b200
    )
    assert "--prefix 58982" in b200 and "--ctx-tokens 16384" in b200 and "--nextn" not in b200
    h200 = " ".join(command("aic", cases["v4-flash-4xh200-agg"], 16))
    assert "--tp 1 --attention-dp-size 4 --moe-ep-size 4 --moe-tp-size 1 --bs 4" in h200
    assert "--nextn 1 --nextn-accepted 0.85" in h200  # V4 MTP on prose (AIPerf's text) 1.85 (sim/model/acceptance.yaml)


def test_cookbook_cells_run_sglang_at_its_running_cap_and_chunk_per_rank():
    cases = _cases()
    ht = " ".join(command("aic", cases["sglang-v4-flash-4xb300-high-throughput-c4096"], 4096))
    # 4,096 clients, 256 running (V4's default), 64 on each of 4 DP ranks; chunk 16,384 // 4 a rank
    assert "--system b300_sxm --backend sglang" in ht and "--model-path deepseek-ai/DeepSeek-V4-Flash" in ht
    assert "--attention-dp-size 4 --moe-ep-size 4 --moe-tp-size 1 --bs 64" in ht and "--ctx-tokens 4096" in ht
    bal = " ".join(command("aic", cases["sglang-v4-flash-4xh200-balanced-c256"], 256))
    # the H200 balanced cell caps running at 128: 32 a rank; FP8 experts; chunk 8,192 // 4; MTP 1 at 1.91
    # (V4 MTP on SGLang's `random` text, sim/model/acceptance.yaml repeated_text)
    assert "--bs 32" in bal and "--moe-quant-mode fp8_block" in bal and "--ctx-tokens 2048" in bal
    assert "--nextn 1 --nextn-accepted 0.91" in bal


def test_compare_scores_each_published_metric():
    case = _cases()["sglang-v4-flash-4xb200-low-latency-c1"]
    published = case.case.published["output_tokens_per_s_per_gpu"]
    rows = {r["metric"]: r for r in compare(case, {"tokens_per_s_per_gpu": 2 * published, "ttft_ms": 454.0})}
    assert rows["output_tokens_per_s_per_gpu"]["aic_error"] == pytest.approx(1.0, abs=1e-9)  # twice the published
    assert rows["ttft_p50_s"]["aic"] == pytest.approx(0.454)  # ms -> s, as published
    assert rows["tokens_per_s_per_user"]["aic"] is None  # AIC printed none: no score
