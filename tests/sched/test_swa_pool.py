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


def test_sglangs_mem_fraction_static_term_by_term():
    from sim.sched.swa_pool import sglang_decode_graph_max_bs, sglang_mem_fraction_static

    # 8xH100 at TP8, chunk 8,192: 512 + 8,192 x 1.5 + 512 x 2 (decode graphs) + 8 / 8 x 1,024 = 14,848 MiB of 81,559
    assert sglang_decode_graph_max_bs(81559, 8) == 512 and sglang_decode_graph_max_bs(81559, 2) == 256
    h100 = sglang_mem_fraction_static(81559, chunked_prefill_tokens=8192, tp_size=8, dp_size=1, dp_attention=False,
                                      deepep=False)  # fmt: skip
    assert h100 == round((81559 - 14848) / 81559, 3) == 0.818
    # DP attention at DP 4 with DeepEP: + 512 x 4 x 3, + 512 x 4 x 1.5 (max batch over 300), + 2,048
    dp = sglang_mem_fraction_static(143771, chunked_prefill_tokens=8192, tp_size=4, dp_size=4, dp_attention=True,
                                    deepep=True)  # fmt: skip
    assert dp == round((143771 - (512 + 12288 + 1024 + 512 + 6144 + 3072 + 2048)) / 143771, 3)
    # a small chunk on a large GPU: the 10 GiB floor
    assert sglang_mem_fraction_static(143771, chunked_prefill_tokens=2048, tp_size=1, dp_size=1, dp_attention=False,
                                      deepep=False) == round((143771 - 10240) / 143771, 3)  # fmt: skip


def test_a_tp8_h100_cell_sizes_its_pool_from_sglangs_rule():
    """The built instance's pool: SGLang's share of the H100's memory, less the weights on a GPU."""
    import copy

    import yaml

    from sim.cluster.build import build_simulation, instance_weight_bytes
    from sim.config.errors import validate_or_raise
    from sim.config.scenario import Scenario
    from sim.hardware import load_hw
    from sim.paths import project_root
    from sim.sched.swa_pool import sglang_mem_fraction_static
    from sim.timing.arith import build_arith

    path = (
        project_root() / "scenarios" / "validation" / "sglang-v4-flash-fp4-8xh100-high-throughput-c1024.yaml"
    )
    scn = validate_or_raise(
        Scenario, copy.deepcopy(yaml.safe_load(path.read_text())["scenario"]), file=str(path)
    )
    one = scn.for_model(scn.models[0].name)
    inst = build_simulation(one, one.models[0], build_arith(scn.models[0].name), out_dir=None).instances[0]
    hw = load_hw("nvidia-h100-hgx8")
    frac = sglang_mem_fraction_static(hw.hbm_capacity_bytes / 2**20, chunked_prefill_tokens=8192, tp_size=8,
                                      dp_size=1, dp_attention=False, deepep=False)  # fmt: skip
    weights_per_gpu = instance_weight_bytes(load_model("deepseek-v4-flash"), 1, True) / 8
    want = sglang_v4_swa_pool(load_model("deepseek-v4-flash"), kv_bytes_per_gpu=hw.hbm_capacity_bytes * frac
                              - weights_per_gpu, speculative=False, running_per_rank=256)  # fmt: skip
    assert inst._swa_free == [want.tokens] and 500_000 < want.tokens < 700_000  # ~130 random 8K prompts
