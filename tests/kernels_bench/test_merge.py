"""Merging a targeted re-run into the committed tables, and the per-variant tuning lookup."""

from __future__ import annotations

import csv
import json

from kernels_bench import merge, report
from kernels_bench.families import tuned


def _row(kernel, batch, us, note=""):
    return report.make_row(
        family="x",
        kernel=kernel,
        impl="triton",
        batch=batch,
        median_us=us,
        bytes=1e6,
        check_passed=True,
        note=note,
    )


def test_merge_replaces_same_key_rows_in_place_and_appends_new_ones():
    base = [{**_row("a", 1, 10.0), "run": 1}, {**_row("a", 2, 20.0), "run": 1}]
    new = [_row("a", 2, 5.0), _row("b", 1, 7.0)]
    out = merge.merge_rows(base, new, 2)
    assert [(r["kernel"], r["batch"], r["median_us"], r["run"]) for r in out] == [
        ("a", 1, 10.0, 1),
        ("a", 2, 5.0, 2),
        ("b", 1, 7.0, 2),
    ]


def test_merge_keeps_old_rows_that_the_rerun_skipped_for_time():
    base = [{**_row("a", 1, 10.0), "run": 1}]
    skipped = report.make_row(
        family="x", kernel="a", impl="triton", batch=1, note="skipped: time budget exhausted"
    )
    assert merge.merge_rows(base, [skipped], 2) == base


def test_merge_cli_keeps_columns_and_marks_later_runs(tmp_path):
    base_dir, new_dir = tmp_path / "base", tmp_path / "new"
    base_dir.mkdir()
    new_dir.mkdir()
    prov1, prov2 = {"date_utc": "d1", "commit": "c1"}, {"date_utc": "d2", "commit": "c2"}
    doc = {"provenance": prov1, "rows": [_row("a", 1, 10.0, "n1"), _row("a", 2, 20.0)], "tune": {"t": 1}}
    (base_dir / "kernels_bench_results.json").write_text(json.dumps(doc))
    (new_dir / "results.json").write_text(
        json.dumps({"provenance": prov2, "rows": [_row("a", 1, 4.0, "n2")]})
    )
    assert merge.main(["--base", str(base_dir), "--new", str(new_dir)]) == 0
    lines = (base_dir / "kernels_bench_results.csv").read_text().splitlines()
    assert lines[0] == "# date_utc: d1" and any(line.startswith("# run 2: ") for line in lines)
    body = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    assert list(body[0]) == report.COLUMNS
    assert body[0]["median_us"] == "4" and body[0]["note"] == "n2 [run 2]" and body[1]["note"] == ""
    out = json.loads((base_dir / "kernels_bench_results.json").read_text())
    assert [p["date_utc"] for p in out["runs"]] == ["d1", "d2"] and out["tune_by_run"]["1"] == {"t": 1}
    assert "Provenance of run 2" in (base_dir / "kernels_bench_results.md").read_text()


def test_tuned_prefers_the_variant_key():
    tune = {"attention": {"block_n": 64}, "attention:fp8_528+nvfp4_288": {"block_n": 32}}
    assert tuned(tune, "attention", "fp8_528+nvfp4_288") == {"block_n": 32}
    assert tuned(tune, "attention", "fp8_584+fp8_584") == {"block_n": 64}
    assert tuned(tune, "kvquant", "nvfp4_288") == {}
