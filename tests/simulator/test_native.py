"""The compiled core (sim/native.py) and its sources give the same simulation, byte for byte,
and an edited source is never shadowed by its stale compiled module."""

import filecmp
import os
import subprocess
import sys

import pytest

from sim import native
from sim.paths import project_root

COMPILED = native.install()[0] == "compiled"


# a trace replay, and a benchmark client (sim.sched.arrivals.BenchmarkArrivals)
SCENARIOS = (
    project_root() / "scenarios" / "smoke.yaml",
    project_root() / "tests" / "sweep" / "bench_tiny.yaml",
)


def _run(out, pure: bool, scenario) -> None:
    env = {k: v for k, v in os.environ.items() if k != native.PURE_ENV}
    if pure:
        env[native.PURE_ENV] = "1"
    code = (
        "import sys; from sim.api import run_scenario; from sim import native; "
        f"assert native.install()[0] == {'source' if pure else 'compiled'!r}, native.describe(); "
        f"run_scenario({str(scenario)!r}, out_dir={str(out)!r})"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=out.parent)


@pytest.mark.skipif(not COMPILED, reason=f"the compiled core is not in use: {native.describe()}")
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: p.stem)
def test_compiled_core_and_sources_write_identical_outputs(tmp_path, scenario):
    _run(tmp_path / "compiled", pure=False, scenario=scenario)
    _run(tmp_path / "source", pure=True, scenario=scenario)
    root = tmp_path / "compiled"
    files = sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file())
    assert any(f.name == "requests.parquet" for f in files)
    for f in files:
        a, b = tmp_path / "compiled" / f, tmp_path / "source" / f
        if f.name == "summary.json":  # the scenario's absolute paths are the same too
            assert a.read_text() == b.read_text(), f
        else:
            assert filecmp.cmp(a, b, shallow=False), f


def test_a_source_newer_than_its_build_runs_from_source(tmp_path, monkeypatch):
    module = native.COMPILED[0]
    src = tmp_path / "sim" / "cluster" / "cluster.py"
    src.parent.mkdir(parents=True)
    src.write_text("")
    built = src.with_name("cluster" + native.importlib.machinery.EXTENSION_SUFFIXES[0])
    built.write_text("")
    for m in native.COMPILED[1:]:  # every other module built and up to date
        p = tmp_path.joinpath(*m.split(".")).with_suffix(".py")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("")
        p.with_suffix(native.importlib.machinery.EXTENSION_SUFFIXES[0]).write_text("")
    monkeypatch.setattr(native, "_ROOT", tmp_path)
    monkeypatch.delenv(native.PURE_ENV, raising=False)
    os.utime(src, (1_000, 1_000))
    os.utime(built, (2_000, 2_000))
    assert native.core_state() == ("compiled", "mypyc")
    os.utime(src, (3_000, 3_000))  # edited after the build
    kind, why = native.core_state()
    assert kind == "source" and module in why and "pip install -e ." in why
    monkeypatch.setenv(native.PURE_ENV, "1")
    os.utime(src, (1_000, 1_000))
    assert native.core_state() == ("source", f"{native.PURE_ENV}=1")


def test_request_logged_fields_are_request_log_columns_of_the_same_name():
    from operator import attrgetter

    from sim.cluster.request import LOGGED_FIELDS
    from sim.metrics.schema import REQUEST_SCHEMA

    from .objects import request

    derived = {"ttft_s", "tpot_s", "e2e_s", "swa_source"}  # computed by the recorder
    assert set(LOGGED_FIELDS) == set(REQUEST_SCHEMA.names) - derived
    req = request(900, 1000)
    req.prefix_source, req.finish_s, req.decode_instance = "dram", 12.5, 3
    assert list(map(repr, req.logged())) == list(map(repr, attrgetter(*LOGGED_FIELDS)(req)))  # NaN-safe
