"""Shared fixtures and hooks: where the public traces and the reference live (read from ../shared, never
copied); the `gpu` marker's skip without CUDA and Triton; a local Ray cluster of two nodes."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from sim.paths import public_traces_dir, shared_dir
from sim.workload.importers import import_trace

# Hypothesis: derandomised by default (CI included), so a failure replays exactly on any machine
# (the examples come from each test's own source, not from a random seed or a local database);
# `HYPOTHESIS_PROFILE=explore pytest ...` draws fresh random examples and prints the blob to
# replay a failure with @reproduce_failure.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def public_traces():
    """The public traces folder; tests that need it skip with a clear message where it is absent."""
    path = public_traces_dir()
    if not path.is_dir():
        pytest.skip(
            f"public traces not found at {path}: put the shared folder beside the project (see README)"
        )
    return path


@pytest.fixture(scope="session")
def reference_dir():
    path = shared_dir() / "reference"
    if not path.is_dir():
        pytest.skip(f"reference fact base not found at {path}")
    return path


@pytest.fixture(scope="session")
def weka_trace(public_traces, tmp_path_factory):
    """The Weka v8 dev sessions of ../shared, imported (about 10 s)."""
    out = tmp_path_factory.mktemp("weka") / "weka.parquet"
    import_trace("weka", public_traces / "weka_claude_code" / "weka_cc_traces_v8_dev.jsonl.xz", out)
    return out


def _gpu_ready() -> bool:
    """CUDA and Triton both usable (the `gpu` tests launch Triton kernels); imported only when a
    collected test is marked `gpu`, so a run without torch never imports it."""
    try:
        import torch
        import triton  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    """Every test marked `gpu`, in any folder, skips on a machine without CUDA and Triton."""
    marked = [item for item in items if "gpu" in item.keywords]
    if not marked or _gpu_ready():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU and Triton (README, Kernels)")
    for item in marked:
        item.add_marker(skip)


@pytest.fixture(scope="module")
def ray_cluster():
    """A running Ray cluster of a head and one more node of one CPU each: two worker processes, as
    two machines would run (`--ray ADDRESS` of `sim sweep` and `sim plan`). One per test module:
    started and stopped around it, so its processes do not outlive the tests that use them."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    try:
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes(timeout=60)
    except Exception as err:  # noqa: BLE001 - a CI machine that cannot run Ray skips, saying why
        pytest.skip(f"cannot start a local Ray cluster here: {err}")
    yield cluster
    if ray.is_initialized():
        ray.shutdown()
    cluster.shutdown()
