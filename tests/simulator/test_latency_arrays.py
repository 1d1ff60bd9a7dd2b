"""The run's latency arrays at the end of a run (README, Memory): joined without holding the values
twice, and their percentiles taken without a copy, so the summary adds little to the event loop's peak.
tracemalloc counts numpy's data buffers, so the peaks below are of the arrays themselves."""

from __future__ import annotations

import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from sim.metrics.recorder import _joined
from sim.metrics.summarize import PERCENTILES, _percentiles

CHUNK = 65_536
CHUNKS = 40  # 20 MiB of float64 in all


def _chunks() -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    return [rng.lognormal(0.0, 1.0, CHUNK) for _ in range(CHUNKS)]


def test_joined_values_and_replaces_chunks():
    chunks = _chunks()
    expected = np.concatenate(chunks)
    joined = _joined(chunks)
    assert np.array_equal(joined, expected)
    assert len(chunks) == 1 and chunks[0] is joined
    assert _joined(chunks) is joined  # joined once
    assert _joined([]).shape == (0,)


# Resident memory, not tracemalloc: the joined array is allocated whole at once, and its pages
# become resident only as chunks are copied in and released.
_RSS_SCRIPT = """
import numpy as np
from sim.metrics.recorder import _joined

def hwm_bytes():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) * 1024

rng = np.random.default_rng(3)
chunks = [rng.random(65_536) for _ in range(100)]  # 52 MB
before = hwm_bytes()
joined = _joined(chunks)
print(hwm_bytes() - before, joined.nbytes)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc (Linux)")
def test_joined_holds_the_values_about_once():
    run = subprocess.run([sys.executable, "-c", _RSS_SCRIPT], capture_output=True, text=True, check=True)
    growth_bytes, total_bytes = map(int, run.stdout.split())
    # np.concatenate beside its chunks raises the peak by the whole array (52 MB); here ~ a chunk or two
    assert growth_bytes < total_bytes / 5


def test_percentiles_match_numpy_without_a_copy():
    values = np.concatenate(_chunks())
    expected = {name: float(np.percentile(values, q)) for name, q in PERCENTILES.items()}
    tracemalloc.start()
    tracemalloc.reset_peak()
    base, _ = tracemalloc.get_traced_memory()
    got = _percentiles(values)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert got == expected  # bit for bit: the summary's values do not move
    assert peak - base < values.nbytes / 10  # np.percentile's default copies the whole array


@pytest.mark.parametrize("values", [np.zeros(0), np.array([2.5])])
def test_percentiles_small(values):
    got = _percentiles(values)
    assert list(got) == list(PERCENTILES)
    assert all(v == (2.5 if len(values) else None) for v in got.values())
