"""The host-issue measurement (kernels_bench.production.host_issue): launch attribution and the per-op timing
on the reference stack (CPU); the GPU run is a device call (docs/carry/eager)."""

from __future__ import annotations

import csv

from kernels_bench.production import forward as fw
from kernels_bench.production import host_issue as hi
from tests.kernels_bench.test_production_forward import KINDS, SMALL


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
    assert hi.pass_host_us(stack, passes=2) > 0


def test_the_csv_reads_back_cells_holding_commas_and_quotes(tmp_path):
    path = tmp_path / "x.csv"
    hi.write_csv(path, ("call", "note"), [{"call": "a, b", "note": 'say "x"'}], {"commit": "abc"})
    text = path.read_text()
    assert text.startswith("# commit: abc\n")
    rows = list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))
    assert rows == [{"call": "a, b", "note": 'say "x"'}]
