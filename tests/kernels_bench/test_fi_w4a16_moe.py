"""The FlashInfer SM90 W4A16 MoE benchmark (kernels_bench.production.fi_w4a16_moe): its routing, MXFP4 decoding and
FP32 reference on the CPU at small shapes; the kernel itself against that reference on an SM90 GPU with FlashInfer."""

import pytest
import torch

from kernels_bench.production import fi_w4a16_moe as fi


@pytest.mark.parametrize(("tokens", "experts", "top_k"), [(1, 8, 2), (5, 8, 3), (64, 384, 6), (7, 6, 6)])
def test_routing_is_balanced_and_a_tokens_experts_distinct(tokens, experts, top_k):
    ids = fi.balanced_routing(tokens, experts, top_k, torch.Generator().manual_seed(3))
    assert ids.shape == (tokens, top_k) and ids.dtype == torch.int32
    counts = torch.bincount(ids.flatten().long(), minlength=experts)
    assert int(counts.max() - counts.min()) <= 1  # every expert within one pair of the others
    assert all(len(set(row.tolist())) == top_k for row in ids)


def test_routing_refuses_more_picks_than_experts():
    with pytest.raises(ValueError, match="top_k"):
        fi.balanced_routing(2, 4, 5, torch.Generator())


def test_dequant_reads_codes_low_nibble_first_and_the_ue8m0_scale():
    packed = torch.zeros(1, 1, 16, dtype=torch.uint8)
    packed[0, 0, 0] = 0x71  # element 0: code 1 (0.5); element 1: code 7 (6.0)
    packed[0, 0, 16 - 1] = 0x9F  # elements 30, 31: code 15 (-6.0), code 9 (-0.5)
    scales = torch.tensor([[[128]]], dtype=torch.uint8)  # 2^(128 - 127) = 2
    w = fi.dequant_mxfp4(packed, scales)
    assert w.shape == (1, 1, 32)
    assert w[0, 0, :2].tolist() == [1.0, 12.0] and w[0, 0, 30:].tolist() == [-12.0, -1.0]
    assert w[0, 0, 2:30].abs().sum() == 0


def test_random_weights_stay_finite_and_decode_to_the_fp4_grid():
    packed, scales = fi.random_mxfp4(2, 64, 128, torch.Generator().manual_seed(0))
    assert packed.shape == (2, 64, 64) and scales.shape == (2, 64, 4)
    w = fi.dequant_mxfp4(packed, scales)
    assert torch.isfinite(w).all() and w.abs().max() <= 6.0
    grid = {abs(v) * 2.0**e for v in fi.FP4_E2M1 for e in range(-6, 1)}
    assert {float(v) for v in w.abs().unique()} <= grid


def test_reference_moe_is_the_swiglu_moe_over_local_experts_only():
    gen = torch.Generator().manual_seed(5)
    hidden, inter, experts, ep = 32, 16, 4, 2
    x = torch.randn(3, hidden, generator=gen)
    experts_of = torch.tensor([[0, 3], [1, 2], [2, 0]], dtype=torch.int32)
    weights_of = torch.tensor([[0.25, 0.75], [0.5, 0.5], [1.0, 0.0]])
    fc1 = dict(enumerate(torch.randn(experts // ep, 2 * inter, hidden, generator=gen)))
    fc2 = dict(enumerate(torch.randn(experts // ep, hidden, inter, generator=gen)))
    local = range(0, experts // ep)  # rank 0 holds experts 0 and 1
    got = fi.reference_moe(x, experts_of, weights_of, fc1, fc2, local, gate_first=True)

    def expert(e, v):
        h = fc1[e] @ v
        return fc2[e] @ (torch.nn.functional.silu(h[:inter]) * h[inter:])

    want = torch.stack(
        [
            0.25 * expert(0, x[0]),
            0.5 * expert(1, x[1]),
            0.0 * expert(0, x[2]),
        ]  # experts 2, 3 are another rank's
    )
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5)
    swapped = fi.reference_moe(x, experts_of, weights_of, fc1, fc2, local, gate_first=False)
    assert not torch.allclose(swapped, got)


def test_the_measured_shapes_are_the_served_models():
    from sim.model.spec import load_model

    for shape in fi.SHAPES:
        spec = load_model(shape.model)
        assert (shape.experts, shape.top_k) == (spec.moe.routed_experts, spec.moe.top_k)
        assert (
            spec.moe.expert_linears["w1"]
            == [shape.hidden, shape.intermediate]
            == spec.moe.expert_linears["w3"]
        )
        assert shape.hidden == spec.hidden
    for split in fi.SPLITS:  # every split holds whole experts and 128-wide slices (the scales' fold)
        assert split.shape.experts % split.ep == 0 and split.shape.intermediate % (128 * split.tp) == 0


def test_compare_puts_marlins_time_beside_each_measured_row(tmp_path):
    path = tmp_path / "fi.csv"
    path.write_text(
        "# what: test\n"
        "hidden,intermediate,experts,top_k,ep,tp,tokens,time_us,samples,check,note\n"
        "5120,2304,384,6,8,1,64,100.0,9,ok,\n"
        "5120,2304,384,6,8,1,4096,900.0,9,ok,\n"
        "4096,2048,256,6,1,4,64,,,,'failed'\n"
    )
    rows = fi.compare(path, "h200")
    assert [r["tokens"] for r in rows] == ["64", "4096"]  # the failed row is left out
    assert all(
        r["marlin_us"] > 0 and r["marlin_over_fi"] == round(r["marlin_us"] / float(r["time_us"]), 2)
        for r in rows
    )
    assert rows[1]["marlin_us"] > rows[0]["marlin_us"]  # more rows an expert, more time


@pytest.mark.gpu
def test_kernel_matches_the_fp32_reference_on_sm90():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("needs an SM90 GPU")
    pytest.importorskip("flashinfer", reason="FlashInfer is carried to the device, not installed with sim")
    gen = torch.Generator().manual_seed(0)
    for ep, tp in ((1, 1), (8, 1), (1, 4)):
        layer = fi.Layer(fi.V4, ep, gen, tp=tp)
        assert "rel_l2" in fi.check(layer, gen, tokens=4)
