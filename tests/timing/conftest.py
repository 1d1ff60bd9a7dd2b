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
    sim.cluster.build makes it; without `power_limit`, at the tables' burst times (timing.power_limit off: the
    compositions are checked at those; sim.timing.sustained has its own tests)."""

    def make(model="deepseek-v4-flash", hardware="nvidia-h200-hgx8", *, tp=1, ep=8, dp=8, power_limit=False,
             **fields):  # fmt: skip
        par = Parallelism(gpus=tp * dp, tp=tp, ep=ep, dp=dp)
        hw = load_hw(hardware)
        return TimingContext.of_instance(
            model, arith(model), hw, par, Timing(), power_limit=power_limit, **fields
        )

    return make


@pytest.fixture(scope="session")
def case_timing():
    """case_timing(case, pool={...}, model={...}, hardware=None, kernels=None) -> the timing model of the first
    instance a validation case (a file of scenarios/validation) builds for its model, with its first pool's and its
    model entry's fields changed; another `hardware` drops the case's pricing (profile-specific terms); `kernels`
    sets timing.kernels."""
    import yaml

    from sim.cluster.build import build_simulation
    from sim.config.errors import validate_or_raise
    from sim.config.scenario import Scenario
    from sim.paths import project_root

    def make(
        case: str,
        *,
        pool: dict | None = None,
        model: dict | None = None,
        hardware: str | None = None,
        kernels: str | None = None,
    ):
        path = project_root() / "scenarios" / "validation" / case
        doc = yaml.safe_load(path.read_text())["scenario"]
        doc["cluster"]["pools"][0].update(pool or {})
        first = doc["models"][0]
        doc["models"][0] = {**({"name": first} if isinstance(first, str) else first), **(model or {})}
        if hardware:
            doc["hardware"] = hardware
            doc.pop("pricing", None)
        if kernels:
            doc.setdefault("timing", {})["kernels"] = kernels
        scn = validate_or_raise(Scenario, doc, file=str(path))
        one = scn.for_model(scn.models[0].name)
        return (
            build_simulation(one, one.models[0], build_arith(scn.models[0].name), out_dir=None)
            .instances[0]
            .timing
        )

    return make
