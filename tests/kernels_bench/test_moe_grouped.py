"""kernels_bench.production.moe_grouped: the pass's routing as the benchmark feeds it (CPU), and on a GPU both
kernels checked against their float64 references at a small point."""

from __future__ import annotations

import pytest
import torch

from kernels_bench.production.forward import Dims
from kernels_bench.production.moe_grouped import EXPERTS, TOP_K, _routing


def test_the_routing_is_the_passes_and_is_seeded():
    d = Dims()
    xs, counts = _routing(8, d, seed=3, device="cpu")
    assert counts.shape == (EXPERTS,) and int(counts.sum()) == 8 * TOP_K == xs.shape[0]
    xs2, counts2 = _routing(8, d, seed=3, device="cpu")
    assert torch.equal(counts, counts2) and torch.equal(xs, xs2)


@pytest.mark.gpu
def test_both_kernels_match_their_references_on_a_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU and DeepGEMM (README, Kernels)")
    pytest.importorskip("deep_gemm")
    from kernels_bench.production.forward import quant_weight_grouped
    from kernels_bench.production.moe_grouped import _deepgemm_case, _rel_err, _torch_case

    d = Dims()
    g = torch.Generator(device="cuda").manual_seed(1)
    gu = torch.randn(EXPERTS, 2 * d.inter, d.hidden, generator=g, device="cuda") / d.hidden**0.5
    dn = torch.randn(EXPERTS, d.hidden, d.inter, generator=g, device="cuda") / d.inter**0.5
    xs, counts = _routing(8, d, seed=2, device="cuda")
    _run, ref = _torch_case(xs, counts, quant_weight_grouped(gu), quant_weight_grouped(dn), d.inter)
    assert _rel_err(*ref()) < 2e-2
    for mode in ("decode", "prefill"):
        _run, ref = _deepgemm_case(xs, counts, gu, dn, mode, d.inter)
        assert _rel_err(*ref()) < 2e-2
