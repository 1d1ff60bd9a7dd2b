"""Formulas against kernels.md's numbers, the tidy rows, the writers and the target table."""

from __future__ import annotations

import csv
import json

import pytest

from kernels_bench import grid, report, shapes, targets
from kernels_bench.timing import rotation_count


def test_attention_formulas_match_kernels_md():
    # kernels.md §4.2: 83.9 MFLOP per query at N = 640; V4 FP8 505 KB, V4.1 mix 346 KB, all-FP4 315 KB
    assert shapes.attention_flops(640) == pytest.approx(83.9e6, rel=1e-3)
    assert shapes.attention_bytes({"fp8_584": 640}) / 1e3 == pytest.approx(505, rel=1e-2)
    assert shapes.attention_bytes({"fp8_528": 128, "nvfp4_288": 512}) / 1e3 == pytest.approx(346, rel=1e-2)
    assert shapes.attention_bytes({"nvfp4_288": 640}) / 1e3 == pytest.approx(315, rel=1e-2)


def test_layer_shapes_follow_the_table():
    L = 1024 * 1024
    s = shapes.layer_shape("V4", "CSA", L)
    assert (s.window_entries, s.compressed_entries, s.index_keys) == (128, 512, L // 4)
    s = shapes.layer_shape("V4", "HCA", L)
    assert (s.compressed_entries, s.index_keys, s.dense_compressed) == (8192, 0, True)
    assert shapes.layer_shape("V4.1", "Full-enc", L).index_keys == L // 2
    assert shapes.layer_shape("V4.1", "Full-L20", L).index_keys == L
    assert shapes.layer_shape("V4.1", "Reindex", L).index_keys == 16384
    assert shapes.layer_shape("V4.1", "Reuse", L).index_keys == 0
    assert shapes.layer_shape("V4", "SWA", 100).window_entries == 100
    with pytest.raises(ValueError):
        shapes.layer_shape("V4", "Reuse", L)


def test_decode_floor_reproduces_kernels_md_3_3():
    # kernels.md §3.3: V4 CSA at B = 64, L = 128K: ~79.6 us (sum of per-kernel floors)
    from kernels_bench.families import pipeline_floor_us

    _, _, floor = pipeline_floor_us(shapes.layer_shape("V4", "CSA", 128 * 1024), 64)
    assert floor == pytest.approx(79.6, rel=0.05)


def test_mhc_and_expert_formulas():
    assert shapes.mhc_bytes(4096, 1, fused=True) - 24 * 4 * 4096 * 4 == 20 * 4096  # 82 KB per token
    assert shapes.mhc_bytes(4096, 1, fused=False) - 24 * 4 * 4096 * 4 == 40 * 4096
    assert round(shapes.experts_touched(256, 6, 8)) == 44  # kernels.md §6.2
    assert round(shapes.experts_touched(256, 6, 64)) == 200
    assert round(shapes.experts_touched(384, 6, 64)) == 244


def test_make_row_derives_rates_and_fractions():
    r = report.make_row(family="x", kernel="k", median_us=10.0, flops=7.9e9, bytes=42e6)
    assert r["achieved_TFLOPs"] == pytest.approx(790.0)
    assert r["achieved_GBps"] == pytest.approx(4200.0)
    assert r["frac_of_ceiling"] == pytest.approx(1.0)
    with pytest.raises(KeyError):
        report.make_row(bogus=1)


def test_writers_emit_provenance_and_all_columns(tmp_path):
    rows = [report.make_row(family="x", kernel="k", median_us=1.0, bytes=1e3, check_passed=True)]
    prov = {"gpu_name": "test", "commit": "abc"}
    report.write_csv(tmp_path / "r.csv", rows, prov)
    report.write_json(tmp_path / "r.json", rows, prov)
    lines = (tmp_path / "r.csv").read_text().splitlines()
    assert lines[0] == "# gpu_name: test"
    body = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    assert list(body[0]) == report.COLUMNS and body[0]["kernel"] == "k"
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["provenance"]["commit"] == "abc" and doc["rows"][0]["check_passed"] is True


def test_targets_pass_and_miss_on_synthetic_rows():
    def row(**kw):
        return report.make_row(check_passed=True, **kw)

    rows = [
        row(family="topk", kernel="radix_topk", rows=1, n=1024 * 1024, k=512, median_us=20.0, bytes=4e6),
        row(family="topk", kernel="torch_topk", rows=1, n=1024 * 1024, k=512, median_us=110.0, bytes=4e6),
        row(
            family="kvquant",
            kernel="quantize_on_write",
            fmt="nvfp4_288",
            rows=1 << 20,
            median_us=1000.0,
            bytes=1.3e9,
        ),
    ]
    got = {t["target"]: t for t in targets.evaluate(rows)}
    assert got["top-512 >= 3x faster than torch.topk, 1 row of 1024K"]["verdict"] == "PASS"
    assert got["NVFP4 quantise-on-write >= 60% of HBM (>= 64K rows)"]["verdict"] == "MISS"
    assert got["top-512 >= 3x faster than torch.topk, 1 row of 256K"]["verdict"] == "NOT RUN"
    assert "anchor" in targets.anchors(rows)[0]


def test_grid_presets_and_rotation():
    assert set(grid.PRESETS) == {"full", "smoke", "dry"}
    assert rotation_count(1e9) == 1
    assert rotation_count(1e6) == 64
    assert rotation_count(16 * 2**20) == 15
