"""The plan's append-only, resumable ledger: one small Parquet file per finished candidate.

The folder is one Parquet table (`pandas.read_parquet(folder)` or `pyarrow.dataset` read it
whole). Each candidate is written to a hidden temporary file in the same folder, flushed to disk
and renamed onto `part-<key>.parquet`; a rename is atomic, so a kill at any moment leaves every
finished candidate either complete or absent, never half-written. The key is a hash of the
candidate's resolved scenario and seed, so a rerun finds it again and a candidate can never be
recorded twice (a second write of the same key is the same file). Readers skip hidden files
(pyarrow ignores names starting with `.`), and leftovers of a killed write are removed on open.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

# Summary metrics of one model (sim.api RunResult summary `models.<name>`) kept as typed columns;
# the whole summary also goes into `summary_json`, so nothing the simulator reports is lost.
METRIC_COLUMNS = (
    "requests_arrived",
    "requests_completed",
    "requests_rejected",
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "tpot_p99_s",
    "e2e_p50_s",
    "output_tokens_per_s",
    "input_tokens_per_s",
    "tasks_per_hour",
    "slo_attainment",
    "cluster_usd_per_hour",
    "cost_per_task_usd",
)

SCHEMA = pa.schema(
    [
        pa.field("key", pa.string(), nullable=False),  # stable hash of (resolved scenario, seed)
        pa.field("model", pa.string(), nullable=False),
        pa.field("combo", pa.int32(), nullable=False),  # index of the discrete combination
        pa.field("combo_label", pa.string(), nullable=False),
        pa.field("scale", pa.int32(), nullable=False),  # the bisected node-count variable k
        pa.field("nodes_json", pa.string(), nullable=False),  # {pool: nodes}
        pa.field("total_nodes", pa.int32(), nullable=False),
        pa.field("total_gpus", pa.int32(), nullable=False),
        pa.field("seed", pa.int64(), nullable=False),
        pa.field("feasible", pa.bool_(), nullable=False),
        pa.field("violations", pa.string(), nullable=False),  # "; "-joined, empty when feasible
        *[pa.field(name, pa.float64()) for name in METRIC_COLUMNS],
        # the candidate at its workload's steady rate (sim.plan.steady): derived from summary_json,
        # and derived again when a plan resumes, so a change of that method needs no new simulation
        pa.field("task_arrivals_per_hour", pa.float64()),
        pa.field("steady_load", pa.float64()),
        pa.field("steady_bottleneck", pa.string()),
        pa.field("steady_cost_per_task_usd", pa.float64()),
        pa.field("summary_json", pa.string(), nullable=False),
        pa.field(
            "decode_tokens_per_s_json", pa.string(), nullable=False
        ),  # {pool: tokens/s at the SLO batch}
        pa.field("scenario_json", pa.string(), nullable=False),
        pa.field("wall_s", pa.float64(), nullable=False),  # simulator wall time (not part of any decision)
    ]
)

_PREFIX = "part-"
_SUFFIX = ".parquet"


class Ledger:
    """Finished candidates of one output folder, keyed by candidate key."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        for leftover in folder.glob(f".{_PREFIX}*"):
            leftover.unlink()  # a write killed before its rename: the candidate never finished

    def _path(self, key: str) -> Path:
        return self.folder / f"{_PREFIX}{key}{_SUFFIX}"

    def load(self) -> dict[str, dict[str, Any]]:
        """Every finished candidate's row, by key."""
        rows: dict[str, dict[str, Any]] = {}
        for path in sorted(self.folder.glob(f"{_PREFIX}*{_SUFFIX}")):
            for row in pq.read_table(path, schema=SCHEMA).to_pylist():
                rows[row["key"]] = row
        return rows

    def append(self, row: dict[str, Any]) -> None:
        """Commit one finished candidate atomically (write hidden temp file, fsync, rename)."""
        table = pa.Table.from_pylist([row], schema=SCHEMA)
        final = self._path(row["key"])
        temp = self.folder / f".{final.name}.{os.getpid()}.tmp"
        with open(temp, "wb") as handle:
            pq.write_table(table, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, final)


def metric_columns(summary: dict[str, Any]) -> dict[str, Any]:
    """The typed metric columns of a row, from one model's summary (missing ones are null)."""
    row = {name: (None if summary.get(name) is None else float(summary[name])) for name in METRIC_COLUMNS}
    row["summary_json"] = json.dumps(summary, sort_keys=True, default=str)
    return row
