"""Kernel tables: loading drops failed checks and rejects broken files cleanly; interpolation is
exact at the measured points, monotone between them, and extrapolates as documented."""

from __future__ import annotations

import csv
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.errors import InputError
from sim.timing.interp import LINEAR, LOGLOG, Curve, span_end, span_s
from sim.timing.tables import curve_of, grid_of, load_tables, table_path

# --- loading ---


def test_failed_checks_are_dropped_and_never_used(h200_tables):
    with table_path("h200").open() as f:
        raw = list(csv.DictReader(line for line in f if not line.startswith("#")))
    passed = [r for r in raw if r["check_passed"] == "True"]
    failed = [r for r in raw if r["check_passed"] == "False"]
    assert failed and all(r["median_us"] in ("", "nan") for r in failed)  # failed checks carry no time
    assert len(h200_tables.rows) == len(passed)
    assert h200_tables.dropped == len(raw) - len(passed)
    assert all(r.median_s > 0 for r in h200_tables.rows)
    # the V4.1 wq_b projection failed blockwise: no such row is left
    assert not h200_tables.select(family="gemm_dense", model="V4.1", layer_kind="wq_b", fmt="fp8_blockwise")


def test_provenance_is_kept(h200_tables):
    prov = dict(h200_tables.provenance)
    assert prov["gpu_name"] == "NVIDIA H200"
    assert prov["date_utc"].startswith("20") and prov["reference_ceilings"]


def _write(tmp_path, edit):
    """A copy of the H200 table (first rows) with `edit(header, rows)` applied."""
    src = table_path("h200").read_text().splitlines()
    prov = [line for line in src if line.startswith("#")]
    body = list(csv.reader(line for line in src if not line.startswith("#")))
    header, rows = body[0], body[1:12]
    header, rows = edit(header, rows)
    path = tmp_path / "kernels_bench_results.csv"
    with path.open("w", newline="") as f:
        f.write("\n".join(prov) + "\n")
        csv.writer(f).writerows([header, *rows])
    return path


def test_missing_column_names_file_and_column(tmp_path, h200_tables):
    def drop_median(header, rows):
        i = header.index("median_us")
        return header[:i] + header[i + 1 :], [r[:i] + r[i + 1 :] for r in rows]

    path = _write(tmp_path, drop_median)
    with pytest.raises(InputError) as err:
        load_tables(path)
    assert str(path) in str(err.value) and "column median_us" in str(err.value)


def test_bad_number_names_line_and_column(tmp_path, h200_tables):
    def garble(header, rows):
        rows[3][header.index("median_us")] = "fast"
        return header, rows

    path = _write(tmp_path, garble)
    with pytest.raises(InputError) as err:
        load_tables(path)
    text = str(err.value)
    assert str(path) in text and "column median_us" in text and "'fast'" in text and "line" in text


def test_passed_check_without_time_is_an_error(tmp_path, h200_tables):
    def blank(header, rows):
        rows[5][header.index("median_us")] = ""
        return header, rows

    with pytest.raises(InputError, match="positive median_us"):
        load_tables(_write(tmp_path, blank))


def test_unreadable_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        load_tables(tmp_path / "absent.csv")


# --- interpolation ---


def test_grid_is_exact_at_every_measured_pipeline_point(h200_tables):
    for model, kind in (("V4", "CSA"), ("V4", "HCA"), ("V4.1", "Full-L20"), ("V4.1", "Reuse")):
        rows = h200_tables.select(family="pipeline", model=model, layer_kind=kind)
        grid = grid_of(rows, "context_tokens", "batch", outer_mode=LINEAR, inner_mode=LOGLOG)
        assert len(rows) >= 24
        for r in rows:
            assert grid.at(r.context_tokens, r.batch) == pytest.approx(r.median_s, rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(i=st.integers(0, 3), j=st.integers(0, 3), u=st.floats(0, 1), v=st.floats(0, 1))
def test_grid_lies_between_its_measured_corners(h200_tables, i, j, u, v):
    rows = h200_tables.select(family="pipeline", model="V4", layer_kind="CSA")
    grid = grid_of(rows, "context_tokens", "batch")
    contexts = sorted({r.context_tokens for r in rows})[:4]  # 8K..512K: every batch measured
    batches = sorted({r.batch for r in rows})[:4]
    L = contexts[i] + u * (contexts[i + 1] - contexts[i]) if i < 3 else contexts[3]
    b = batches[j] * (batches[j + 1] / batches[j]) ** v if j < 3 else batches[3]
    corners = [grid.at(c, bb) for c in contexts[i : i + 2] for bb in batches[j : j + 2]]
    assert min(corners) * (1 - 1e-12) <= grid.at(L, b) <= max(corners) * (1 + 1e-12)


@settings(max_examples=300, deadline=None)
@given(mode=st.sampled_from([LOGLOG, LINEAR]), data=st.data())
def test_curve_is_monotone_between_points(mode, data):
    xs = (1.0, 8.0, 32.0, 128.0)
    ys = tuple(data.draw(st.floats(1e-6, 1e-2)) for _ in xs)
    c = Curve(xs, ys, mode)
    i = data.draw(st.integers(0, 2))
    a, b = sorted(data.draw(st.floats(xs[i], xs[i + 1])) for _ in range(2))
    fa, fb = c.at(a), c.at(b)
    if ys[i + 1] >= ys[i]:
        assert ys[i] * (1 - 1e-12) <= fa <= fb * (1 + 1e-12) <= ys[i + 1] * (1 + 1e-9)
    else:
        assert ys[i] * (1 + 1e-12) >= fa >= fb * (1 - 1e-12) >= ys[i + 1] * (1 - 1e-9)


def test_extrapolation_clamps_below_and_scales_with_work_above():
    loglog = Curve((1.0, 8.0, 64.0), (10.0, 12.0, 40.0), LOGLOG)
    assert loglog.at(0.25) == 10.0  # latency floor: never below the smallest measured shape
    assert loglog.at(128.0) == pytest.approx(80.0)  # twice the rows, twice the time
    assert loglog.at(8.0) == 12.0
    assert loglog.at(math.sqrt(8.0 * 64.0)) == pytest.approx(math.sqrt(12.0 * 40.0))  # power law between
    linear = Curve((8.0, 32.0, 128.0), (5.0, 6.0, 9.0), LINEAR)
    assert linear.at(0.0) == 5.0
    assert linear.at(80.0) == pytest.approx(7.5)
    assert linear.at(224.0) == pytest.approx(12.0)  # the last segment continued (affine in L)
    dipping = Curve((8.0, 32.0), (5.0, 4.0), LINEAR)
    assert dipping.at(100.0) == 4.0  # a falling last segment is not continued downwards


@settings(max_examples=300, deadline=None)
@given(x0=st.floats(0, 3000), dx=st.floats(0, 40), n=st.integers(0, 300))
def test_closed_form_sum_equals_the_sum_of_points(x0, dx, n):
    c = Curve((100.0, 400.0, 1600.0, 2000.0), (3.0, 2.5, 7.0, 9.0), LINEAR)
    brute = sum(c.at(x0 + dx * k) for k in range(n))
    assert c.sum_along(x0, dx, n) == pytest.approx(brute, rel=1e-9, abs=1e-9)


@settings(max_examples=300, deadline=None)
@given(
    x0=st.floats(0, 3000),
    dx=st.floats(0, 40),
    n=st.integers(1, 300),
    floor=st.floats(0, 12),
    e=st.floats(0, 1),
)
def test_a_span_with_a_floor_sums_each_step_at_least_the_floor(x0, dx, n, floor, e):
    """A decode span under the host chain's floor (sim.timing.host): max(step, floor) summed, in closed form,
    and the step in progress `elapsed` into it found the same way, on a curve that never falls."""
    c = Curve((100.0, 400.0, 1600.0, 2000.0), (3.0, 3.5, 7.0, 9.0), LINEAR)
    steps = [max(1.0 + c.at(x0 + dx * k), floor) for k in range(n)]
    assert span_s(c, 1.0, x0, dx, n, floor) == pytest.approx(sum(steps), rel=1e-9, abs=1e-9)
    elapsed = e * sum(steps)
    k, ends = span_end(c, 1.0, x0, dx, elapsed, floor)
    assert sum(steps[: k - 1]) <= elapsed * (1 + 1e-12) + 1e-12 and ends == pytest.approx(
        sum(max(1.0 + c.at(x0 + dx * i), floor) for i in range(k)), rel=1e-9
    )
    assert ends >= elapsed * (1 - 1e-12)


def test_duplicate_shapes_are_rejected(h200_tables):
    rows = h200_tables.select(family="mhc", model="V4")  # fused, unfused and eager share token counts
    with pytest.raises(InputError, match="two timed rows"):
        curve_of(rows, "rows")
