"""Fixtures for the calibrated timing: the H200 tables and timing contexts built as a run builds them."""

from __future__ import annotations

import pytest

from sim.config.timing import Timing
from sim.hardware import load_hw
from sim.timing.arith import build_arith
from sim.timing.factory import TimingContext
from sim.timing.roofline import Parallelism
from sim.timing.tables import load_tables, table_path


@pytest.fixture(scope="session")
def h200_tables():
    path = table_path("h200")
    if not path.is_file():
        pytest.skip(f"H200 kernel tables not found at {path}")
    return load_tables(path)


@pytest.fixture(scope="session")
def arith():
    """Model arithmetic per model name, built once."""
    cache = {}

    def get(model: str):
        if model not in cache:
            cache[model] = build_arith(model)
        return cache[model]

    return get


@pytest.fixture(scope="session")
def context(arith):
    """context(model, hardware, tp=1, ep=8, dp=8, **ctx fields) -> TimingContext, as sim.cluster.build makes it."""

    def make(model="deepseek-v4-flash", hardware="nvidia-h200-hgx8", *, tp=1, ep=8, dp=8, **fields):
        par = Parallelism(gpus=tp * dp, tp=tp, ep=ep, dp=dp)
        return TimingContext.of_instance(model, arith(model), load_hw(hardware), par, Timing(), **fields)

    return make
