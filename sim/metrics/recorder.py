"""The request log: one row per arrived request, written when it ends (completed or rejected).

An ended request's fields are logged into preallocated rows (`RequestRows`, compiled: a packed
record of its numbers and a list slot per text field, sim.metrics.requestlog), the request object
is released, and each full group of rows is viewed as numpy columns, turned into a Parquet row
group (and into the summary's sums and latency arrays) with vectorised column operations. Memory
for the rows is allocated once, at the start of the run.

Files are written to a temporary name in the same folder and renamed by `close()`, never left
half-written (`abort()` removes them).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sim.metrics.requestlog import NUMERIC_FIELDS, TEXT_FIELDS, RequestRows
from sim.metrics.schema import REQUEST_SCHEMA, stamped
from sim.metrics.slo import slo_met
from sim.metrics.values import LatencyValues

ROWS_PER_GROUP = 65_536
PARQUET_OPTIONS = dict(compression="zstd", compression_level=3, use_dictionary=True, write_statistics=True)


def _record_code(t: pa.DataType) -> str:
    """The struct code a numeric log field is packed with (and the numpy type it is read back as)."""
    if pa.types.is_boolean(t):
        return "?"
    if pa.types.is_integer(t):
        return "q"  # sums over a run overflow int32; the file narrows to the schema's type
    return "d"


_CODES = "".join(_record_code(REQUEST_SCHEMA.field(name).type) for name in NUMERIC_FIELDS)
RECORD_FORMAT = "<" + _CODES  # little-endian, standard sizes, no padding: numpy reads it as is
RECORD_DTYPE = np.dtype([(name, "<" + code) for name, code in zip(NUMERIC_FIELDS, _CODES, strict=True)])


class Totals:
    """Running sums over measured requests (arrived after the warm-up); `tiers`: the chain below HBM."""

    def __init__(self, tiers: list[str]) -> None:
        self.tiers = tiers
        self.arrived = 0
        self.completed = 0
        self.rejected = 0
        self.reasons: dict[str, int] = {}
        self.input_tokens = 0
        self.output_tokens = 0
        self.prefix_tokens = 0
        self.hit_tokens = {name: 0 for name in ("hbm", *tiers)}
        self.computed_tokens = 0
        self.replay_tokens = 0
        self.load_bytes = {name: 0.0 for name in tiers}
        self.swa_load_bytes = 0.0
        self.kv_transfer_bytes = 0.0
        self.slo_met = 0
        self.swa_pool = 0
        self.swa_replay = 0
        self.last_finish_s = 0.0


class Recorder:
    def __init__(
        self,
        out_path: Path | None,
        *,
        slo_ttft_s: float,
        slo_tpot_s: float,
        tiers: list[str],  # the cache tiers below HBM (sim.config.cache), enabled or not
        run_id: str = "",
    ) -> None:
        self.out_path = out_path
        self._schema = stamped(REQUEST_SCHEMA, run_id)
        self._tmp = out_path.with_name(out_path.name + ".tmp") if out_path is not None else None
        self._writer: pq.ParquetWriter | None = None
        self._rows = RequestRows(ROWS_PER_GROUP, RECORD_FORMAT)
        self.slo_ttft_s = slo_ttft_s
        self.slo_tpot_s = slo_tpot_s
        self.totals = Totals(tiers)
        self._ttft = LatencyValues()
        self._tpot = LatencyValues()
        self._e2e = LatencyValues()
        self.all_count = 0
        self.all_sojourn_s = 0.0  # sum over every request of (end - arrival): Little's law

    def record(self, req) -> None:
        """`req` ended (completed or rejected)."""
        if self._rows.add(req):
            self._flush()

    # latency arrays of measured completed requests (after close)
    @property
    def ttft(self) -> np.ndarray:
        return self._ttft.array()

    @property
    def tpot(self) -> np.ndarray:
        return self._tpot.array()

    @property
    def e2e(self) -> np.ndarray:
        return self._e2e.array()

    def _flush(self) -> None:
        rows = self._rows
        n = rows.size
        if n == 0:
            return
        records = np.frombuffer(rows.numbers, dtype=RECORD_DTYPE, count=n)
        cols = {name: np.ascontiguousarray(records[name]) for name in NUMERIC_FIELDS}  # copies
        cols.update({name: getattr(rows, name)[:n] for name in TEXT_FIELDS})
        rows.size = 0
        status = np.asarray(cols["status"])
        tier = np.asarray(cols["prefix_source"])
        completed = status == "completed"
        arrival, first, finish = cols["arrival_s"], cols["first_token_s"], cols["finish_s"]
        out = cols["output_tokens"]
        with np.errstate(invalid="ignore", divide="ignore"):
            ttft = np.where(completed, first - arrival, np.nan)
            e2e = np.where(completed, finish - arrival, np.nan)
            tpot = np.where(completed & (out > 1), (finish - first) / np.maximum(out - 1, 1), np.nan)
        hit = cols["hit_tokens"] > 0
        swa = np.where(
            hit & (cols["swa_load_bytes"] > 0),
            "pool",
            np.where(cols["replay_tokens"] > 0, "replay", np.where(hit & (tier == "hbm"), "hbm", "")),
        )
        self.all_count += n
        self.all_sojourn_s += float(np.sum(finish - arrival))
        cols["ttft_s"] = ttft
        cols["tpot_s"] = tpot
        cols["e2e_s"] = e2e
        if self.out_path is not None:
            self._write(cols, swa)
        self._accumulate(cols, completed, tier, swa)

    def _write(self, cols: dict, swa) -> None:
        source = pa.array(swa, type=pa.string())
        data = {**cols, "swa_source": pc.if_else(pc.equal(source, ""), pa.scalar(None, pa.string()), source)}
        arrays = [pa.array(data[f.name], type=f.type) for f in REQUEST_SCHEMA]
        table = pa.Table.from_arrays(arrays, schema=self._schema)
        if self._writer is None:
            self._tmp.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(self._tmp, self._schema, **PARQUET_OPTIONS)
        self._writer.write_table(table, row_group_size=ROWS_PER_GROUP)

    def _accumulate(self, cols: dict, completed, tier, swa) -> None:
        t = self.totals
        measured = cols["measured"]
        ok = measured & completed
        t.arrived += int(measured.sum())
        t.completed += int(ok.sum())
        rejected = measured & ~completed
        t.rejected += int(rejected.sum())
        for i in np.flatnonzero(rejected):
            reason = cols["reject_reason"][i]
            t.reasons[reason] = t.reasons.get(reason, 0) + 1
        if not ok.any():
            return
        t.last_finish_s = max(t.last_finish_s, float(cols["finish_s"][ok].max()))
        t.input_tokens += int(cols["input_tokens"][ok].sum())
        t.output_tokens += int(cols["output_tokens"][ok].sum())
        t.prefix_tokens += int(cols["prefix_tokens"][ok].sum())
        in_hbm = cols["hbm_hit_tokens"]
        loaded = cols["hit_tokens"] - in_hbm  # the rest came from the tier named in prefix_source
        t.hit_tokens["hbm"] += int(in_hbm[ok].sum())
        for name in t.tiers:
            sel = ok & (tier == name)
            t.hit_tokens[name] += int(loaded[sel].sum())
            t.load_bytes[name] += float(cols["load_bytes"][sel].sum())
        t.computed_tokens += int(cols["computed_tokens"][ok].sum())
        t.replay_tokens += int(cols["replay_tokens"][ok].sum())
        t.swa_load_bytes += float(cols["swa_load_bytes"][ok].sum())
        t.kv_transfer_bytes += float(cols["kv_transfer_bytes"][ok].sum())
        t.swa_pool += int((ok & (swa == "pool")).sum())
        t.swa_replay += int((ok & (swa == "replay")).sum())
        out = cols["output_tokens"]
        ttft, tpot = cols["ttft_s"], cols["tpot_s"]
        met = ok & slo_met(ttft, tpot, out, self.slo_ttft_s, self.slo_tpot_s)
        t.slo_met += int(met.sum())
        self._ttft.extend(ttft[ok])
        self._e2e.extend(cols["e2e_s"][ok])
        self._tpot.extend(tpot[ok & (out > 1)])

    def close(self) -> None:
        """Turn the last buffered requests into rows and move the file into place."""
        self._flush()
        if self.out_path is None:
            return
        if self._writer is None:  # no request at all: still write an empty, typed file
            self._tmp.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(self._tmp, self._schema, **PARQUET_OPTIONS)
        self._writer.close()
        os.replace(self._tmp, self.out_path)

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._tmp is not None and self._tmp.exists():
            self._tmp.unlink()
