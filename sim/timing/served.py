"""The served reduced model's engine as mechanisms, from its kernel profile (issue 14).

`hwprofiles/<gpu>/serve/serve_step_times.csv` (kernels_bench.serve.bench) times the served model's steps; ten
of its points were also profiled (`gpu_busy_us` and the GPU time by kernel category; the kernels of each in
`serve_step_kernels.csv`, kernels_bench.serve.breakdown). Two things a step costs beyond the kernels `sim`'s
tables time are read from them, each as what the engine does, with its constants measured on these points
(outside the real runs, which measure the error):

- **unfused glue** (`timing.forward_term: unfused_glue`): the served model runs its index arithmetic, dtype
  copies, scatters, RoPE and quantisation as ~330 separate small kernels per layer (category `glue`, counted
  per point). A kernel inside a CUDA graph costs a floor (kernels.md §1 [M]: ~1.5 µs per kernel, a graph of
  ~120 tiny ops replayed in 177 µs) plus its bytes, which grow with the token rows the graph runs (its
  bucket). So glue = launches x floor + rows x time per row; the floor and the time per row are fitted by
  least squares on the profiled points' glue time (the floor comes out within a few percent of kernels.md's
  figure, a check the fit did not use), the launches per layer are counted. Carried as a forward-pass term:
  per layer = launches per layer x floor, per layer-row = time per row / layers (sim.timing.forward.Term).
- **host time in the step** (`timing.host.step_s`, `per_sequence_s`, `per_row_s`; sim.timing.host): wall
  time minus GPU busy time (input preparation in Python, one host-to-device copy, the static-input copies,
  the graph launch and the synchronisation, and the GPU's idle gaps inside the graph) = a + b x sequences +
  c x rows, fitted by least squares on the profiled points whose contexts are in the first 8K graph
  context bucket (the block tables of longer contexts add host work per block that sim does not model:
  their residuals are reported).

On a GPU without its own profiled bench (`carried_engine`) the reference GPU's engine is carried part by part,
each by what bounds it (issue 28): the glue launches and their floor are launch-bound (the GPU's front end and
the graph's kernel issue: the same on every GPU [D]); the glue time per row is tiny kernels far below either
peak, carried as sim.timing.carry's rule 2b carries such kernels, by the SMs' issue rate (SM count x clock);
the host time in the step is the engine's CPU work, taken as the same on the other GPU's machine [D].

Each fit reports its leave-one-out error (each point predicted by the fit without it), as a fraction of the
point's wall time. The time between steps (the engine's scheduler) is not in a step's wall time and is not
in the bench; sim.validate.real_gaps measures it from committed runs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from kernels_bench import columns
from sim import units
from sim.errors import InputError
from sim.paths import hwprofiles_dir
from sim.timing.host import HostCosts
from sim.timing.tables import read_table

TIMES_FILE = "serve/serve_step_times.csv"
KERNELS_FILE = "serve/serve_step_kernels.csv"
TIMES_REQUIRED = columns.names(columns.SERVE_STEP_COLUMNS, "required", "profile")  # kernels_bench.columns
KERNELS_REQUIRED = ("point", "category", "calls")
GLUE = "glue"  # kernels_bench.serve.breakdown's category of everything that is not a named kernel
HOST_FIT_CONTEXT_TOKENS = 8192  # the served engine's first graph context bucket (kernels_bench.serve.model)


@dataclass(frozen=True)
class ProfiledStep:
    """One profiled step of the bench: its composition, wall and GPU busy time, glue time and launches."""

    point: str
    batch: int
    context_tokens: int
    chunk_tokens: int
    prefill_context_tokens: int
    graph_rows: int  # the rows its CUDA graph runs (the row bucket)
    wall_s: float
    gpu_busy_s: float
    glue_s: float
    glue_launches: int

    @property
    def sequences(self) -> int:
        return self.batch + (1 if self.chunk_tokens else 0)

    @property
    def host_s(self) -> float:
        return self.wall_s - self.gpu_busy_s

    @property
    def longest_context_tokens(self) -> int:
        return max(self.context_tokens, self.prefill_context_tokens + self.chunk_tokens)


def point_name(mode: str, batch: int, context: int, chunk: int, chunk_context: int) -> str:
    """The kernel file's `point` of a bench row (kernels_bench.serve.bench names them so)."""
    return f"{mode}_B{batch}_L{context}_T{chunk}_C{chunk_context}"


def load_profiled(times: Path, kernels: Path) -> tuple[ProfiledStep, ...]:
    """The bench's profiled points, with their glue launches counted from the kernel file."""
    _prov, _start, reader = read_table(times, "served step table")
    missing = [c for c in TIMES_REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError("served step table lacks columns", file=str(times), where=f"column {missing[0]}")
    rows = [
        r for r in reader if (r.get("gpu_busy_us") or "").strip() and (r.get("wall_us_p50") or "").strip()
    ]
    launches = _glue_launches(kernels)
    out = []
    for r in rows:
        try:
            ints = [int(r[c]) for c in ("batch", "context_tokens", "chunk_tokens", "prefill_context_tokens",
                                        "graph_bucket")]  # fmt: skip
            wall, busy, glue = (float(r[c]) * units.US for c in ("wall_us_p50", "gpu_busy_us", "glue_us"))
        except ValueError as e:
            raise InputError(f"not a number ({e})", file=str(times)) from e
        name = point_name(r["mode"].strip(), *ints[:4])
        if name not in launches:
            raise InputError(
                "profiled point without kernels", file=str(kernels), where="column point", value=name
            )
        out.append(ProfiledStep(name, *ints, wall, busy, glue, launches[name]))
    if len(out) < 4:
        raise InputError("fewer than 4 profiled points (gpu_busy_us)", file=str(times))
    return tuple(out)


def _glue_launches(path: Path) -> dict[str, int]:
    _prov, _start, reader = read_table(path, "kernel profile of the served steps")
    missing = [c for c in KERNELS_REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError("kernel profile lacks columns", file=str(path), where=f"column {missing[0]}")
    out: dict[str, int] = {}
    for r in reader:
        if r["category"] == GLUE:
            out[r["point"]] = out.get(r["point"], 0) + int(r["calls"])
    return out


@dataclass(frozen=True)
class Fit:
    """Coefficients of a linear least-squares fit, each point's residual and leave-one-out residual (as
    fractions of the point's wall time)."""

    coef: tuple[float, ...]
    points: tuple[str, ...]
    error: tuple[float, ...]
    loo_error: tuple[float, ...]

    def summary(self) -> dict:
        loo = np.abs(np.array(self.loo_error))
        return {"points": len(self.points), "median_abs_error": float(np.median(np.abs(self.error))),
                "loo_median_abs_error": float(np.median(loo)), "loo_max_abs_error": float(loo.max())}  # fmt: skip


def fit_linear(x: np.ndarray, y: np.ndarray, wall: np.ndarray, names: list[str]) -> Fit:
    """Least squares y ~ x @ coef, with residuals and leave-one-out residuals over `wall`."""
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    loo = []
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        c = np.linalg.lstsq(x[keep], y[keep], rcond=None)[0]
        loo.append(float((x[i] @ c - y[i]) / wall[i]))
    err = (x @ coef - y) / wall
    return Fit(tuple(float(c) for c in coef), tuple(names), tuple(float(e) for e in err), tuple(loo))


@dataclass(frozen=True)
class ServedEngine:
    """The served engine's glue and in-step host time, fitted on the profiled bench points (module doc)."""

    launches_per_step: float  # glue kernels per step (median over the points)
    launch_floor_s: float
    glue_per_row_s: float  # per token row the graph runs, all layers
    glue: Fit  # glue_s ~ launches x floor + rows x per row
    host: HostCosts  # its in-step part (no gap: the bench has none)
    host_fit: Fit  # wall - busy ~ a + b sequences + c rows, on the first context bucket's points
    host_misses: dict[str, float]  # the other points' residuals (fractions of their wall)
    source: str
    sm_ratio: float = 1.0  # SM issue rate of its GPU / the bench GPU's (not 1: carried, `carried_engine`)


def fit_engine(points: tuple[ProfiledStep, ...], source: str) -> ServedEngine:
    wall = np.array([p.wall_s for p in points])
    names = [p.point for p in points]
    xg = np.array([[p.glue_launches, p.graph_rows] for p in points], float)
    glue = fit_linear(xg, np.array([p.glue_s for p in points]), wall, names)
    inside = [p for p in points if p.longest_context_tokens <= HOST_FIT_CONTEXT_TOKENS]
    xh = np.array([[1.0, p.sequences, p.graph_rows] for p in inside])
    host = fit_linear(xh, np.array([p.host_s for p in inside]), np.array([p.wall_s for p in inside]),
                      [p.point for p in inside])  # fmt: skip
    a, b, c = host.coef
    misses = {p.point: (a + b * p.sequences + c * p.graph_rows - p.host_s) / p.wall_s
              for p in points if p not in inside}  # fmt: skip
    return ServedEngine(
        launches_per_step=float(np.median([p.glue_launches for p in points])),
        launch_floor_s=glue.coef[0],
        glue_per_row_s=glue.coef[1],
        glue=glue,
        host=HostCosts(step_s=a, per_sequence_s=b, per_row_s=c),
        host_fit=host,
        host_misses=misses,
        source=source,
    )


def served_paths(key: str, model: str = "") -> tuple[Path, Path]:
    """(step table, kernel profile) of `model` on GPU `key`: `serve/serve_step_times_<model>.csv` and
    `serve/serve_step_kernels_<model>.csv` where the model has its own, else the V4 mini's."""
    folder = hwprofiles_dir() / key
    own = tuple(folder / f.replace(".csv", f"_{model}.csv") for f in (TIMES_FILE, KERNELS_FILE))
    if model and all(p.is_file() for p in own):
        return own[0], own[1]
    return folder / TIMES_FILE, folder / KERNELS_FILE


@functools.lru_cache(maxsize=4)
def _engine(times: Path, kernels: Path, _stamps: tuple[int, int]) -> ServedEngine:
    return fit_engine(load_profiled(times, kernels), f"{times.name} + {kernels.name} (profiled bench points)")


def carried_engine(ref: ServedEngine, sm_ratio: float, gpu: str) -> ServedEngine:
    """The reference GPU's engine `ref` on `gpu`, whose SMs issue `sm_ratio` x the reference GPU's (module doc)."""
    from sim.timing.carry import REFERENCE_GPU

    return replace(ref, glue_per_row_s=ref.glue_per_row_s / sm_ratio, sm_ratio=sm_ratio,
                   source=f"{ref.source} on {REFERENCE_GPU}, carried to {gpu}: launches and their floor and the host "
                          f"time as they are, the glue per row x {1 / sm_ratio:.3f} (SM issue rate) [D]")  # fmt: skip


def sm_ratio_of(key: str) -> float:
    """SM count x clock of GPU `key`'s profile / the reference GPU's (sim.timing.carry; 1 without a profile)."""
    from sim.timing.carry import GpuPeaks
    from sim.timing.tables import resolve_gpu

    profile = resolve_gpu(key)[1]
    return 1.0 if profile is None else GpuPeaks.of(profile).sm_ratio


def served_engine(key: str, model: str = "") -> ServedEngine:
    """The served engine on GPU `key` serving `model`: fitted on its profiled bench, else the reference GPU's
    carried (`carried_engine`); an InputError where neither GPU has one."""
    from sim.timing.carry import REFERENCE_GPU

    times, kernels = served_paths(key, model)
    if key != REFERENCE_GPU and not (times.is_file() and kernels.is_file()):
        return carried_engine(served_engine(REFERENCE_GPU, model), sm_ratio_of(key), key)
    for p in (times, kernels):
        if not p.is_file():
            raise InputError("no profiled served-model steps for this GPU", file=str(p),
                             where="timing.forward_term", value="unfused_glue",
                             allowed="fused_glue, measured, none (unfused_glue: GPUs with a profiled served bench table)")  # fmt: skip
    return _engine(times, kernels, (times.stat().st_mtime_ns, kernels.stat().st_mtime_ns))
