"""The run's latency values (sim/metrics/values.py; docs/memory.md): kept in blocks that are their
own mappings, read at the end without a second resident copy, and their percentiles taken without a
copy, so the summary adds little to the event loop's peak."""

from __future__ import annotations

import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from sim.metrics.summarize import PERCENTILES, percentiles
from sim.metrics.values import LatencyValues


def _batches(count: int, size: int) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    return [rng.lognormal(0.0, 1.0, size) for _ in range(count)]


@pytest.mark.parametrize("block_values", [7, 1000, 1 << 22])
def test_values_in_arrival_order_across_blocks(block_values):
    batches = _batches(9, 650) + [np.zeros(0), np.array([1.5])]
    values = LatencyValues(block_values)
    for batch in batches:
        values.extend(batch)
    expected = np.concatenate(batches)
    assert len(values) == len(expected)
    got = values.array()
    assert np.array_equal(got, expected)
    assert values.array() is got or np.shares_memory(values.array(), got)  # read once, kept
    values.extend(np.array([2.0, 3.0]))  # after a read: still every value, in order
    assert np.array_equal(values.array(), np.concatenate([expected, [2.0, 3.0]]))


def test_one_block_is_read_without_a_copy():
    values = LatencyValues()
    values.extend(np.arange(10.0))
    first = values.array()
    first[0] = -1.0  # a view of the block: the summary partitions it in place
    assert values.array()[0] == -1.0 and len(values.array()) == 10
    assert LatencyValues().array().shape == (0,)


# Resident memory, not tracemalloc: what matters is whether freed values leave the process.
_RSS_SCRIPT = """
import numpy as np
from sim.metrics.values import LatencyValues

def hwm_bytes():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) * 1024

rng = np.random.default_rng(3)
values = LatencyValues()
for _ in range(160):  # 10.5M values, as the request log hands them over: 2.5 blocks, 84 MB
    values.extend(rng.random(65_536))
before = hwm_bytes()
joined = values.array()
print(hwm_bytes() - before, joined.nbytes)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc (Linux)")
def test_reading_many_blocks_holds_the_values_about_once():
    run = subprocess.run([sys.executable, "-c", _RSS_SCRIPT], capture_output=True, text=True, check=True)
    growth_bytes, total_bytes = map(int, run.stdout.split())
    # batches kept as a list and joined raise the peak by the whole array (84 MB): the heap keeps
    # the freed batches' pages; blocks copied and released one by one, by at most one block (34 MB)
    assert growth_bytes < total_bytes / 2


def test_percentiles_match_numpy_without_a_copy():
    values = np.concatenate(_batches(40, 65_536))
    expected = {name: float(np.percentile(values, q)) for name, q in PERCENTILES.items()}
    tracemalloc.start()
    tracemalloc.reset_peak()
    base, _ = tracemalloc.get_traced_memory()
    got = percentiles(values)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert got == expected  # bit for bit: the summary's values do not move
    assert peak - base < values.nbytes / 10  # np.percentile's default copies the whole array


@pytest.mark.parametrize("values", [np.zeros(0), np.array([2.5])])
def test_percentiles_small(values):
    got = percentiles(values)
    assert list(got) == list(PERCENTILES)
    assert all(v == (2.5 if len(values) else None) for v in got.values())
