"""Reading a run directory written by `sim run --out DIR`: the only module that knows its file layout.

Layout (sim.metrics.schema documents every column; the report reads, never recomputes the run):
    DIR/summary.json                        models.<name>.* and the scenario
    DIR/<model>/requests.parquet            one row per arrived request
    DIR/<model>/timeseries/<pool>.parquet   samples per pool
    DIR/<model>/timeseries/_cluster.parquet samples cluster-wide (KV bytes per tier; "_" never starts a pool)

Every file carries the run's id (summary.json `run_id`, each Parquet file's metadata `sim.run_id`, the
`.sim-output` marker): a folder whose files belong to different runs is refused, file by file.

Only the columns the page uses are read: about 55 bytes per request in memory (1M requests: 55 MB). A file that is absent is an empty frame, and the page says "not in this run".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sim.errors import InputError
from sim.metrics.schema import RUN_ID_KEY
from sim.outputs import MARKER, read_marker

SUMMARY_FILE = "summary.json"
REQUESTS_FILE = "requests.parquet"
TIMESERIES_DIR = "timeseries"
CLUSTER_PREFIX = "_"  # _cluster.parquet: pool names cannot start with "_"

# Columns read from requests.parquet; `status` becomes the boolean `completed` at load.
REQUEST_COLUMNS = (
    "session_id", "status", "measured", "arrival_s", "first_token_s", "finish_s", "ttft_s", "tpot_s",
    "output_tokens",
)  # fmt: skip
TASK_COLUMN = "session_id"  # a task is one agent session
COMPLETED = "completed"  # value of `status`; the loaded frame's boolean column of the same name


@dataclass(frozen=True)
class RunData:
    """One run: its summary, per-model request logs and time series (columns as the simulator names them).

    `pools` and `cluster` are long frames: the simulator's columns plus `model` (and `pool`) per sample.
    """

    label: str
    path: Path
    summary: dict
    requests: dict[str, pd.DataFrame] = field(default_factory=dict)
    pools: pd.DataFrame = field(default_factory=pd.DataFrame)
    cluster: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def models(self) -> list[str]:
        return list(self.summary.get("models", {}) or {})

    @property
    def scenario(self) -> dict:
        """The scenario block: a mapping of inputs, or just {"name": ...} when the run records only its name."""
        scn = self.summary.get("scenario")
        if isinstance(scn, dict):
            return scn
        return {"name": scn} if scn else {}

    def model_summary(self, model: str) -> dict:
        return (self.summary.get("models", {}) or {}).get(model, {}) or {}

    def pools_of(self, model: str) -> pd.DataFrame:
        return _rows_of(self.pools, model)

    def cluster_of(self, model: str) -> pd.DataFrame:
        return _rows_of(self.cluster, model)

    def measured_values(self, model: str, column: str) -> np.ndarray:
        """A column over the requests the summary's percentiles are taken over: completed, and arrived
        after the warm-up."""
        df = self.requests.get(model)
        if df is None or column not in df:
            return np.empty(0)
        keep = df[COMPLETED] & df["measured"] if "measured" in df else df[COMPLETED]
        return df.loc[keep, column].to_numpy()

    def sample_interval_s(self) -> float | None:
        """Median spacing of the time-series samples (the scenario's outputs.timeseries_interval_s)."""
        frame = self.cluster if "t_s" in self.cluster else self.pools
        if "t_s" not in frame or len(frame) < 2:
            return None
        steps = np.diff(np.unique(frame["t_s"].to_numpy()))
        return float(np.median(steps)) if steps.size else None

    def time_span_s(self) -> tuple[float, float]:
        """First and last simulated instant seen in any request or sample."""
        lo, hi = np.inf, -np.inf
        for df in self.requests.values():
            for col in ("arrival_s", "finish_s"):
                if col in df and len(df):
                    lo = min(lo, float(np.nanmin(df[col])))
                    hi = max(hi, float(np.nanmax(df[col])))
        for frame in (self.pools, self.cluster):
            if "t_s" in frame and len(frame):
                lo = min(lo, float(frame["t_s"].min()))
                hi = max(hi, float(frame["t_s"].max()))
        return (lo, hi) if lo < hi else (0.0, 1.0)


def _rows_of(frame: pd.DataFrame, model: str) -> pd.DataFrame:
    if frame.empty or "model" not in frame:
        return frame.iloc[0:0]
    return frame[frame["model"] == model]


def _read_table(path: Path, run_id: str, columns: tuple[str, ...] | None = None) -> pa.Table:
    """Columns present in the file (a missing column is simply absent); the file must carry `run_id`."""
    try:
        schema = pq.read_schema(path)
        _check_run_id(path, (schema.metadata or {}).get(RUN_ID_KEY.encode(), b"").decode(), run_id)
        names = schema.names
        return pq.read_table(path, columns=[c for c in columns if c in names] if columns else None)
    except (OSError, ValueError, pa.ArrowException) as err:
        raise InputError(f"cannot read Parquet file ({err})", file=str(path)) from None


def _check_run_id(path: Path, found: str | None, run_id: str) -> None:
    if found != run_id:
        raise InputError(
            f"belongs to {f'run {found}' if found else 'no run (it carries no run id)'}, not to run {run_id} "
            "of summary.json: this folder mixes runs",
            file=str(path),
            allowed="a folder written whole by one `sim run` (run it again with --out NEW_DIR or --force)",
        )


def _read_requests(path: Path, run_id: str) -> pd.DataFrame:
    """The request log, as compact as the page allows (a multi-week log has millions of rows)."""
    table = _read_table(path, run_id, REQUEST_COLUMNS)
    if "status" in table.column_names:
        completed = pc.equal(table["status"], COMPLETED)
        table = table.drop_columns(["status"]).append_column(COMPLETED, completed)
    return table.to_pandas(split_blocks=True, self_destruct=True)


def _time_series(root: Path, models: list[str], run_id: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    pools, cluster = [], []
    for model in models:
        folder = root / model / TIMESERIES_DIR
        for path in sorted(folder.glob("*.parquet")) if folder.is_dir() else []:
            df = _read_table(path, run_id).to_pandas()
            df.insert(0, "model", model)
            if path.name.startswith(CLUSTER_PREFIX):
                cluster.append(df)
            else:
                df.insert(1, "pool", path.stem)
                pools.append(df)
    join = lambda frames: pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()  # noqa: E731
    return join(pools), join(cluster)


def _data_files(root: Path, models: list[str]) -> list[Path]:
    return [p for m in models for p in (root / m).rglob("*.parquet")] if root.is_dir() else []


def load_run(path: str | Path, label: str | None = None) -> RunData:
    """Read a run directory; an InputError when it is not one."""
    root = Path(path)
    summary_path = root / SUMMARY_FILE
    if not summary_path.is_file():
        raise InputError(
            "not a run directory: summary.json is missing",
            file=str(root),
            allowed="a folder written by `sim run SCENARIO --out DIR`",
        )
    try:
        summary = json.loads(summary_path.read_text())
    except json.JSONDecodeError as err:
        raise InputError(
            f"summary.json is not valid JSON ({err.msg})", file=str(summary_path), where=f"line {err.lineno}"
        ) from None
    if not isinstance(summary, dict) or not isinstance(summary.get("models"), dict):
        raise InputError("summary.json has no `models` block", file=str(summary_path))
    models = list(summary["models"])
    run_id = summary.get("run_id")
    if not (isinstance(run_id, str) and run_id) and _data_files(root, models):  # alone, a summary cannot mix
        raise InputError(
            "summary.json has no run id: written by a sim older than sim.run/v2, so its files cannot be "
            "told from another run's",
            file=str(summary_path),
            allowed="a folder written by this sim's `sim run` (run it again)",
        )
    marker = read_marker(root)
    if marker is not None:  # absent where a copy skipped hidden files; the files' own ids still count
        _check_run_id(root / MARKER, marker.get("run_id"), run_id)
    requests = {
        m: _read_requests(root / m / REQUESTS_FILE, run_id)
        for m in models
        if (root / m / REQUESTS_FILE).is_file()
    }
    pools, cluster = _time_series(root, models, run_id)
    return RunData(
        label=label or root.resolve().name,
        path=root,
        summary=summary,
        requests=requests,
        pools=pools,
        cluster=cluster,
    )
