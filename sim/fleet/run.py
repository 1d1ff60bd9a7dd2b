"""`run_fleet`: a scenario with `cluster.cells` simulated cell by cell, in parallel, merged exactly.

1. The trace (a file, a folder of parts, or generated from the scenario's spec) is split by session
   into one trace per cell (sim.fleet.split, the global router of sim.fleet.route), streamed.
2. Each cell is today's one-cluster run (`sim.api.run_scenario` of the scenario with that cell's
   trace and no cells, its capacity search off), every model of it, written under
   `out/cells/cell_NNNN/` (summary.json, each model's request log and time series). Cells run
   `jobs` at a time in local processes, or as Ray tasks (`ray`: "local" or a cluster's address;
   sim.plan.executors), in any order: a cell's outputs depend on its inputs alone.
3. The fleet summary (`out/summary.json`) merges the cells in cell order (sim.fleet.merge).

So a run gives the same bytes serially, with any `jobs` and on Ray. The folder is written whole or not
at all (sim.outputs). Its run id hashes the scenario, the seed, the sim version and every trace part's
bytes (or the generator spec's).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from sim.api import run_scenario
from sim.config.errors import validate_or_raise
from sim.config.scenario import Scenario, load_scenario
from sim.errors import InputError
from sim.fleet import FLEET_FORMAT
from sim.fleet.merge import merge_model, read_cell_summary
from sim.fleet.split import parts_digest, split_trace
from sim.metrics.schema import RUN_FORMAT
from sim.outputs import probe_output_dir, staged_output_dir
from sim.plan.executors import make_executor
from sim.processes import peak_rss_bytes
from sim.workload.io import arrow_without_pandas, trace_parts
from sim.workload.parts import DEFAULT_PART_SESSIONS

# progress(stage, done, total): stage "split" counts trace rows, "cells" counts cells run
FleetProgress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class CellRun:
    """One cell to simulate: everything its worker needs, picklable (the scenario as its document)."""

    doc: dict
    file: str | None
    cell: int
    seed: int
    out: str
    loop: str | None


@dataclass(frozen=True)
class CellOutcome:
    cell: int
    requests: int  # simulated: the cell's trace rows x models
    wall_s: float
    peak_rss_bytes: int  # the worker's, so far


@dataclass
class FleetResult:
    summary: dict
    out_dir: Path
    cells: list[CellOutcome]
    split_s: float
    merge_s: float


def run_cell(task: CellRun) -> CellOutcome:
    """Simulate one cell (every model, in turn) into `task.out`; in a worker."""
    began = time.perf_counter()
    with arrow_without_pandas():
        scn = validate_or_raise(Scenario, task.doc, file=task.file or "scenario")
        scn._file = task.file
        result = run_scenario(scn, task.seed, task.out, jobs=1, loop=task.loop, capacity=False)
    requests = sum(m["requests_arrived_incl_warmup"] for m in result.summary["models"].values())
    return CellOutcome(task.cell, requests, time.perf_counter() - began, peak_rss_bytes())


@contextlib.contextmanager
def _cell_traces_dir(rid: str) -> Iterator[Path]:
    """Where the cell traces go while the fleet runs: a folder named by the run id, not a random one,
    because each cell's scenario (in its summary and its run id) names its trace's path, and the
    same run must give the same bytes however it runs. Removed when the run ends; a second run of
    the same fleet at the same time is refused."""
    folder = Path(tempfile.gettempdir()) / f"sim-fleet-{rid}"
    owner = folder / "owner.pid"
    if folder.exists():
        try:
            pid = int(owner.read_text())
            os.kill(pid, 0)
        except (OSError, ValueError):
            shutil.rmtree(folder, ignore_errors=True)  # left by a run that ended without cleaning up
        else:
            raise InputError(f"the same fleet run (id {rid}) is running in process {pid}", where=str(folder),
                             allowed="one run of a fleet at a time")  # fmt: skip
    folder.mkdir(parents=True)
    owner.write_text(str(os.getpid()))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def fleet_run_id(scn: Scenario, seed: int, parts: list[Path]) -> str:
    from sim import __version__

    h = hashlib.sha256()
    h.update(json.dumps([FLEET_FORMAT, RUN_FORMAT, __version__, seed, scn.model_dump(mode="json")],
                        sort_keys=True).encode())  # fmt: skip
    h.update(parts_digest(parts))
    return h.hexdigest()[:16]


def _cell_doc(scn: Scenario, trace: Path) -> dict:
    """The scenario one cell runs: its trace, no cells, no capacity search."""
    doc = scn.model_dump(mode="json")
    doc["cluster"]["cells"] = None
    doc["workload"] |= {"trace": str(trace), "generator": None, "days": None}
    doc["capacity"]["enabled"] = False
    return doc


def _source(scn: Scenario, seed: int, workdir: Path) -> list[Path]:
    w = scn.workload
    if w.benchmark is not None:
        raise InputError("a fleet splits a trace by session: a benchmark client has none",
                         file=scn.source_file, where="workload.benchmark",
                         allowed="workload.trace or workload.generator with cluster.cells")  # fmt: skip
    if w.trace is not None:
        return trace_parts(w.trace)
    from sim.workload.generator import generate_trace

    out = workdir / "generated_trace"
    generate_trace(w.generator, out, seed=seed, days=w.days, part_sessions=DEFAULT_PART_SESSIONS)
    return trace_parts(out)


def run_fleet(
    scenario: Scenario | str | os.PathLike,
    out_dir: str | os.PathLike,
    seed: int | None = None,
    *,
    force: bool = False,
    jobs: int = 1,
    ray: str | None = None,
    loop: str | None = None,
    progress: FleetProgress | None = None,
) -> FleetResult:
    """Simulate every cell of `scenario` (module doc) into `out_dir`."""
    scn = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    cells = scn.cluster.cells
    if cells is None:
        raise InputError("not a fleet", file=scn.source_file, where="cluster.cells", allowed="cells: N")
    if not scn.outputs.write_requests:
        raise InputError("a fleet merges its cells' percentiles from their request logs",
                         file=scn.source_file, where="outputs.write_requests", value=False,
                         allowed="true with cluster.cells")  # fmt: skip
    seed = scn.seed if seed is None else seed
    target = probe_output_dir(Path(out_dir), force=force)
    with tempfile.TemporaryDirectory(prefix="sim-fleet-") as tmp:
        parts = _source(scn, seed, Path(tmp))
        rid = fleet_run_id(scn, seed, parts)
        with (
            _cell_traces_dir(rid) as traces,
            staged_output_dir(target, run_id=rid, command="sim run") as stage,
        ):
            began = time.perf_counter()
            split = split_trace(
                parts, cells, traces, (lambda d, t: progress("split", d, t)) if progress else None
            )
            split_s = time.perf_counter() - began
            pa.default_memory_pool().release_unused()  # the split's batches: Arrow's allocator keeps them
            cell_dirs = [stage / "cells" / f"cell_{k:04d}" for k in range(cells.count)]
            tasks = [
                CellRun(_cell_doc(scn, split.paths[k]), scn.source_file, k, seed, str(cell_dirs[k]), loop)
                for k in range(cells.count)
            ]
            outcomes = _run_cells(tasks, jobs, ray, progress)
            began = time.perf_counter()
            summary = _merge(scn, seed, rid, cell_dirs, split)
            (stage / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
            merge_s = time.perf_counter() - began
    return FleetResult(summary, target.path, outcomes, split_s, merge_s)


def _run_cells(tasks: list[CellRun], jobs: int, ray: str | None,
               progress: FleetProgress | None) -> list[CellOutcome]:  # fmt: skip
    """Every cell, `jobs` at a time (locally: one at a time in this process when 1), in cell order."""
    if ray is None and jobs <= 1:
        outcomes = []
        for task in tasks:
            outcomes.append(run_cell(task))
            if progress is not None:
                progress("cells", len(outcomes), len(tasks))
        return outcomes
    executor = make_executor(run_cell, max(1, jobs), ray)
    done: dict[str, CellOutcome] = {}
    try:
        for task in tasks:
            executor.submit(str(task.cell), task)
        while executor.pending():
            key, outcome = executor.next_done()
            done[key] = outcome
            if progress is not None:
                progress("cells", len(done), len(tasks))
    finally:
        executor.close()
    return [done[str(task.cell)] for task in tasks]


def _merge(scn: Scenario, seed: int, rid: str, cell_dirs: list[Path], split) -> dict:
    cell_summaries = [read_cell_summary(d) for d in cell_dirs]
    cells = scn.cluster.cells
    models = {}
    for ref in scn.models:
        per_cell = [s["models"][ref.name] for s in cell_summaries]
        models[ref.name] = merge_model(ref.name, cell_dirs, per_cell, warmup_s=scn.workload.warmup_s,
                                       slo_ttft_s=scn.slo.ttft_s, slo_tpot_s=scn.slo.tpot_s)  # fmt: skip
    return {
        "format": FLEET_FORMAT,
        "run_id": rid,
        "scenario": scn.model_dump(mode="json"),
        "seed": seed,
        "fleet": {
            "cells": cells.count,
            "router": cells.router,
            "cell_run_ids": [s["run_id"] for s in cell_summaries],
            "requests_per_cell": split.requests,
            "sessions_per_cell": split.sessions,
        },
        "models": models,
    }
