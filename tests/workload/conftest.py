"""Fixtures for the workload tests: the public traces imported once per test session."""

from __future__ import annotations

import pytest

from sim.workload.importers import import_trace


@pytest.fixture(scope="session")
def mooncake_trace(public_traces, tmp_path_factory):
    out = tmp_path_factory.mktemp("mooncake") / "conversation.parquet"
    import_trace("mooncake", public_traces / "mooncake_fast25" / "conversation_trace.jsonl.gz", out)
    return out
