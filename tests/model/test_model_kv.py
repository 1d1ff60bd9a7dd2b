"""KV bytes against model.md §5 (exact figures) and their per-layer / per-component consistency."""

import numpy as np
import pytest

from sim.errors import InputError
from sim.model import (
    compressor_state_bytes_per_sequence,
    global_kv_bytes_per_token,
    global_kv_bytes_per_token_by_component,
    global_kv_bytes_per_token_by_layer,
    load_model,
    model_names,
    persistent_bytes,
    swa_bytes_per_sequence,
)

V4, V41 = "deepseek-v4-flash", "deepseek-v4.1-flash"
MI = 1 << 20


def test_v41_890_bytes_per_token_720_main_170_index():  # model.md §5.1 [A, S1]
    spec = load_model(V41)
    assert global_kv_bytes_per_token(spec) == 890
    assert global_kv_bytes_per_token_by_component(spec) == {"main": 720, "index": 170}
    assert global_kv_bytes_per_token(spec, "sglang") == 1630  # §5.2 [B, S24]


def test_v4_3514_25_bytes_per_token_and_fp8_index_keys():  # model.md §5.1
    spec = load_model(V4)
    assert global_kv_bytes_per_token(spec) == 3514.25
    assert global_kv_bytes_per_token_by_component(spec) == {"main": 3157.25, "index": 357}
    assert global_kv_bytes_per_token(spec, "fp8_index") == 3850.25
    assert global_kv_bytes_per_token(spec) / global_kv_bytes_per_token(load_model(V41)) == pytest.approx(
        3.95, abs=0.005
    )


def test_reference_models():  # model.md §5.1
    llm67 = global_kv_bytes_per_token(load_model("deepseek-llm-67b"))
    v32 = global_kv_bytes_per_token(load_model("deepseek-v3.2"))
    assert llm67 == 389_120
    assert llm67 / 890 == pytest.approx(437.2, abs=0.05)
    assert v32 == 48_068
    assert 3514.25 / v32 == pytest.approx(0.073, abs=0.0005)


@pytest.mark.parametrize("name", model_names())
def test_layers_and_components_sum_to_total(name):
    spec = load_model(name)
    for layout in spec.kv_layouts:
        rows = global_kv_bytes_per_token_by_layer(spec, layout)
        assert [r.layer for r in rows] == list(range(spec.n_layers))
        comp = global_kv_bytes_per_token_by_component(spec, layout)
        assert sum(r.main_bytes_per_token for r in rows) == comp["main"]
        assert sum(r.total_bytes_per_token for r in rows) == global_kv_bytes_per_token(spec, layout)
        assert sum(r.swa_bytes_per_sequence for r in rows) == swa_bytes_per_sequence(spec, layout)


def test_v41_only_the_four_full_layers_store_kv():  # model.md §4.2
    rows = global_kv_bytes_per_token_by_layer(load_model(V41))
    assert {r.layer: r.total_bytes_per_token for r in rows if r.total_bytes_per_token} == {
        2: 178,
        8: 178,
        14: 178,
        20: 356,
    }


def test_swa_bytes_per_sequence():  # model.md §5.2: 2.70 MB / 2.99 MB / 3.21 MB
    assert swa_bytes_per_sequence(load_model(V41)) == 40 * 128 * 528 == 2_703_360
    assert swa_bytes_per_sequence(load_model(V41), "sglang") == 2_990_080
    assert swa_bytes_per_sequence(load_model(V4)) == 43 * 128 * 584 == 3_214_336
    assert swa_bytes_per_sequence(load_model("deepseek-llm-67b")) == 0


def test_compressor_state():  # model.md §5.2: V4 21 x 80 KiB + 20 x 512 KiB = 12.2 MB; V4.1 3 x 8 KiB
    assert compressor_state_bytes_per_sequence(load_model(V4)) == 21 * 80 * 1024 + 20 * 512 * 1024
    assert compressor_state_bytes_per_sequence(load_model(V4)) == pytest.approx(12.2e6, rel=0.005)
    assert compressor_state_bytes_per_sequence(load_model(V41)) == 24_576


def test_session_of_1m_tokens():  # model.md §5.2: 3.68 GB vs 0.93 GB
    assert persistent_bytes(load_model(V4), MI, "global_kv") == pytest.approx(3.68e9, rel=0.002)
    assert persistent_bytes(load_model(V41), MI, "global_kv") == pytest.approx(0.933e9, rel=0.001)
    assert persistent_bytes(load_model(V41), MI, "global_kv", layout="sglang") == pytest.approx(
        1.71e9, rel=0.002
    )


def test_persistent_policies_and_vectorised():
    spec = load_model(V41)
    ctx = np.array([0, 1, 1000])
    kv = persistent_bytes(spec, ctx, "global_kv")
    plus = persistent_bytes(spec, ctx, "global_kv_plus_swa")
    assert list(kv) == [0, 890, 890_000]
    assert list(plus - kv) == [0, 2_703_360, 2_703_360]  # SWA: a fixed cost per non-empty sequence
    full = persistent_bytes(spec, 1000, "global_kv_plus_swa_plus_compressor")
    assert full == 890_000 + 2_703_360 + 24_576
    with pytest.raises(InputError, match="allowed: global_kv"):
        persistent_bytes(spec, 10, "everything")
    with pytest.raises(InputError):
        persistent_bytes(spec, -1, "global_kv")


def test_unknown_layout_names_allowed_ones():
    with pytest.raises(InputError, match="allowed: fp4_index, fp8_index"):
        global_kv_bytes_per_token(load_model(V4), "sglang")
