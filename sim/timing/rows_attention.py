"""Query rows through the decode pipeline beyond its largest measured batch (prefill rows through the decode
kernel, `timing.prefill_attention: decode_kernel`).

A `decode_layer` pipeline row (sim.timing.stacks rule 4) is the indexer scoring, its top-k and the sparse MLA
decode kernel of one layer at (context, batch); the tables measure batches up to 128 (64 at 1M). The served
reduced model runs a 2,048-token prefill chunk as 2,048 such queries, sixteen times past the last point.
Extrapolated in proportion to the rows, the whole pipeline doubles the attention its profile measures (4.5 vs
2.3 ms for a 2,048-row chunk, hwprofiles/h200/serve/README.md), because not all of it grows with the rows:
the top-k and the glue between the kernels (the pipeline less its two kernels: ~36 us of a CSA layer at
128 rows and ~33 us at 64) are launch-bound at these sizes. So beyond the largest batch B the pipeline at N
rows is

    pipeline(B) - kernels(B) + kernels(N)

with kernels = the sparse MLA decode kernel of the layer's kind (production FlashMLA, measured up to 512
rows, where it is throughput-bound: 256 -> 512 rows doubles its time) + the indexer (its own rows, up to
128), each read from its own measured curve (in proportion to the rows beyond its last point), and the rest
held at its value at B [D: launch-bound; the served model's top-k of 2,048 rows takes ~95 us a layer]. A
pipeline whose components the tables lack keeps the proportional rule.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.timing.interp import Grid
from sim.timing.stacks import PIPELINE_COMPONENTS, OpTimes
from sim.timing.tables import KernelTables


@dataclass(frozen=True)
class PipelineRows:
    """One pipeline kind's time over query rows, extended past its measured batches (module doc)."""

    grid: Grid  # context x batch
    batch_max: float  # the largest batch measured (128; 64 at 1M, where the grid is already past it)
    kernels: tuple[OpTimes, ...]  # its sparse MLA decode and indexer rows (empty: proportional rule)

    def at(self, context_tokens: float, rows: float) -> float:
        if rows <= self.batch_max or not self.kernels:
            return self.grid.at(context_tokens, rows)
        at_max = sum((k.at(context_tokens, self.batch_max) for k in self.kernels), 0.0)
        rest = max(0.0, self.grid.at(context_tokens, self.batch_max) - at_max)
        return rest + sum((k.at(context_tokens, rows) for k in self.kernels), 0.0)


def pipeline_rows(tables: KernelTables, model_key: str, kind: str, grid: Grid) -> PipelineRows:
    """The pipeline of `kind` (table `layer_kind`) of a model (table `model`) with its component kernels."""
    kernels = []
    for family, kernel in PIPELINE_COMPONENTS:
        model = "V4" if kind == "SWA" else model_key  # V4.1's SWA-only layers run V4's kernel (calibrated)
        # the sparse MLA kernel of V4.1's compressed layers is CSA2 whatever the layer's selection (stacks rule 4)
        layer_kind = kind if family != "attention" or model == "V4" else "CSA2"
        rows = tables.select(family=family, kernel=kernel, model=model, layer_kind=layer_kind)
        if rows:
            kernels.append(OpTimes(rows))
    return PipelineRows(grid, max(c.xs[-1] for c in grid.inner), tuple(kernels))
