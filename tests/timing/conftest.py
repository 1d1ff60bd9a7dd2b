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
    """context(model, hardware, tp=1, ep=8, dp=8, power_limit=False, **ctx fields) -> TimingContext, as
    sim.cluster.build makes it; without `power_limit`, the profile's sustained slowdown is left out."""

    def make(model="deepseek-v4-flash", hardware="nvidia-h200-hgx8", *, tp=1, ep=8, dp=8, power_limit=False,
             **fields):  # fmt: skip
        par = Parallelism(gpus=tp * dp, tp=tp, ep=ep, dp=dp)
        hw = load_hw(hardware)
        if (
            not power_limit
        ):  # the burst times the compositions are checked at (sim.timing.sustained: its own tests)
            acc = hw.accelerator.model_copy(
                update={"sustained_compute_slowdown_x": None, "sustained_compute_onset_s": None}
            )
            hw = hw.model_copy(update={"accelerator": acc})
        return TimingContext.of_instance(model, arith(model), hw, par, Timing(), **fields)

    return make
