"""The forward-pass stack (kernels_bench.production.forward) with reference kernels at small shapes (CPU),
and against the production kernels on the GPU (``gpu``); the host-issue measurement's launch attribution
and per-op timing on the reference stack."""

from __future__ import annotations

import csv
from dataclasses import replace

import pytest
import torch

from kernels_bench.production import forward as fw
from kernels_bench.production import host_issue as hi

SMALL = fw.Dims(
    heads=8,  # FlashMLA needs 64 (the GPU test); the reference any
    hidden=512,  # every GEMM K / 128 a multiple of 4 (cuBLASLt blockwise, hwprofiles/h200/README.md)
    q_lora=512,
    o_lora=128,
    index_heads=16,
    topk=64,
    window=16,
    experts=8,
    inter=128,
    shared_inter=512,
    compressor_out={"CSA": 256, "HCA": 128},
    index_compressor_out=128,
)
KINDS = ["SWA", "CSA", "HCA"]


@pytest.mark.parametrize("mode,batch,chunk", [("decode", 2, 0), ("prefill", 1, 32)])
def test_reference_stack_runs_and_is_deterministic(mode, batch, chunk):
    stack = fw.Stack(
        KINDS, SMALL, fw.RefKernels(), mode=mode, batch=batch, context=1024, chunk=chunk, device="cpu"
    )
    n = stack.layers[0].n
    y1 = stack.run()[:n].clone()
    y2 = stack.run()[:n]
    assert y1.shape == (n, SMALL.hidden) and torch.isfinite(y1).all()
    assert torch.equal(y1, y2)
    cats = {c for c, _, _ in stack.op_list}
    assert cats == set(fw.CATEGORIES)
    csa = stack.layers[1]
    if mode == "decode":  # top-k indices stay inside each sequence's compressed rows
        idx = csa.att.idx_b[:, 0].long()
        lo = csa.key_base
        assert ((idx >= lo) & (idx < lo + csa.n_c)).all()
    else:  # the window then 64 selected compressed entries, none beyond the pool
        idx = csa.att.idx[:, 0]
        assert (idx[:, SMALL.window :] >= csa.att.comp_base).all()
        assert (idx < csa.att.kv.shape[0]).all()


def test_the_grouped_gemms_rowwise_quantisation_is_booked_as_glue_not_expert_time():
    """The routed experts' in-call quantisation is an op of its own under act_quant (docs/carry/moe_grouped):
    the expert GEMM ops are the two grouped GEMMs alone, and splitting the call does not change the output."""
    stack = fw.Stack(
        ["SWA"], SMALL, fw.RefKernels(), mode="decode", batch=3, context=1024, chunk=0, device="cpu"
    )
    ops = [(c, n) for c, n, _ in stack.op_list]
    assert [n for c, n in ops if c == "moe"] == ["gate_up", "down"]
    assert ("act_quant", "quant_xs") in ops and ("act_quant", "quant_a") in ops
    assert ops.index(("act_quant", "quant_xs")) == ops.index(("moe", "gate_up")) - 1
    stack.run()
    act, k = stack.layers[0].act, fw.RefKernels()
    whole = k.grouped(act["xs"], stack.layers[0].gate_up, act["counts"])
    assert torch.equal(whole, act["gu"])


def test_moe_routes_every_token_to_six_experts():
    stack = fw.Stack(
        ["SWA"], SMALL, fw.RefKernels(), mode="decode", batch=3, context=1024, chunk=0, device="cpu"
    )
    stack.run()
    act = stack.layers[0].act
    assert int(act["counts"].sum()) == 3 * SMALL.experts_per_token
    assert sorted(act["tok"].tolist()) == sorted(list(range(3)) * SMALL.experts_per_token)
    assert torch.allclose(
        act["wsorted"].view(-1).sum(), torch.tensor(3.0), atol=1e-4
    )  # weights sum to 1 per token
    assert act["dn"].shape == (3 * SMALL.experts_per_token, SMALL.hidden)


def test_points_cover_the_issue_grid():
    pts = fw.points("full")
    dec = {(b, L) for s, m, b, L, _ in pts if m == "decode" and s == "reduced"}
    assert dec == {(b, L) for b in (1, 8, 64, 256) for L in (8192, 131072)}
    assert {t for s, m, _, _, t in pts if m == "prefill"} == {512, 4096}
    assert fw.layer_kinds_label(fw.STACKS["reduced"]) == "SWA;CSA4;HCA128;CSA4;HCA128"


@pytest.mark.gpu
@pytest.mark.parametrize("mode,batch,chunk", [("decode", 4, 0), ("prefill", 1, 64)])
def test_production_stack_matches_reference_stack(mode, batch, chunk):
    try:
        gpu = fw.GpuKernels()
    except Exception as e:  # noqa: BLE001 - packages missing on this machine
        pytest.skip(str(e)[:200])
    """Same weights and inputs through both stacks. The discrete choices (router top-6, indexer top-k) are
    made total here (6 of 6 experts, every compressed entry). Each production component swapped into the
    reference stack must move the output no more than twice what a 0.1 % change of the input does (FP8
    activation rounding makes the stack rough; see forward.component_errors); each kernel is checked to
    ~2e-3 on its own in the production tables."""
    kw = dict(mode=mode, batch=batch, context=8192 - chunk, chunk=chunk, device="cuda", seed=3)
    # FlashMLA: 64 heads, top-k in blocks of 64 (prefill 128); 2048 = all CSA entries at 8K
    dims = replace(SMALL, heads=64, window=128, topk=2048, experts=6)
    errs = fw.component_errors(KINDS, dims, gpu, **kw)
    print("component errors", errs)
    sens = errs.pop("sensitivity")
    assert 0 < sens < 0.2
    assert max(errs.values()) < 2 * sens, (sens, errs)
    a = fw.Stack(KINDS, dims, gpu, **kw)
    b = fw.Stack(KINDS, dims, fw.RefKernels(), **kw)
    ya, yb = a.run().float(), b.run().float()
    assert torch.isfinite(ya).all()
    assert ((ya - yb).norm() / yb.norm()).item() < 3 * sens


# ---- the host-issue measurement (kernels_bench.production.host_issue; the GPU run is a device call) ----


def test_launches_are_counted_in_the_op_whose_range_holds_them():
    ranges = [(10.0, 20.0, 1), (0.0, 10.0, 0), (25.0, 30.0, 2)]  # op 2 starts after a gap
    launches = [0.0, 5.0, 9.99, 10.0, 19.0, 22.0, 25.0, 31.0, -1.0]
    assert hi.attribute_launches(ranges, launches, 3) == [3, 2, 1]  # 22, 31 and -1 fall in no op


def test_only_launch_copy_and_fill_calls_count():
    assert (
        hi.is_launch("cudaLaunchKernel")
        and hi.is_launch("cuLaunchKernelEx")
        and hi.is_launch("cudaMemcpyAsync")
    )
    assert not hi.is_launch("aten::add_") and not hi.is_launch("cudaStreamSynchronize")


def test_per_op_host_times_and_launches_cover_every_op_of_the_pass():
    stack = fw.Stack(
        KINDS, SMALL, fw.RefKernels(), mode="prefill", batch=1, context=1024, chunk=32, device="cpu"
    )
    host = hi.op_host_us(stack, passes=2)
    launches = hi.op_launches(stack)
    assert len(host) == len(launches) == len(stack.op_list)
    assert all(t > 0 for t in host)
    assert launches == [0] * len(stack.op_list)  # no GPU: nothing launched
    assert fw.eager_host_us(stack, passes=2) > 0


def test_the_csv_reads_back_cells_holding_commas_and_quotes(tmp_path):
    path = tmp_path / "x.csv"
    hi.write_csv(path, ("call", "note"), [{"call": "a, b", "note": 'say "x"'}], {"commit": "abc"})
    text = path.read_text()
    assert text.startswith("# commit: abc\n")
    rows = list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))
    assert rows == [{"call": "a, b", "note": 'say "x"'}]


# ---- a host wait in every MoE layer (kernels_bench.production.sync_exposure; the GPU run is a device call) ----


def test_the_pipeline_is_the_slower_queue_without_waits():
    from kernels_bench.production.sync_exposure import Op, pipeline_s

    host_bound = [Op(1.0, 0.2, False)] * 10
    gpu_bound = [Op(0.2, 1.0, False)] * 10
    assert pipeline_s(host_bound) == pytest.approx(10.0 + 0.2)  # the last op's kernels after its issue
    assert pipeline_s(gpu_bound) == pytest.approx(0.2 + 10.0)  # the first issue before the GPU starts


def test_a_wait_exposes_the_work_ordered_behind_it():
    from kernels_bench.production.sync_exposure import Op, pipeline_s

    # a layer: many cheap-to-run ops the host takes long to issue, then one heavy kernel, then the wait
    layer = [Op(1.0, 0.1, False)] * 3 + [Op(0.1, 3.0, True)]
    free = pipeline_s([op._replace(wait=False) for op in layer] * 4)
    waited = pipeline_s(layer * 4)
    assert free == pytest.approx(3.1 + 3.0 + 3 * (0.3 + 3.0))  # the host issues ahead while heavy kernels run
    assert waited == pytest.approx(4 * (3.1 + 3.0))  # each layer: the issue, then the heavy kernel, serially
    assert waited > free


def test_the_wait_follows_each_layers_routing():
    from kernels_bench.production.sync_exposure import WAIT_AFTER, wait_ops

    stack = fw.Stack(
        KINDS, SMALL, fw.RefKernels(), mode="prefill", batch=1, context=1024, chunk=32, device="cpu"
    )
    ops = wait_ops(stack)
    names = [name for _, name, _ in ops]
    assert names.count("dispatch_wait") == len(KINDS)
    assert all(names[i - 1] == WAIT_AFTER for i, n in enumerate(names) if n == "dispatch_wait")
