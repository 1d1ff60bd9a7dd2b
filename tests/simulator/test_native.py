"""The compiled core (sim/native.py), its sources, and the compiled core on the SimPy event loop
(sim/cluster/simpy_loop.py) give the same simulation, byte for byte, over a
matrix of small scenarios that reach every part of the compiled modules; CI runs the compiled core
(never the sources by accident); an edited source is never shadowed by its stale compiled module."""

import filecmp
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from sim import native
from sim.paths import project_root

COMPILED = native.install()[0] == "compiled"
TRACE = project_root() / "traces" / "agent_1M_sample.parquet"

# The matrix: every combination of these (2^6 = 64 scenarios, each under a second).
FACTORS = {
    "layout": ("colocated", "disaggregated"),
    "timing": ("roofline", "calibrated"),
    "loop": ("closed", "open"),  # closed: the agent trace replayed turn after turn; open: Poisson benchmark
    "spec_decode": ("no_sd", "sd"),
    # admission limits: queue_full and queue_timeout rejections; with them a colocated pool without speculative
    # decoding steps as SGLang's DP-attention ranks do (rank_prefill_first: per-rank decode progress)
    "queue": ("no_limit", "queue_limit"),
    "memory": ("roomy", "pressure"),  # 0.6 GB of HBM for KV, a small DRAM tier, short TTLs, the RDMA pool on
}
CASES = {"-".join(levels): levels for levels in itertools.product(*FACTORS.values())}
# two small scenarios of the repository too: both models in one run, and a closed-loop benchmark
FILES = {
    "smoke": project_root() / "scenarios" / "smoke.yaml",
    "bench_tiny": project_root() / "tests" / "sweep" / "bench_tiny.yaml",
}


# memory pressure: instances of the fewest GPUs that hold the weights, left with this much HBM for KV
PRESSED_GPUS = {"deepseek-v4-flash": 4, "deepseek-v4.1-flash": 8}  # with FP8-held experts (the H200)
PRESSED_KV_BYTES = 0.6e9


def reserve_leaving(model: str, gpus: int, kv_bytes: float) -> float:
    """The activation reserve that leaves `kv_bytes` of HBM for KV in an instance of `gpus` H200s (DP = EP =
    gpus), by the build's own rule (sim.cluster.build.hbm_budget: the H200 holds FP8-run experts in FP8)."""
    from sim.cluster.build import instance_weight_bytes
    from sim.hardware import load_hw
    from sim.model import load_model

    hbm = gpus * load_hw("nvidia-h200-hgx8").hbm_capacity_bytes
    weights = instance_weight_bytes(load_model(model), gpus, engram_in_hbm=True, experts_fp8=True)
    return round(1 - (weights + kv_bytes) / hbm, 6)


def scenario(name: str, levels: tuple[str, ...]) -> dict:
    """One matrix case as a scenario mapping; the model alternates so both families see every level."""
    layout, timing, loop, sd, queue, memory = levels
    on = [layout == "disaggregated", timing == "calibrated", loop == "open", sd == "sd", queue == "queue_limit",
          memory == "pressure"]  # fmt: skip
    model = "deepseek-v4.1-flash" if sum(on) % 2 else "deepseek-v4-flash"
    gpus = 8 if memory == "roomy" else PRESSED_GPUS[model]
    pool = {"instances": 1, "gpus_per_instance": gpus, "tp": 1, "ep": gpus, "dp": gpus}
    pools = (
        [{"name": "node", "role": "colocated", **pool}]
        if layout == "colocated"
        else [{"name": "p", "role": "prefill", **pool}, {"name": "d", "role": "decode", **pool}]
    )
    if loop == "closed":
        workload = {"trace": str(TRACE), "replay": "closed_loop", "max_requests": 60}
    else:
        workload = {
            "benchmark": {"isl_tokens": 6000, "osl_tokens": 200, "prefix_reuse_frac": 0.8, "request_rate_per_s": 8,
                          "turns_per_session": 5, "length_jitter_frac": 0.2},
            "warmup_s": 2,
            "horizon_s": 12,
        }  # fmt: skip
    scn = {
        "name": name,
        "seed": 11,
        "models": [model],
        "hardware": "nvidia-h200-hgx8",
        "cluster": {"pools": pools},
        "workload": workload,
        "timing": {"model": timing},
        "spec_decode": {"enabled": sd == "sd"},
        "outputs": {"timeseries_interval_s": 5},
    }
    if queue == "queue_limit":
        scn["scheduler"] = {"admission": {"max_queue_per_instance": 3, "max_queue_wait_s": 0.25}}
        if layout == "colocated" and sd == "no_sd":
            scn["scheduler"]["step_composition"] = "rank_prefill_first"
    if memory == "pressure":
        scn["cluster"]["activation_reserve_frac"] = reserve_leaving(model, gpus, PRESSED_KV_BYTES)
        scn["cache"] = {
            "tiers": {
                "hbm": {"ttl_s": 2.0},
                "dram": {"capacity_gb_per_node": 48, "ttl_s": 20.0},
                "rdma_pool": {"enabled": True, "capacity_gb_per_node": 16},
                "ssd": {"ttl_s": 120.0},
            }
        }
    return scn


def _run_all(runs: list[tuple[str, str]], pure: bool, cwd: Path, loop: str = "native") -> subprocess.Popen:
    """One process runs every (scenario file, output folder) under one core, on one event loop."""
    env = {k: v for k, v in os.environ.items() if k not in (native.PURE_ENV, native.REQUIRE_ENV)}
    if pure:
        env[native.PURE_ENV] = "1"
    code = (
        "import json, sys; from sim.api import run_scenario; from sim import native; "
        f"assert native.install()[0] == {'source' if pure else 'compiled'!r}, native.describe(); "
        f"[run_scenario(s, out_dir=o, loop={loop!r}) for s, o in json.loads(sys.argv[1])]"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code, json.dumps(runs)], env=env, cwd=cwd, stderr=subprocess.PIPE, text=True
    )


@pytest.fixture(scope="module")
def both_cores(tmp_path_factory) -> Path:
    """Every case run by the compiled core, by the sources, and by the compiled core on the SimPy
    loop, the three at once (three processes)."""
    root = tmp_path_factory.mktemp("equivalence")
    files = dict(FILES)
    for name, levels in CASES.items():
        files[name] = root / "scenarios" / f"{name}.yaml"
        files[name].parent.mkdir(exist_ok=True)
        files[name].write_text(yaml.safe_dump(scenario(name, levels), sort_keys=False))
    procs = [
        _run_all(
            [(str(f), str(root / run / name)) for name, f in files.items()],
            run == "source",
            root,
            "simpy" if run == "simpy" else "native",
        )
        for run in ("compiled", "source", "simpy")
    ]
    errors = [p.communicate()[1] for p in procs]
    for p, err in zip(procs, errors, strict=True):
        assert p.returncode == 0, err[-4000:]
    return root


@pytest.mark.skipif(not COMPILED, reason=f"the compiled core is not in use: {native.describe()}")
@pytest.mark.parametrize("case", [*FILES, *CASES])
@pytest.mark.parametrize("other", ["source", "simpy"])
def test_compiled_core_sources_and_simpy_loop_write_identical_outputs(both_cores, case, other):
    a_root, b_root = both_cores / "compiled" / case, both_cores / other / case
    files = sorted(p.relative_to(a_root) for p in a_root.rglob("*") if p.is_file())
    assert any(f.name == "requests.parquet" for f in files)
    assert files == sorted(p.relative_to(b_root) for p in b_root.rglob("*") if p.is_file())
    for f in files:
        assert filecmp.cmp(a_root / f, b_root / f, shallow=False), f  # summary.json included: same paths


def test_the_matrix_reaches_what_it_is_meant_to(both_cores):
    """Each factor's level shows in the outputs: both kinds of queue rejection under queue limits; under
    memory pressure, requests too large for HBM, KV found in DRAM, the RDMA pool and on SSD, and fewer HBM
    hits; KV moved between pools when disaggregated; both model families."""
    model = {
        n: next(iter(json.loads((both_cores / "source" / n / "summary.json").read_text())["models"].items()))
        for n in CASES
    }
    m = {n: stats for n, (_name, stats) in model.items()}

    def cases(level: str) -> list[dict]:
        return [m[n] for n, levels in CASES.items() if level in levels]

    def reasons(level: str) -> set[str]:
        return {r for s in cases(level) for r in s["rejected_by_reason"]}

    assert {"queue_full", "queue_timeout"} <= reasons("queue_limit")
    assert not {"queue_full", "queue_timeout"} & reasons("no_limit")
    assert "kv_exceeds_hbm" in reasons("pressure") and "kv_exceeds_hbm" not in reasons("roomy")
    for tier in ("dram", "rdma_pool", "ssd"):
        assert sum(s[f"hit_tokens_{tier}"] for s in cases("pressure")) > 0, tier
    assert not any(s["hit_tokens_rdma_pool"] for s in cases("roomy"))
    hbm = {level: sum(s["hit_rate_hbm"] for s in cases(level)) for level in ("roomy", "pressure")}
    assert hbm["pressure"] < hbm["roomy"]
    assert all(s["bytes_kv_transfer"] > 0 for s in cases("disaggregated"))
    assert {name for name, _stats in model.values()} == {"deepseek-v4-flash", "deepseek-v4.1-flash"}


@pytest.mark.skipif(
    os.environ.get(native.REQUIRE_ENV) != "1",
    reason=f"{native.REQUIRE_ENV}=1 is not set (CI sets it; elsewhere the sources may run)",
)
def test_ci_runs_the_compiled_core():
    assert native.install() == ("compiled", "mypyc"), native.describe()


def _fake_build(root: Path, monkeypatch) -> Path:
    """A source tree of two compiled modules (`sim.a` imports `sim.b`, `sim.c`), built and recorded."""
    monkeypatch.setattr(native, "_ROOT", root)
    monkeypatch.setattr(native, "COMPILED", ("sim.a", "sim.b"))
    monkeypatch.delenv(native.PURE_ENV, raising=False)
    pkg = root / "sim"
    pkg.mkdir()
    (pkg / "a.py").write_text("from sim.b import f\nfrom sim import c\n")
    (pkg / "b.py").write_text("def f(): return 1\n")
    (pkg / "c.py").write_text("X = 1\n")
    (pkg / "d.py").write_text("Y = 1\n")  # imported by no compiled module
    for m in ("a", "b"):
        (pkg / m).with_suffix(native.importlib.machinery.EXTENSION_SUFFIXES[0]).write_text("")
    native.write_manifest(pkg, native.source_digests())
    return pkg


def test_staleness_is_judged_by_the_content_of_the_sources_and_their_imports(tmp_path, monkeypatch):
    pkg = _fake_build(tmp_path, monkeypatch)
    assert native.hashed_sources() == ["sim/a.py", "sim/b.py", "sim/c.py"]
    assert native.core_state() == ("compiled", "mypyc")
    os.utime(pkg / "a.py", (4e9, 4e9))  # touched (a checkout, say): same content, still the build's
    assert native.core_state() == ("compiled", "mypyc")
    (pkg / "d.py").write_text("Y = 2\n")
    assert native.core_state() == ("compiled", "mypyc")
    for edited in ("a.py", "c.py"):  # a compiled module, a module one imports
        before = (pkg / edited).read_text()
        (pkg / edited).write_text(before + "# edited\n")
        assert native.core_state() == (
            "source", f"sim/{edited} changed since the build (rerun `pip install -e .`)"
        )  # fmt: skip
        (pkg / edited).write_text(before)
        assert native.core_state() == ("compiled", "mypyc")
    monkeypatch.setenv(native.PURE_ENV, "1")
    assert native.core_state() == ("source", f"{native.PURE_ENV}=1")


def test_a_source_edited_while_the_core_builds_runs_from_source(tmp_path, monkeypatch):
    """setup.py records the digests it took before compiling: an edit made during the build (after
    mypyc read the sources, before the record is written) leaves a build that is not the sources'."""
    pkg = _fake_build(tmp_path, monkeypatch)
    before_compiling = native.source_digests()
    (pkg / "b.py").write_text("def f(): return 2\n")  # edited while the build runs
    native.write_manifest(pkg, before_compiling)  # the build ends
    assert native.core_state() == ("source", "sim/b.py changed since the build (rerun `pip install -e .`)")
    native.write_manifest(pkg, native.source_digests())  # rebuilt
    assert native.core_state() == ("compiled", "mypyc")


def test_a_build_without_its_record_or_a_module_runs_from_source(tmp_path, monkeypatch):
    pkg = _fake_build(tmp_path, monkeypatch)
    (pkg / native.MANIFEST).unlink()
    kind, why = native.core_state()
    assert kind == "source" and native.MANIFEST in why and "pip install -e ." in why
    native.write_manifest(pkg, native.source_digests())
    (pkg / "b").with_suffix(native.importlib.machinery.EXTENSION_SUFFIXES[0]).unlink()
    kind, why = native.core_state()
    assert kind == "source" and why.startswith("not built")


def test_request_rows_log_every_request_log_field_by_its_name():
    from operator import attrgetter

    from sim.metrics.recorder import RECORD_DTYPE, RECORD_FORMAT
    from sim.metrics.requestlog import NUMERIC_FIELDS, TEXT_FIELDS, RequestRows
    from sim.metrics.schema import REQUEST_SCHEMA

    from .objects import request

    derived = {"ttft_s", "tpot_s", "e2e_s", "swa_source"}  # computed by the recorder
    assert sorted(NUMERIC_FIELDS + TEXT_FIELDS) == sorted(set(REQUEST_SCHEMA.names) - derived)
    req = request(900, 1000)
    req.prefix_source, req.finish_s, req.decode_instance, req.measured = "dram", 12.5, 3, True
    rows = RequestRows(2, RECORD_FORMAT)
    assert not rows.add(req) and rows.add(req)
    record = np.frombuffer(rows.numbers, dtype=RECORD_DTYPE, count=2)[1]
    logged = [record[name].item() for name in NUMERIC_FIELDS] + [getattr(rows, n)[1] for n in TEXT_FIELDS]
    assert list(map(repr, logged)) == list(
        map(repr, attrgetter(*NUMERIC_FIELDS, *TEXT_FIELDS)(req))
    )  # NaN-safe
