"""SGLang's SWA token pool for DeepSeek-V4 (sim.sched.swa_pool): the pool's size is SGLang's arithmetic on V4-Flash's
numbers, a request holds its last prefill chunk's leaf and its decode window, and only SGLang 0.5.15 / 0.5.16 with
V4 keep such a pool."""

from __future__ import annotations

import pytest

from sim.config.engine_rules import swa_token_pool
from sim.config.scenario import Engine
from sim.model import load_model
from sim.sched.swa_pool import (
    SwaPool,
    V4PoolShape,
    bytes_per_full_token,
    c128_state_bytes,
    sglang_v4_swa_pool,
)


def test_v4_flash_pool_shape_and_sglangs_bytes_per_full_token():
    shape = V4PoolShape.of(load_model("deepseek-v4-flash"))
    # 584-B rows, 128-wide index keys, 512-wide heads; 21 ratio-4 and 20 ratio-128 layers of 43; a 128 window
    assert shape == V4PoolShape(584, 128, 512, 21, 20, 43, 128)
    # pool_configurator.py _get_bytes_per_full_token, term by term: the SWA rows at 0.1, c4 rows at 1/4, c128
    # rows at 1/128, FP8 index keys (128 + 4 B) at 1/4, the c4 and index states of the SWA pages' 8-slot rings
    plain = 0.1 * 584 * 43 + 584 * 21 / 4 + 584 * 20 / 128 + 132 * 21 / 4 + 0.1 * 8 / 128 * (8192 + 2048) * 21
    assert bytes_per_full_token(shape, speculative=False) == pytest.approx(plain)  # 7,705 B
    # with a draft model: 16-slot rings, and (43 + 1) / 43 for its layer
    spec = (plain + 0.1 * 8 / 128 * (8192 + 2048) * 21) * 44 / 43
    assert bytes_per_full_token(shape, speculative=True) == pytest.approx(spec)  # 9,260 B
    # the c128 states of 257 request slots x a 128-slot ring, + 129, up to whole 128 rows (33,152) x 2 x 512 FP32 x
    # 20 layers
    assert c128_state_bytes(shape, speculative=False, running_per_rank=256) == 33152 * 2 * 512 * 4 * 20


def test_the_pool_is_a_tenth_of_the_full_pool_in_whole_pages():
    spec = load_model("deepseek-v4-flash")
    pool = sglang_v4_swa_pool(spec, kv_bytes_per_gpu=50e9, speculative=False, running_per_rank=256)
    shape = V4PoolShape.of(spec)
    full = int((50e9 - c128_state_bytes(shape, speculative=False, running_per_rank=256))
               / bytes_per_full_token(shape, speculative=False)) // 256 * 256  # fmt: skip
    assert pool.tokens == int(full * 0.1) // 256 * 256 and pool.tokens % 256 == 0
    assert (pool.page_tokens, pool.window_tokens, pool.decode_tokens) == (256, 128, 128 + 128 + 128)
    less = sglang_v4_swa_pool(spec, kv_bytes_per_gpu=50e9, speculative=True, running_per_rank=256)
    assert less.tokens < pool.tokens  # a draft model's bytes and larger rings


def test_a_request_holds_its_last_chunks_leaf_page_rounded_and_its_decode_window():
    pool = SwaPool(tokens=100_000, page_tokens=256, window_tokens=128, decode_tokens=384)
    assert pool.held_tokens(4000) == 4096 + 384
    assert pool.held_tokens(50) == 256 + 384  # the lock walks up to the window: one page at least
    # admitted against a whole last chunk: the prompt, or the chunk where the prompt is longer
    assert pool.admission_tokens(4000, 8192) == pool.held_tokens(4000)
    assert pool.admission_tokens(12000, 8192) == pool.held_tokens(8192)


@pytest.mark.parametrize(
    ("name", "version", "model", "kept"),
    [
        ("sglang", "0.5.15", "deepseek-v4-flash", True),
        ("sglang", "0.5.16", "deepseek-v4-flash", True),
        ("sglang", "0.5.15", "deepseek-v4.1-flash", False),  # another pool layout, not read
        ("sglang", "main@006cbb66", "deepseek-v4-flash", False),  # #34653 frees windows at prefill
        ("vllm", "0.26.0", "deepseek-v4-flash", False),
    ],
)
def test_only_sglang_0_5_15_and_0_5_16_keep_v4s_windows_in_a_capped_pool(name, version, model, kept):
    assert swa_token_pool(Engine(name=name, version=version), model) is kept
    assert swa_token_pool(None, model) is False
