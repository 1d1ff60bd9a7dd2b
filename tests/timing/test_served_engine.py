"""The served engine's step mechanisms in the calibrated timing (LM head, CUDA-graph row padding, prefill rows
through the decode kernel) and the served model's own forward-pass term (sim.timing.forward.served_check):
each would fail if its mechanism broke."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import pytest

from sim.errors import InputError
from sim.model.weights import head_bytes
from sim.timing.batch import DecodeTerms, PrefillChunk
from sim.timing.calibrated import build_calibrated
from sim.timing.forward import SERVE_REQUIRED, ServePoint, serve_step_s, served_check

MINI = "deepseek-v4-flash-mini"
BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 128, 256, 512, 1024, 2048, 2112)
A_S, B_S = 500e-6, 1.5e-6  # a known term: per layer, per layer and (padded) row


@pytest.fixture(scope="module")
def one_gpu(context, h200_tables):
    def make(**fields):
        return context(MINI, tp=1, ep=1, dp=1, **{"forward_term": "none", **fields})

    return make


def test_lm_head_is_charged_once_per_logit_row_at_its_weight_read(one_gpu):
    tm = build_calibrated(one_gpu())
    spec = tm.arith.spec
    read_s = head_bytes(spec) / (tm.hw.hbm_bw_bytes_per_s * tm.eff.hbm_bw_frac)
    assert tm.head_s(1) == pytest.approx(read_s) and 2e-4 < read_s < 4e-4  # 1.06 GB of BF16 on the H200
    assert tm.head_s(0) == 0.0 and tm.head_s(100_000) > read_s  # compute-bound past the ridge
    # the tables' GEMM scaling no longer counts the head's FLOPs
    assert tm._gemm_scale == pytest.approx(
        (tm.arith.dense_flops_per_token - 2.0 * spec.vocab * spec.hidden) / tm.mt.covered_flops_per_token
    )
    terms = tm.decode_seq_terms(8192, 1)
    parts = tm.decode_breakdown(1, 8192)
    assert parts["lm_head_s"] == tm.head_s(1)
    assert tm.step_s(1, terms, ()) == pytest.approx(sum(parts.values()))
    # a prefill chunk asks for the logits of its last row only
    chunk = [PrefillChunk(2048, 0, last_chunk=True)]
    assert tm.step_s(0, DecodeTerms(), chunk) - tm.head_s(1) == pytest.approx(
        tm.step_s(0, DecodeTerms(), chunk) - read_s
    )


def test_graph_buckets_pad_the_rows_of_gemms_but_not_above_the_last(one_gpu):
    padded = build_calibrated(one_gpu(row_buckets=BUCKETS))
    plain = build_calibrated(one_gpu())
    assert [padded.padded_rows(r) for r in (1, 3, 33, 64, 65, 2049, 2113, 5000)] == [
        1,
        4,
        48,
        64,
        128,
        2112,
        2113,
        5000,
    ]
    assert plain.padded_rows(33) == 33
    terms = plain.decode_seq_terms(8192, 1)
    # 33 sequences run the GEMMs, experts and mHC of 48 rows; attention stays at 33
    assert padded._pass_s(33, 33) == pytest.approx(plain._pass_s(48, 48))
    assert padded.step_s(33, terms.scaled(33), ()) == pytest.approx(
        plain._pass_s(48, 48) + plain.head_s(33) + plain._attn_curve(33).at(8192)
    )


def test_prefill_rows_through_the_decode_kernel_are_decode_queries(one_gpu):
    tm = build_calibrated(one_gpu(prefill_through_decode=True))
    ref = build_calibrated(one_gpu())
    new, ctx = 2048, 8192
    chunk = [PrefillChunk(new, ctx, last_chunk=True)]
    attn = tm.step_s(0, DecodeTerms(), chunk) - tm._pass_s(new, new) - tm.head_s(1)
    assert attn == pytest.approx(tm._rows_attention_s(new, ctx + (new + 1) / 2))
    assert tm.step_s(0, DecodeTerms(), chunk) != pytest.approx(ref.step_s(0, DecodeTerms(), chunk))
    # a mixed step: one decode pipeline call over decode and prefill rows, at their mean context
    terms = tm.decode_seq_terms(32768, 1).scaled(16)
    mixed = tm.step_s(16, terms, chunk) - tm._pass_s(16 + new, 16 + new) - tm.head_s(17)
    mean = (16 * 32768 + new * (ctx + (new + 1) / 2)) / (16 + new)
    assert mixed == pytest.approx(tm._rows_attention_s(16 + new, mean))
    # decode-only steps do not change
    assert tm.step_s(16, terms, ()) == ref.step_s(16, terms, ())


POINTS = (
    [("decode", b, c, 0, 0) for b in (1, 3, 8, 33, 64) for c in (2048, 32768)]
    + [("prefill", 0, 0, t, c) for t, c in ((128, 0), (512, 0), (2000, 0), (2048, 8192))]
    + [("mixed", 16, 8192, 2048, 8192), ("mixed", 32, 8192, 512, 0)]
)


def _serve_table(path: Path, ctx, measured) -> Path:
    with path.open("w", newline="") as f:
        f.write("# gpu_name: fixture (tests)\n")
        w = csv.DictWriter(f, fieldnames=[*SERVE_REQUIRED, "note"])
        w.writeheader()
        for (mode, b, c, t, pc), m in zip(POINTS, measured, strict=True):
            w.writerow(dict(spec=ctx.model_name, mode=mode, batch=b, context_tokens=c, chunk_tokens=t,
                            prefill_context_tokens=pc, wall_us_p50=m * 1e6))  # fmt: skip
        w.writerow(dict(spec=ctx.model_name, mode="decode", batch=2, context_tokens=1, chunk_tokens=0,
                        prefill_context_tokens=0, wall_us_p50="", note="failed"))  # fmt: skip
    return path


def test_served_term_is_recovered_on_padded_rows_with_leave_one_out(one_gpu, tmp_path):
    ctx = one_gpu(row_buckets=BUCKETS, prefill_through_decode=True)
    bare = build_calibrated(ctx)
    pts = [ServePoint(0, MINI, *p, 0.0) for p in POINTS]
    measured = [serve_step_s(bare, p) + 5 * (A_S + B_S * bare.padded_rows(p.rows)) for p in pts]
    path = _serve_table(tmp_path / "serve_step_times.csv", ctx, measured)
    check = served_check(path, replace(ctx, forward_term="served"))
    assert check.term.per_layer_s == pytest.approx(A_S, rel=1e-6)
    assert check.term.per_layer_row_s == pytest.approx(B_S, rel=1e-6)
    assert len(check.rows) == len(POINTS) and check.term.points == len(POINTS)
    for r in check.rows:
        assert abs(r["error"]) < 1e-9 and abs(r["loo_error"]) < 1e-6
    summary = check.summary()
    assert {"loo_median_abs_error", "loo_max_abs_error"} <= set(summary)
    # a noisy point: the in-sample fit absorbs part of it, the leave-one-out error shows all of it
    noisy = [m * (1.3 if i == 0 else 1.0) for i, m in enumerate(measured)]
    check = served_check(_serve_table(tmp_path / "noisy.csv", ctx, noisy), ctx)
    assert abs(check.rows[0]["loo_error"]) > abs(check.rows[0]["error"])


def test_served_term_enters_the_step_and_is_refused_for_another_model(one_gpu, context, tmp_path):
    tm = build_calibrated(one_gpu(forward_term="served", row_buckets=BUCKETS, prefill_through_decode=True))
    bare = build_calibrated(one_gpu(row_buckets=BUCKETS, prefill_through_decode=True))
    assert tm.layer_overhead_s > 0  # the committed table (hwprofiles/h200/serve)
    terms = tm.decode_seq_terms(8192, 1).scaled(33)
    term = 5 * (tm.layer_overhead_s + tm.layer_row_overhead_s * 48)
    assert tm.step_s(33, terms, ()) == pytest.approx(bare.step_s(33, terms, ()) + term)
    with pytest.raises(InputError, match="another model"):
        build_calibrated(context("deepseek-v4-flash", tp=1, ep=1, dp=1, forward_term="served"))
    # off the H200 the H200's term is carried (tests/timing/test_host_and_glue.py), and refused alike
    with pytest.raises(InputError, match="another model"):
        build_calibrated(
            context("deepseek-v4-flash", "nvidia-b200-hgx8", tp=1, ep=1, dp=1, forward_term="served")
        )


def test_bad_graph_buckets_are_a_config_error(tmp_path):
    from pydantic import ValidationError

    from sim.config.timing import Timing

    Timing(graph_row_buckets=[1, 2, 4])
    for bad in ([4, 2], [0, 1], [1, 1]):
        with pytest.raises((ValidationError, InputError, ValueError), match="graph_row_buckets"):
            Timing(graph_row_buckets=bad)


@pytest.mark.parametrize(
    "point", [(1, 8192, 0, 0), (33, 8192, 0, 0), (0, 0, 2048, 8192), (16, 8192, 2048, 8192)]
)
def test_the_breakdown_parts_add_up_to_the_step(one_gpu, point):
    """kernels_bench.serve.predict --breakdown: sim's parts of a step (LM head, attention, GEMMs, experts, mHC,
    term) are the step, split as the bench splits its kernels."""
    from kernels_bench.serve.predict import predict_step_s, sim_parts_us

    tm = build_calibrated(one_gpu(forward_term="served", row_buckets=BUCKETS, prefill_through_decode=True))
    parts = sim_parts_us(tm, *point)
    assert sum(parts.values()) == pytest.approx(predict_step_s(tm, *point) * 1e6)
    assert parts["lm_head_us"] == pytest.approx(tm.head_s(1) * 1e6) and parts["attention_us"] > 0
    assert parts["served_term_us"] == pytest.approx(
        5 * (tm.layer_overhead_s + tm.layer_row_overhead_s * tm.padded_rows(point[0] + point[2])) * 1e6
    )


def test_rows_past_the_pipelines_batches_grow_by_their_kernels_only(one_gpu):
    """Prefill rows through the decode kernel past the pipeline's measured batches (128): its sparse MLA and
    indexer kernels follow their own measured curves, its top-k and glue stay at their value at 128
    (sim.timing.rows_attention); at or below 128 the pipeline is read as measured."""
    tm = build_calibrated(one_gpu(prefill_through_decode=True))
    kinds = dict(zip(sorted(tm.mt.pipelines), tm._rows_pipelines, strict=True))
    csa, _n = kinds["CSA"]
    grid, _layers = tm.mt.pipelines["CSA"]
    assert csa.batch_max == 128 and len(csa.kernels) == 2  # FlashMLA (production) and the indexer
    for b in (1, 64, 128):
        assert csa.at(8192, b) == grid.at(8192, b)
    kernels = [sum(k.at(8192, b) for k in csa.kernels) for b in (128, 2048)]
    rest = grid.at(8192, 128) - kernels[0]
    assert rest > 0 and csa.at(8192, 2048) == pytest.approx(rest + kernels[1])
    # FlashMLA is measured to 512 rows: 2,048 rows cost 4x its 512-row time, not 16x its 128-row time
    mla = csa.kernels[0]
    assert mla.at(8192, 2048) == pytest.approx(4 * mla.at(8192, 512))
    assert csa.at(8192, 2048) < grid.at(8192, 2048)  # the proportional rule charged the rest 16 times
    swa, _ = kinds["SWA"]
    assert len(swa.kernels) == 1  # no indexer in a sliding-window layer
    # decode steps do not go through it
    plain = build_calibrated(one_gpu())
    terms = tm.decode_seq_terms(8192, 1).scaled(200)
    assert tm.step_s(200, terms, ()) == plain.step_s(200, terms, ())
