"""The re-implemented SGLang V4.1 Hopper prefill indexer (kernels_bench.production.sglang_v41_indexer) at small
shapes on the CPU: it selects what an FP32 reference selects, chunks rows without changing the result, keeps the
source's candidate blocks, and confines a consumer to them."""

import pytest
import torch

from kernels_bench.production import sglang_v41_indexer as ix

SMALL = ix.Geometry(heads=4, topk=16, topk_blocks=4)


def _case(rows=8, lc=256, seed=0, g=SMALL):
    gen = torch.Generator().manual_seed(seed)
    return ix.make_pool(lc + 64, "cpu", gen), ix.make_request(rows, lc, g, "cpu", gen)


def test_dequant_reads_the_fp4_table_and_the_scales():
    gen = torch.Generator().manual_seed(1)
    pool = ix.make_pool(64, "cpu", gen)
    pool.pages.zero_()
    pool.pages[0, 0] = 0x71  # slot 0: value 0 = code 1 (0.5), value 1 = code 7 (6.0)
    pool.pages[0, ix.PAGE_SLOTS * ix.PAYLOAD_BYTES] = 128  # slot 0, first 32 values: scale 2^1
    keys = ix.dequant_keys(pool, torch.tensor([0]), 128).float()
    assert keys[0, :2].tolist() == [1.0, 12.0]
    assert keys[0, 32:].abs().sum() == 0  # code 0 is 0.0 whatever the scale (2^-127)


@pytest.mark.parametrize("role", ix.ROLES)
def test_selects_what_fp32_selects(role):
    pool, req = _case()
    src = ix.index_layer(pool, req, "source", SMALL)
    consume = src.mask if role == "consumer" else None
    out = ix.index_layer(pool, req, role, SMALL, consume)
    assert ix.check(pool, req, role, SMALL, out, consume) == 1.0
    picks = out.raw_indices.long()
    assert (picks < req.lens[:, None]).all()  # never a position past a row's reach
    valid = picks >= 0
    slots = torch.where(valid, req.slots[picks.clamp_min(0)].to(torch.int32), -1)
    assert torch.equal(out.page_indices, slots)  # page indices are the picked positions' pool slots


def test_row_chunks_do_not_change_the_result():
    pool, req = _case(rows=12, lc=200)
    whole = ix.index_layer(pool, req, "source", SMALL)
    tiny = SMALL._replace(score_budget_bytes=SMALL.heads * 200 * 2 * 5)  # 5 rows a chunk
    chunked = ix.index_layer(pool, req, "source", tiny)
    assert torch.equal(whole.raw_indices, chunked.raw_indices)
    assert torch.equal(whole.mask, chunked.mask)


def test_source_keeps_blocks_and_consumer_stays_inside_them():
    pool, req = _case(lc=256)
    src = ix.index_layer(pool, req, "source", SMALL)
    blocks = src.mask.reshape(src.mask.shape[0], -1, SMALL.block)
    assert (blocks.all(-1) == blocks.any(-1)).all()  # whole blocks
    assert (blocks.any(-1).sum(-1) == SMALL.topk_blocks).all()
    newest = (req.lens - 1) // SMALL.block
    assert blocks.any(-1)[torch.arange(len(newest)), newest].all()  # the newest block always kept
    out = ix.index_layer(pool, req, "consumer", SMALL, src.mask)
    picks = out.raw_indices.long()
    inside = torch.gather(src.mask, 1, picks.clamp_min(0)) | (picks < 0)
    assert inside.all()
    # 4 blocks of 8 hold 32 positions, more than top-16: every row fills its picks
    assert ((picks >= 0).sum(1) == SMALL.topk).all()


def test_main_refuses_without_cuda(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert ix.main(["--out", str(tmp_path)]) == 2
    assert "CUDA is not available" in capsys.readouterr().err


def test_the_traffic_estimate_grows_with_rows_and_width():
    """The estimate the prediction used: about 420 B per row and visible position at the copy bandwidth, plus the
    keys' dequantisation and the launches; the roles add their mask passes."""
    bw = 4.0e12
    big = ix.model_us("plain", 4096, 1 << 16, bw)
    launches_us = 16 * 16 * 10 + 100  # 16 row chunks of 16 ops, the request's synchronisations
    assert 4096 * 65536 * 400 / bw * 1e6 < big < 4096 * 65536 * 440 / bw * 1e6 + launches_us
    assert ix.model_us("plain", 8192, 1 << 16, bw) > 1.9 * big
    assert ix.model_us("plain", 4096, 1 << 16, bw) < ix.model_us("consumer", 4096, 1 << 16, bw)
    assert ix.model_us("consumer", 4096, 1 << 16, bw) < ix.model_us("source", 4096, 1 << 16, bw)


def test_score_chunks_are_the_layers_scores_in_any_chunking():
    """The timed scoring part (the share a fused score kernel replaces) computes the FP32 reference's scores up to
    BF16 rounding, with the causal positions removed, whether the rows fit one chunk or many."""
    pool, req = _case(rows=8, lc=256)
    ref = ix.reference_scores(pool, req, SMALL)
    whole = ix.score_chunks(pool, req, SMALL, keep=True)
    tiny = SMALL._replace(score_budget_bytes=SMALL.heads * 256 * 2 * 3)  # 3 rows a chunk
    chunked = ix.score_chunks(pool, req, tiny, keep=True)
    assert torch.equal(torch.isinf(whole), torch.isinf(ref))
    finite = torch.isfinite(ref)
    tol = 2e-2 * ref[finite].abs().max()
    assert (whole[finite] - ref[finite]).abs().max() <= tol
    assert torch.equal(whole, chunked)
    assert ix.score_chunks(pool, req, SMALL) is None


def test_derive_carries_a_measured_tables_excess_point_by_point(tmp_path):
    """`--derive-TBps X --scale-by T`: each point is the estimate at X times T's measured / estimated time at the
    same point (what the estimate misses, carried from the GPU T was measured on); a point T lacks has no time."""
    measured = tmp_path / "measured"
    ix.derive(measured, 3.0, "abc")  # stands in for a measured table: model_us at 3 TB/s ...
    path = measured / "sglang_v41_indexer.csv"
    lines = path.read_text().splitlines()
    head = [i for i, line in enumerate(lines) if line.startswith("role,")][0]
    cols = lines[head].split(",")
    body = []
    for line in lines[head + 1 :]:
        r = dict(zip(cols, line.split(","), strict=True))
        if (r["role"], r["rows"], r["lc"]) == ("plain", "16", "2048"):
            continue  # ... lacking one point
        r["time_us"] = str(round(1.5 * float(r["model_us"]), 1))  # ... measured 1.5x its estimate
        r["scores_us"] = str(round(1.2 * float(r["model_us"]), 1))
        body.append(",".join(r[c] for c in cols))
    path.write_text("\n".join(lines[: head + 1] + body) + "\n")
    ix.derive(tmp_path / "carried", 4.5, "abc", scale_by=path)
    got = ix.read_points(tmp_path / "carried" / "sglang_v41_indexer.csv")
    r = got[("source", 4096, 262144)]
    est = ix.model_us("source", 4096, 262144, 4.5e12)
    assert float(r["time_us"]) == pytest.approx(1.5 * est, rel=1e-3)
    assert float(r["scores_us"]) == pytest.approx(1.2 * est, rel=1e-3)
    assert ("plain", 16, 2048) not in got  # no time where the measured table has no point
    assert "DERIVED" in (tmp_path / "carried" / "sglang_v41_indexer.csv").read_text()


@pytest.mark.parametrize("role", ix.ROLES)
def test_the_fused_scorer_selects_what_fp32_selects(role):
    """With the fused score kernel (its torch stand-in on the CPU) each role still selects what FP32 would, in
    the fused path's own row chunks (FP32 [rows, lc], a quarter of the budget)."""
    pool, req = _case(rows=12, lc=256)
    tiny = SMALL._replace(score_budget_bytes=256 * 16 * 5)  # 5 rows a fused chunk; 10 a torch one (4 heads)
    assert ix.rows_per_chunk(tiny, 256, fused=True) == 5
    assert ix.rows_per_chunk(tiny, 256, fused=False) == 10
    assert ix.rows_per_chunk(ix.V41, 65536, fused=True) == 4 * ix.rows_per_chunk(ix.V41, 65536, fused=False)
    src = ix.index_layer(pool, req, "source", tiny, fused=True)
    consume = src.mask if role == "consumer" else None
    out = ix.index_layer(pool, req, role, tiny, consume, fused=True)
    assert ix.check(pool, req, role, tiny, out, consume) == 1.0
    if role == "source":  # the same candidate blocks as the torch path keeps
        assert torch.equal(src.mask, ix.index_layer(pool, req, "source", SMALL).mask)


@pytest.mark.gpu
def test_the_triton_fused_scores_match_their_fp32_stand_in():
    from kernels_bench.production.fused_index_scores import fused_scores

    gen = torch.Generator().manual_seed(3)
    pool = ix.make_pool(1000 + 64, "cuda", gen)
    req = ix.make_request(70, 1000, ix.V41, "cuda", gen)  # tiles cut on both edges
    keys = ix.dequant_keys(pool, req.slots, 128)
    got = fused_scores(req.q, keys, req.weights, req.lens)
    want = ix.fused_scores_torch(req.q, keys, req.weights, req.lens)
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    finite = torch.isfinite(want)
    assert (got[finite] - want[finite]).abs().max() <= 1e-2 * want[finite].abs().max()


def test_a_fused_table_carries_its_scoring_whole_and_its_rest_by_bandwidth(tmp_path):
    src = tmp_path / "fused.csv"
    lines = ["# copy_GBps: 3000.0", ",".join(ix.COLUMNS)]
    lines.append("plain,4096,262144,16,100.0,2.0,40.0,,7,1.0,")  # 40 us scoring, 60 us the rest
    lines.append("source,16,2048,1,10.0,1.0,12.0,,7,1.0,")  # scoring timed above the whole: capped at it
    src.write_text("\n".join(lines) + "\n")
    assert ix.carry_fused(tmp_path / "out", 4.5, "abc", src) == 0
    got = ix.read_points(tmp_path / "out" / "sglang_v41_indexer_fused.csv")
    assert float(got[("plain", 4096, 262144)]["time_us"]) == pytest.approx(40.0 + 60.0 * 3.0 / 4.5, abs=0.1)
    assert float(got[("source", 16, 2048)]["time_us"]) == pytest.approx(10.0)
    assert ix.main(["--out", str(tmp_path / "x"), "--variant", "fused", "--derive-TBps", "4.5"]) == 2
