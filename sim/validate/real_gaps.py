"""The served engine's time between steps (its scheduler), measured from real runs and held out.

Each run's steps.parquet records when a step started and the previous one ended (`gap_s`): the engine's
scheduling (pick the batch, admit and place chunks, look up prefixes, allocate blocks) and, when nothing
was running, idle waits for arrivals. Gaps of at most `BUSY_GAP_S` are the scheduler's (idle waits in these
runs are think times of tens of milliseconds and more); they are fitted by least squares as
gap = a + b x decoding sequences of the next step + c x its prefill chunks (sim.timing.host: `gap_s`,
`gap_per_sequence_s`, `gap_per_chunk_s`).

The gap is measured inside runs, so `sim validate --real RUN_DIR` takes it from the *other* committed runs
of the same engine (the run folders beside RUN_DIR), never from RUN_DIR itself: leave-one-run-out. The fit
on RUN_DIR alone is reported beside it, as the check of how well the held-out value transfers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

BUSY_GAP_S = 5e-3  # [D] longer gaps are idle waits (no sequence running), not scheduling
STEPS = "steps.parquet"
GAP_COLUMNS = ("gap_s", "decode_context_tokens", "prefill_new_tokens")


@dataclass(frozen=True)
class GapFit:
    """gap = gap_s + gap_per_sequence_s x decodes + gap_per_chunk_s x chunks, and where it was measured."""

    gap_s: float
    gap_per_sequence_s: float
    gap_per_chunk_s: float
    runs: tuple[str, ...]  # run folder names it was fitted on
    steps: int
    mean_gap_s: float  # over the steps fitted

    def to_json(self) -> dict:
        return {"gap_s": self.gap_s, "gap_per_sequence_s": self.gap_per_sequence_s,
                "gap_per_chunk_s": self.gap_per_chunk_s, "runs": list(self.runs), "steps": self.steps,
                "mean_gap_s": self.mean_gap_s}  # fmt: skip


NO_GAPS = GapFit(0.0, 0.0, 0.0, (), 0, 0.0)


def _gaps(folder: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(gap, decodes, chunks) of a run's scheduling gaps; None when the folder is not a run with gaps."""
    path = folder / STEPS
    if not path.is_file():
        return None
    t = pq.read_table(path)
    if any(c not in t.column_names for c in GAP_COLUMNS):
        return None
    gap = t.column("gap_s").to_numpy().astype(np.float64)
    dec = np.array([len(x) for x in t.column("decode_context_tokens").to_pylist()], np.float64)
    chunks = np.array([len(x) for x in t.column("prefill_new_tokens").to_pylist()], np.float64)
    busy = (gap >= 0) & (gap <= BUSY_GAP_S)
    return gap[busy], dec[busy], chunks[busy]


def fit_gaps(folders: list[Path]) -> GapFit:
    """The gap fitted on the steps of `folders` (those that are runs with gap records); NO_GAPS when none."""
    parts = [(f.name, g) for f in folders if (g := _gaps(f)) is not None and len(g[0])]
    if not parts:
        return NO_GAPS
    gap = np.concatenate([g[0] for _, g in parts])
    x = np.column_stack([np.ones(len(gap)), np.concatenate([g[1] for _, g in parts]),
                         np.concatenate([g[2] for _, g in parts])])  # fmt: skip
    a, b, c = np.linalg.lstsq(x, gap, rcond=None)[0]
    return GapFit(float(a), float(b), float(c), tuple(n for n, _ in parts), len(gap), float(gap.mean()))


def held_out_gaps(run_dir: Path) -> GapFit:
    """The gap fitted on the other run folders beside `run_dir` (leave-one-run-out; module doc)."""
    here = run_dir.resolve()
    siblings = sorted(p for p in here.parent.iterdir() if p.is_dir() and p.resolve() != here)
    return fit_gaps(siblings)
