"""The forward-pass check (sim.timing.forward): the reduced spec is the measured stack, the term is
recovered from measurements that carry a known one, the check reports per point, the term is
carried to other GPUs by its rule, and a broken table is a clean input error."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from sim.errors import InputError
from sim.hardware import load_hw
from sim.timing.forward import (
    REQUIRED,
    WHOLE_LAYER,
    ForwardPoint,
    GpuShare,
    check,
    fit_term,
    forward_term,
    kernels_s,
    load_points,
    reduced_spec,
)
from sim.timing.stacks import load_stack

LABELS = {"swa": "SWA", "csa": "CSA4", "hca": "HCA128"}
STACKS = (("csa",), ("swa", "csa", "hca", "csa", "hca"))
A_S, B_S = 4e-6, 3e-9  # the known term: per layer, per layer and row


def _points():
    out = []
    for kinds in STACKS:
        for context in (8192, 131072):
            for batch in (1, 8, 64, 256):
                out.append(("decode", kinds, batch, context, 0))
        for chunk in (512, 4096):
            out.append(("prefill", kinds, 1, 8192, chunk))
    return out


def _write(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="") as f:
        f.write("# gpu_name: fixture (tests)\n")
        w = csv.DictWriter(f, fieldnames=[*REQUIRED, "routing_us", "note"])
        w.writeheader()
        w.writerows(rows)


@pytest.fixture(scope="module")
def h200():
    return load_hw("nvidia-h200-hgx8")


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory, h200, h200_tables):
    """A forward-pass table whose measurements are our kernels plus the known term."""
    tables = load_stack("h200", "production")
    rows = []
    for mode, kinds, batch, context, chunk in _points():
        p = ForwardPoint(
            0, "deepseek-v4-flash", mode, "deepseek-v4-flash", kinds, 32, 6, batch, context, chunk, 1, 1, 0
        )
        k = kernels_s(p, tables, h200)
        measured = k + len(kinds) * (A_S + B_S * p.rows)
        rows.append(
            dict(
                model="deepseek-v4-flash",
                mode=mode,
                spec="deepseek-v4-flash",
                n_layers=len(kinds),
                layer_kinds=";".join(LABELS[x] for x in kinds),
                n_routed_experts=32,
                experts_per_token=6,
                batch=batch,
                context_tokens=context,
                chunk_tokens=chunk,
                measured_us_p50=measured * 1e6,
                # half the term is glue ops the pass times (in its kernel sum), half launch gaps beyond it
                kernel_sum_us=(k + len(kinds) * (A_S + B_S * p.rows) / 2) * 1e6,
                routing_us=len(kinds) * (A_S + B_S * p.rows) / 2 * 1e6,
            )
        )
    rows.append({**rows[0], "measured_us_p50": "", "note": "RuntimeError: a failed point"})
    path = tmp_path_factory.mktemp("fwd") / "forward_pass_results.csv"
    _write(path, rows)
    return path, tables


def test_the_reduced_spec_is_the_measured_stack():
    spec = reduced_spec("deepseek-v4-flash", ("swa", "csa", "hca"), 32, 6)
    assert [x.attention for x in spec.layers] == ["swa", "csa", "hca"]
    assert all(x.mlp == "moe" for x in spec.layers) and spec.moe.routed_experts == 32 and spec.vocab == 1
    assert spec.name == "deepseek-v4-flash" and spec.layers[1].top_k == 512


def test_the_term_is_recovered_and_every_point_predicted(synthetic, h200):
    path, tables = synthetic
    result = check(path, tables, h200)
    assert result.term.per_layer_s == pytest.approx(A_S, rel=1e-6)
    assert result.term.per_layer_row_s == pytest.approx(B_S, rel=1e-6)
    assert result.glue.per_layer_s == pytest.approx(A_S / 2, rel=1e-6)
    assert result.glue.per_layer_row_s == pytest.approx(B_S / 2, rel=1e-6)
    assert result.skipped == 1 and len(result.rows) == len(_points())
    for r in result.rows:
        assert abs(r["error"]) < 1e-9 and abs(r["loo_error"]) < 1e-6
    summary = result.summary()
    assert summary["target_met"] and summary["within_10pct"] == len(_points())


def test_fit_without_row_variation_takes_a_constant():
    p = ForwardPoint(0, "m", "decode", "s", ("csa",), 32, 6, 8, 8192, 0, 2e-4, 0.0, 0.0)
    a, b = fit_term([p, p], [1e-4, 1e-4])
    assert a == pytest.approx(1e-4) and b == 0.0


def test_the_term_enters_the_step_and_is_carried(synthetic, h200, context, monkeypatch, tmp_path):
    """With a forward table in place, H200 steps carry the fitted term, TP ranks its per-row part
    over their share of the rows, and B200 each pass carried part by part (forward.TERM_PARTS): the launch
    gaps unscaled, the glue ops by the SMs' issue rate, the kernel time our tables miss by our kernels'
    B200/H200 ratio at its point."""
    from sim.timing import forward
    from sim.timing.carry import tables_for

    path, tables = synthetic
    result = check(path, tables, h200)
    monkeypatch.setattr(forward, "reference_check", lambda: result)
    assert forward_term(h200, "measured") == result.term and forward_term(h200, "none").per_layer_s == 0.0
    fused = forward_term(h200)  # the default: less the pass's glue ops (half of the known term here)
    assert fused.per_layer_s == pytest.approx(A_S / 2) and fused.per_layer_row_s == pytest.approx(B_S / 2)
    b200_hw = load_hw("nvidia-b200-hgx8")
    b200 = forward_term(b200_hw, "measured")
    b200_tables = tables_for(b200_hw, "production")
    ratios = []
    sm = 148 / 132  # B200 / H200 SMs, same maximum clock (hwprofiles sm_count, sm_clock_max_MHz)
    for p in load_points(path)[1]:
        k_h, k_b = kernels_s(p, tables, h200), kernels_s(p, b200_tables, b200_hw)
        ratios.append(k_b / k_h)
        launch, glue, missed = p.measured_s - p.kernel_sum_s, p.glue_s, p.kernel_sum_s - p.glue_s - k_h
        assert forward.pass_parts(p, k_h, k_b / k_h, sm, "measured") == pytest.approx(
            {"launch": launch, "glue": glue / sm, "kernels_missed": missed * k_b / k_h}
        )
        carried = k_b + launch + glue / sm + missed * k_b / k_h
        predicted = k_b + len(p.layer_kinds) * (b200.per_layer_s + b200.per_layer_row_s * p.rows)
        assert predicted == pytest.approx(carried, rel=0.02)
    assert max(ratios) < 1.0  # B200 runs every point faster, so the term shrinks with it
    assert b200.per_layer_s < A_S and b200.per_layer_row_s < B_S
    parts = dict(forward.carried_check(b200_hw, "measured").parts)
    assert sum(t.per_layer_s for t in parts.values()) == pytest.approx(b200.per_layer_s, rel=1e-6)
    from sim.timing.calibrated import build_calibrated

    parts = {
        which: build_calibrated(context("deepseek-v4-flash", forward_term=which)).decode_breakdown(64, 8192)
        for which in ("measured", "fused_glue", "none")
    }
    # 64 sequences on DP 8: 8 rows a GPU, 43 layers
    assert parts["measured"]["forward_term_s"] == pytest.approx(43 * (A_S + B_S * 8), rel=1e-6)
    assert parts["fused_glue"]["forward_term_s"] == pytest.approx(43 * (A_S + B_S * 8) / 2, rel=1e-6)
    assert parts["none"]["forward_term_s"] == 0.0
    # TP 4 x DP 2: the straggler's DP group holds 32 sequences, a TP rank a quarter of their work
    tp4 = build_calibrated(context("deepseek-v4-flash", tp=4, dp=2, forward_term="measured"))
    assert tp4.decode_breakdown(64, 8192)["forward_term_s"] == pytest.approx(
        43 * (A_S + B_S * 32 / 4), rel=1e-6
    )


def test_a_broken_table_is_a_clean_input_error(tmp_path):
    path = tmp_path / "forward_pass_results.csv"
    row = dict.fromkeys(REQUIRED, "1")
    row.update(mode="decode", layer_kinds="CSA4;MLA9", model="m", spec="deepseek-v4-flash")
    _write(path, [row])
    with pytest.raises(InputError, match="unknown layer kind") as err:
        load_points(path)
    assert "line 3" in str(err.value) and str(path) in str(err.value)
    row.update(layer_kinds="CSA4", batch="many")
    _write(path, [row])
    with pytest.raises(InputError, match="not a number"):
        load_points(path)


def test_the_carried_term_is_memoised_by_the_gpus_tables(synthetic, h200, monkeypatch):
    """No module-level memo: the carried fit lives with the GPU's kernel tables, once per term and reference."""
    from sim.timing import forward
    from sim.timing.carry import tables_for

    path, tables = synthetic
    result = check(path, tables, h200)
    monkeypatch.setattr(forward, "reference_check", lambda: result)
    b200_hw = load_hw("nvidia-b200-hgx8")
    first = forward.carried_check(b200_hw, "measured")
    assert forward.carried_check(b200_hw, "measured") is first
    key = ("carried_forward_term", "measured", WHOLE_LAYER, result.path, result.term, result.glue)
    assert tables_for(b200_hw, "production").derived(key, lambda: None) is first
    assert forward.carried_check(b200_hw, "fused_glue") is not first
    assert not hasattr(forward, "_CARRIED")


def test_a_tp_gpu_carries_the_per_layer_part_to_its_share_of_the_kernels(h200, context):
    """On a GPU of an attention- and expert-TP group the missed kernel work shrinks with our kernels there; the
    launch gaps do not, and the per-row part keeps its m / tp split in the timing."""
    from sim.timing import forward
    from sim.timing.calibrated import build_calibrated

    tables = load_stack("h200", "production")
    point = load_points(forward.forward_path("h200"))[1][0]
    assert kernels_s(point, tables, h200, GpuShare(4, 4)) < kernels_s(point, tables, h200, GpuShare(4, 1))
    assert kernels_s(point, tables, h200, GpuShare(4, 1)) < kernels_s(point, tables, h200)
    whole, tp4 = forward_term(h200), forward_term(h200, "fused_glue", GpuShare(4, 4))
    launch = dict(forward.carried_check(h200).parts)["launch"].per_layer_s
    assert launch < tp4.per_layer_s < whole.per_layer_s
    assert tp4.per_layer_row_s == whole.per_layer_row_s
    assert forward_term(h200, "fused_glue", GpuShare(8, 8)).per_layer_s < tp4.per_layer_s
    assert build_calibrated(context(tp=4, ep=1, dp=1)).layer_overhead_s == pytest.approx(tp4.per_layer_s)
    assert build_calibrated(context(tp=1, ep=8, dp=8)).layer_overhead_s == pytest.approx(whole.per_layer_s)
    assert GpuShare.of(build_calibrated(context(tp=4, ep=4, dp=1)).par) == GpuShare(4, 1)
