"""Shared fixtures: where the public traces and the reference live (read from ../shared, never copied)."""

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
