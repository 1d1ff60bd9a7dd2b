"""The measured tables' columns are one list (kernels_bench.columns) that the writers and the readers share:
what kernels_bench writes, the simulator reads, and the simulator reads it without torch."""

import subprocess
import sys

import pytest

from kernels_bench import report
from kernels_bench.columns import FORWARD_COLUMNS, KERNEL_COLUMNS, PRODUCTION_COLUMNS, names, row
from sim.timing import forward, tables


def test_a_written_kernel_table_reads_back(tmp_path):
    row = report.make_row(
        family="attention", kernel="sparse_mla_decode", impl="triton", model="V4.1", layer_kind="CSA",
        fmt="fp8_584", batch=8, context_tokens=8192, chunk_tokens=0, median_us=12.5, flops=1e9, bytes=2e7,
        check_passed=True,
    ) | {"package": "flash_mla", "package_version": "1.0"}  # fmt: skip
    path = tmp_path / tables.TABLE_FILE
    report.write_csv(path, [row], {"gpu_name": "test"}, columns=[*report.COLUMNS, *names(PRODUCTION_COLUMNS)])
    (read,) = tables.load_tables(path).rows
    assert (read.family, read.kernel, read.model, read.batch, read.context_tokens) == (
        "attention", "sparse_mla_decode", "V4.1", 8, 8192
    )  # fmt: skip
    assert read.median_s == pytest.approx(12.5e-6) and read.package == "flash_mla 1.0"


def test_a_written_forward_table_reads_back(tmp_path):
    point = row(
        FORWARD_COLUMNS, model="V4", mode="decode", spec="deepseek-v4-flash", n_layers=1, layer_kinds="CSA4",
        n_routed_experts=16, experts_per_token=6, batch=8, context_tokens=8192, chunk_tokens=0,
        measured_us_p50=100.0, kernel_sum_us=80.0, routing_us=5.0, other_us=2.0,
    )  # fmt: skip
    path = tmp_path / forward.FORWARD_FILE
    report.write_csv(path, [point], {"gpu_name": "test"}, columns=list(names(FORWARD_COLUMNS)))
    _prov, (point,), skipped = forward.load_points(path)
    assert skipped == 0 and point.layer_kinds == ("csa",)
    assert (point.measured_s, point.kernel_sum_s, point.glue_s) == pytest.approx((100e-6, 80e-6, 7e-6))


def test_one_row_builder_gives_every_column_and_refuses_a_name_the_table_lacks():
    built = row(FORWARD_COLUMNS, model="V4", batch=8)
    assert list(built) == list(names(FORWARD_COLUMNS)) and built["batch"] == 8 and built["note"] == ""
    with pytest.raises(KeyError, match="measured_us"):
        row(FORWARD_COLUMNS, measured_us=1.0)  # the column is measured_us_p50
    assert list(report.make_row(family="x")) == list(names(KERNEL_COLUMNS))


def test_the_readers_need_only_columns_the_writers_write():
    assert set(tables.REQUIRED_COLUMNS) <= set(report.COLUMNS)
    assert set(tables.PACKAGE_COLUMNS) <= set(names(PRODUCTION_COLUMNS))
    assert set(forward.REQUIRED) | set(forward.GLUE_COLUMNS) <= set(names(FORWARD_COLUMNS))
    assert len(set(names(KERNEL_COLUMNS))) == len(KERNEL_COLUMNS)


def test_the_column_lists_import_without_torch():
    code = "import sys, sim.timing.tables, sim.timing.forward; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
