"""Kernel stacks (sim.timing.stacks): the production stack replaces, derives and recomposes
operations by the stated rules, on a small fixture production table (the schema kernels_bench's
production stack writes); `timing.kernels` picks the stack of a run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sim.config.timing import Timing
from sim.errors import InputError
from sim.timing.batch import DecodeTerms
from sim.timing.calibrated import CalibratedTiming
from sim.timing.factory import make_timing
from sim.timing.stacks import OpTimes, compose_production, load_stack, op_of
from sim.timing.tables import load_tables

FIXTURE = Path(__file__).parent / "fixtures" / "production_results.csv"
K = 1024


@pytest.fixture(scope="module")
def prod(h200_tables):
    return compose_production(h200_tables, load_tables(FIXTURE))


def _rows(tables, **equal):
    return [r for r in tables.rows if all(getattr(r, k) == v for k, v in equal.items())]


def _source(tables, family, kernel, model, kind):
    (s,) = [
        s
        for s in tables.sources
        if (s.family, s.kernel, s.model, s.layer_kind) == (family, kernel, model, kind)
    ]
    return s


def test_a_production_operation_replaces_ours_at_every_shape(prod):
    rows = _rows(prod, family="attention", kernel="sparse_mla_decode", model="V4", layer_kind="CSA")
    assert {r.impl for r in rows} == {"flashmla"} and len(rows) == 7
    assert {r.package for r in rows} == {"sgl-flash-mla 1.0.0"}
    s = _source(prod, "attention", "sparse_mla_decode", "V4", "CSA")
    assert s.origin == "production" and s.note == "sgl-flash-mla 1.0.0"
    # mHC: the production boundary replaces our fused and unfused kernels alike
    assert {r.impl for r in _rows(prod, family="mhc", model="V4")} == {"tilelang"}


def test_an_operation_production_lacks_keeps_ours_flagged(prod, h200_tables):
    mine = _rows(h200_tables, family="gemm_dense", kernel="proj_wq_b", model="V4")
    assert _rows(prod, family="gemm_dense", kernel="proj_wq_b", model="V4") == mine
    s = _source(prod, "gemm_dense", "proj_wq_b", "V4", "wq_b")
    assert s.origin == "kernels_bench" and s.note == "no production kernel"


def test_v41_sparse_decode_is_ours_scaled_by_the_v4_ratio(prod, h200_tables):
    ref_ours = OpTimes(
        _rows(h200_tables, family="attention", kernel="sparse_mla_decode", model="V4", layer_kind="CSA")
    )
    ref_prod = OpTimes(
        _rows(prod, family="attention", kernel="sparse_mla_decode", model="V4", layer_kind="CSA")
    )
    for mine in _rows(h200_tables, family="attention", kernel="sparse_mla_decode", model="V4.1"):
        b = mine.batch
        (theirs,) = [r for r in _rows(prod, kernel="sparse_mla_decode", model="V4.1") if r.batch == b]
        assert theirs.impl == "derived"
        assert theirs.median_s == pytest.approx(mine.median_s * ref_prod.at(0, b) / ref_ours.at(0, b))
    assert _source(prod, "attention", "sparse_mla_decode", "V4.1", "CSA2").origin == "derived"


def test_pipelines_swap_in_the_production_components(prod, h200_tables):
    mla_ours = OpTimes(
        _rows(h200_tables, family="attention", kernel="sparse_mla_decode", model="V4", layer_kind="CSA")
    )
    for mine in _rows(h200_tables, family="pipeline", model="V4", layer_kind="CSA"):
        (theirs,) = [
            r
            for r in _rows(prod, family="pipeline", model="V4", layer_kind="CSA")
            if (r.batch, r.context_tokens) == (mine.batch, mine.context_tokens)
        ]
        want = (
            mine.median_s
            - mla_ours.at(0, mine.batch)
            + mla_ours.at(0, mine.batch)
            * (
                OpTimes(_rows(prod, kernel="sparse_mla_decode", model="V4", layer_kind="CSA")).at(
                    0, mine.batch
                )
                / mla_ours.at(0, mine.batch)
            )
        )
        assert theirs.median_s == pytest.approx(want)
        assert theirs.median_s < mine.median_s  # FlashMLA is faster at every batch (kernels.md §9a)
    note = _source(prod, "pipeline", "decode_layer", "V4", "CSA").note
    assert "sparse_mla_decode CSA (production)" in note and "top-k and glue ours" in note
    # V4.1 pipelines take the derived CSA2 kernel
    assert (
        "sparse_mla_decode CSA2 (derived)" in _source(prod, "pipeline", "decode_layer", "V4.1", "Reuse").note
    )


def test_every_operation_has_one_source(prod):
    ops = {op_of(r) for r in prod.rows}
    keys = [(s.family, s.kernel, s.model, s.layer_kind) for s in prod.sources]
    assert len(keys) == len(set(keys)) and set(keys) == ops


def test_without_a_production_table_production_is_ours_flagged(h200_tables):
    stack = compose_production(h200_tables, None)
    assert stack.stack == "production" and stack.rows == h200_tables.rows
    assert {s.origin for s in stack.sources} == {"kernels_bench"}
    assert all(s.note == "no production table for this GPU" for s in stack.sources)


@pytest.fixture()
def home_with_production(tmp_path, monkeypatch, h200_tables):
    """A project root whose H200 folder holds our table and the fixture production table."""
    root = Path(h200_tables.path).parent.parent
    home = tmp_path / "home"
    (home / "hwprofiles" / "h200").mkdir(parents=True)
    for profile in root.glob("*.yaml"):
        shutil.copy(profile, home / "hwprofiles" / profile.name)
    shutil.copy(h200_tables.path, home / "hwprofiles" / "h200" / h200_tables.path.name)
    shutil.copy(FIXTURE, home / "hwprofiles" / "h200" / FIXTURE.name)
    monkeypatch.setenv("SIM_HOME", str(home))
    return home


def test_timing_kernels_picks_the_stack(context, home_with_production):
    fast = make_timing("calibrated", context(kernels="production"))
    ours = make_timing("calibrated", context(kernels="kernels_bench"))
    assert isinstance(fast, CalibratedTiming) and fast.tables.stack == "production"
    assert ours.tables.stack == "kernels_bench"
    for batch in (8, 64, 512):
        t = [m.step_s(batch, DecodeTerms(context_tokens=8 * K * batch), ()) for m in (fast, ours)]
        assert t[0] < t[1]  # faster attention and mHC
    assert load_stack("h200", "production").path.name == FIXTURE.name


def test_unknown_stack_is_refused():
    with pytest.raises(InputError, match="unknown kernel stack"):
        load_stack("h200", "cudnn")
    with pytest.raises(Exception, match="kernels"):
        Timing.model_validate({"kernels": "cudnn"})
    assert Timing().kernels == "auto"  # sim.timing.aic resolved_stack: aic where an engine is named, else production


# ---- the committed H200 production table: DeepGEMM's kernels are what the production stack runs ----------


@pytest.fixture(scope="module")
def committed():
    return load_stack("h200", "production"), load_stack("h200", "kernels_bench")


@pytest.mark.parametrize(
    "family,kernel,model,kind",
    [
        ("indexer", "indexer_prefill", "V4", "CSA"),
        ("indexer", "indexer_prefill", "V4.1", "Full-enc"),
        ("indexer", "indexer_decode", "V4", "CSA"),
        ("indexer", "indexer_decode", "V4.1", "Full-enc"),
        ("indexer", "indexer_decode", "V4.1", "Full-L20"),
        ("gemm_grouped", "moe_gate_up", "V4", "gate_up"),
        ("gemm_grouped", "moe_down", "V4.1", "down"),
        ("gemm_dense", "proj_wq_b", "V4", "wq_b"),
        ("gemm_dense", "proj_wo_b", "V4.1", "wo_b"),
    ],
)
def test_production_stack_runs_deepgemm(committed, family, kernel, model, kind):
    prod_stack, ours = committed
    rows = _rows(prod_stack, family=family, kernel=kernel, model=model, layer_kind=kind)
    assert rows and {r.impl for r in rows} == {"deepgemm"}, {r.impl for r in rows}
    assert {r.package.split()[0] for r in rows} == {"deep-gemm"}
    assert _source(prod_stack, family, kernel, model, kind).origin == "production"
    # the kernels_bench stack keeps the project's own kernels (Triton, CUTLASS, cuBLAS)
    assert "deepgemm" not in {r.impl for r in _rows(ours, family=family, kernel=kernel, model=model)}


def test_deepgemm_rows_are_preferred_over_cublas_of_the_same_kernel(committed):
    prod_stack, _ = committed
    table = load_tables(prod_stack.path)
    both = _rows(table, family="gemm_dense", kernel="proj_wq_a", model="V4")
    assert {r.impl for r in both} == {"cublas", "deepgemm"}  # the table keeps both measurements
    assert {r.impl for r in _rows(prod_stack, family="gemm_dense", kernel="proj_wq_a", model="V4")} == {
        "deepgemm"
    }
    # V4.1's Reindex has no SM90 DeepGEMM kernel (sparse MQA logits are SM100-only): rule 3 derives it
    assert _source(prod_stack, "indexer", "indexer_decode", "V4.1", "Reindex").origin == "derived"


def test_calibrated_prefill_indexer_reads_the_deepgemm_rows(context):
    """At a measured (chunk, context) point the production step's indexer is DeepGEMM's time (grid-exact)."""
    cal = make_timing("calibrated", context(kernels="production"))
    (row,) = [
        r
        for r in _rows(cal.tables, family="indexer", kernel="indexer_prefill", model="V4")
        if r.chunk_tokens == 2048 and r.context_tokens == 128 * K
    ]
    assert row.impl == "deepgemm"
    assert cal.mt.index_prefill.at(2048.0, 128 * K + 2048.0) == pytest.approx(row.median_s, rel=1e-12)


# ---- speculative verify steps (rule 5) on the committed H200 tables ---------------------------------------


def test_verify_pipelines_swap_in_the_verify_kernels_at_the_sequences(committed):
    """At a measured point inside our pipeline's batches: our pipeline at B x s_q rows less our two kernels
    there, plus FlashMLA's and DeepGEMM's verify rows at B sequences of s_q rows (grid-exact)."""
    prod_stack, ours = committed
    B, L, s_q = 32, 128 * K, 2

    def at(tables, **equal):
        return OpTimes(_rows(tables, **equal))

    pipe = at(ours, family="pipeline", kernel="decode_layer", model="V4", layer_kind="CSA")
    mla = at(ours, family="attention", kernel="sparse_mla_decode", model="V4", layer_kind="CSA")
    idx = at(ours, family="indexer", kernel="indexer_decode", model="V4", layer_kind="CSA")
    table = load_tables(prod_stack.path)
    (mla_v,) = [
        r
        for r in _rows(table, kernel="sparse_mla_decode_spec", impl="flashmla", layer_kind="CSA")
        if (r.batch, r.rows) == (B, B * s_q)
    ]
    (idx_v,) = [
        r
        for r in _rows(table, kernel="indexer_decode_spec", impl="deepgemm", model="V4")
        if (r.batch, r.rows, r.context_tokens) == (B, B * s_q, L)
    ]
    rest = pipe.at(L, B * s_q) - mla.at(L, B * s_q) - idx.at(L, B * s_q)
    (row,) = [
        r
        for r in _rows(prod_stack, kernel="decode_layer_spec", model="V4", layer_kind="CSA")
        if (r.batch, r.rows, r.context_tokens) == (B, B * s_q, L)
    ]
    assert row.median_s == pytest.approx(rest + mla_v.median_s + idx_v.median_s, rel=1e-9)
    # each sequence's index keys read once for its two rows: cheaper than two sequences of one row
    plain = at(prod_stack, family="pipeline", kernel="decode_layer", model="V4", layer_kind="CSA")
    assert row.median_s < 0.9 * plain.at(L, B * s_q)
    note = _source(prod_stack, "pipeline", "decode_layer_spec", "V4", "CSA").note
    assert "indexer_decode_spec CSA (production)" in note and "s_q 4" in note


def test_four_verify_rows_score_as_sequences_of_one_row_on_sm90(committed):
    """DeepGEMM's SM90 paged MQA logits take next_n <= 2: 4 verify rows read the expanded rows."""
    prod_stack, _ = committed
    rows = [r for r in _rows(prod_stack, kernel="indexer_decode_spec", model="V4.1") if r.rows == 4 * r.batch]
    assert rows and {r.impl for r in rows} == {"deepgemm_expanded"}
    two = [r for r in _rows(prod_stack, kernel="indexer_decode_spec", model="V4.1") if r.rows == 2 * r.batch]
    assert {r.impl for r in two} == {"deepgemm"}  # the native call, its expanded control left in the table
    assert _source(prod_stack, "pipeline", "decode_layer_spec", "V4.1", "Reindex").origin == "derived"


def test_every_operation_of_the_committed_stack_has_one_source(committed):
    prod_stack, _ = committed
    ops = {op_of(r) for r in prod_stack.rows}
    keys = [(s.family, s.kernel, s.model, s.layer_kind) for s in prod_stack.sources]
    assert len(keys) == len(set(keys)) and set(keys) == ops
