"""What a capacity planner needs to know about a trace, in one streaming pass (bounded memory).

`trace_stats(path)` returns a JSON-ready dict (keys below; token and time percentiles come from
log histograms, within 0.12% of the exact values, and interpolate linearly between order statistics
like numpy's default method):
- counts: `sessions`, `requests`, `top_level_requests` (agent 0), `subagent_requests`, `subagents`;
- `span_s`, `rates` (per time bin: request and session arrivals per second, active sessions, and
  their means and peaks), `tokens_per_day` (input and output tokens by arrival day);
- `session`: percentiles of requests, top-level requests, user turns (1 + the main-agent requests
  that end a turn, `sim.workload.turns`) and duration per session;
- `percentiles.top_level` / `percentiles.all`: input, output, context (input + output), new
  (input not covered by a reusable prefix) tokens and think time;
- `think_time_s`: think-time percentiles split by the stop reason of the request waited for;
- `prefix_reuse`: share of input tokens covered by a prefix from the same session or from a
  shared prefix first used by an earlier session; and, where the file has block hashes, the share
  of blocks already seen before (infinite cache) within the session and anywhere in the file;
- `arrival_rules`, `stop_reasons`, `images`, `reasoning_effort`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sim.units import DAY_S, HOUR_S, MINUTE_S

from .histogram import LogHistogram
from .io import iter_session_batches, open_parquet, trace_info, trace_parts
from .schema import ARRIVAL_THINK
from .turns import ends_turn

_COLUMNS = [
    "session_id", "session_start_s", "source", "request_id", "agent_id", "arrival", "arrival_time_s", "think_time_s",
    "depends_on_request_id", "input_tokens", "output_tokens", "prefix_tokens", "shared_prefix_id",
    "shared_prefix_tokens", "stop_reason", "image_count", "image_tokens", "reasoning_effort",
]  # fmt: skip
_NICE_BINS_S = (MINUTE_S, 5 * MINUTE_S, 15 * MINUTE_S, HOUR_S, 3 * HOUR_S, 6 * HOUR_S, DAY_S)
_TOKENS = ("input_tokens", "output_tokens", "context_tokens", "new_tokens")
_THINK_CLASSES = ("tool_use", "end_turn", "other")
# Rows per batch when block hashes are read (Weka rows hold ~2,000 ids each).
_HASH_BATCH_ROWS = 8_192


def rate_bin_s(span_s: float, target_bins: int = 400) -> float:
    """The smallest round bin width giving at most `target_bins` bins over the span."""
    for width in _NICE_BINS_S:
        if span_s / width <= target_bins:
            return width
    return DAY_S * np.ceil(span_s / DAY_S / target_bins)


class _Accumulator:
    def __init__(self, bin_s: float, nbins: int, with_blocks: bool) -> None:
        self.bin_s, self.nbins = bin_s, nbins
        self.requests = np.zeros(nbins, dtype=np.int64)
        self.starts = np.zeros(nbins, dtype=np.int64)
        self.active = np.zeros(nbins + 1, dtype=np.int64)
        self.day_in: dict[int, int] = {}
        self.day_out: dict[int, int] = {}
        self.hist = {scope: {name: LogHistogram() for name in _TOKENS} for scope in ("top_level", "all")}
        for scope in self.hist.values():
            scope["think_time_s"] = LogHistogram(floor=1e-3)
        self.think = {c: LogHistogram(floor=1e-3) for c in _THINK_CLASSES}
        self.session = {
            k: LogHistogram() for k in ("requests", "top_level_requests", "user_turns", "subagents")
        }
        self.session["duration_s"] = LogHistogram(floor=1e-3)
        self.counts = {"sessions": 0, "requests": 0, "top_level_requests": 0, "subagents": 0}
        self.tokens = {"input": 0, "within_session": 0, "cross_session": 0}
        self.arrival_rules: dict[str, int] = {}
        self.stops: dict[str, int] = {}
        self.efforts: dict[int, int] = {}
        self.images = {"requests_with_images": 0, "images": 0, "image_tokens": 0}
        self.seen_shared = np.zeros(0, dtype=np.int64)
        self.sources: set[str] = set()
        self.blocks = {"total": 0, "within_session_reused": 0} if with_blocks else None
        self.distinct_blocks = np.zeros(0, dtype=np.uint64)

    def add(self, t: pa.Table) -> None:
        n = t.num_rows
        col = {
            name: t.column(name).to_numpy(zero_copy_only=False)
            for name in _COLUMNS
            if name not in ("stop_reason", "arrival", "source")
        }
        sid, agent, arrival_s = col["session_id"], col["agent_id"], col["arrival_time_s"]
        first = np.concatenate([[True], sid[1:] != sid[:-1]])
        session_idx = np.cumsum(first) - 1
        n_sessions = int(first.sum())
        top = agent == 0
        self.counts["sessions"] += n_sessions
        self.counts["requests"] += n
        self.counts["top_level_requests"] += int(top.sum())
        self.sources.update(s for s in pc.unique(t.column("source")).to_pylist() if s)
        stop = t.column("stop_reason").fill_null("").to_numpy(zero_copy_only=False)
        is_think = pc.equal(t.column("arrival"), ARRIVAL_THINK).to_numpy(zero_copy_only=False)
        _count_into(self.arrival_rules, t.column("arrival"))
        _count_into(self.stops, t.column("stop_reason").fill_null("(none)"))
        for value, k in zip(*np.unique(col["reasoning_effort"], return_counts=True), strict=True):
            self.efforts[int(value)] = self.efforts.get(int(value), 0) + int(k)
        self.images["requests_with_images"] += int((col["image_count"] > 0).sum())
        self.images["images"] += int(col["image_count"].sum())
        self.images["image_tokens"] += int(col["image_tokens"].sum())

        # the stop reason of the request each think arrival waits for (same session, same batch)
        dep_pos = np.clip(np.searchsorted(col["request_id"], col["depends_on_request_id"]), 0, n - 1)
        dep_stop = np.where(is_think, stop[dep_pos], "")
        think_class = np.where(dep_stop == "tool_use", 0, np.where(dep_stop == "end_turn", 1, 2))

        # tokens not covered by a reusable prefix: the session's own, or a shared prefix first
        # used by an earlier session
        inputs = col["input_tokens"].astype(np.int64)
        prefix = col["prefix_tokens"].astype(np.int64)
        cross = np.maximum(0, col["shared_prefix_tokens"] - prefix) * self._shared_available(
            col["shared_prefix_id"], sid
        )
        new = inputs - prefix - cross
        self.tokens["input"] += int(inputs.sum())
        self.tokens["within_session"] += int(prefix.sum())
        self.tokens["cross_session"] += int(cross.sum())
        values = {
            "input_tokens": inputs,
            "output_tokens": col["output_tokens"],
            "context_tokens": inputs + col["output_tokens"],
            "new_tokens": new,
        }
        for name, v in values.items():
            self.hist["all"][name].add(v)
            self.hist["top_level"][name].add(v[top])
        think = col["think_time_s"]
        self.hist["all"]["think_time_s"].add(think[is_think])
        self.hist["top_level"]["think_time_s"].add(think[is_think & top])
        for k, name in enumerate(_THINK_CLASSES):
            self.think[name].add(think[is_think & (think_class == k)])

        # per session
        per = np.bincount(session_idx, minlength=n_sessions)
        per_top = np.bincount(session_idx, weights=top, minlength=n_sessions)
        # a user turn starts after each main-agent request that ends one (sim.workload.turns)
        top_rows = np.flatnonzero(top)
        later_top = np.concatenate([session_idx[top_rows][1:] == session_idx[top_rows][:-1], [False]])
        turn_ends = ends_turn(stop[top_rows]) & later_top
        turns = 1 + np.bincount(session_idx[top_rows], weights=turn_ends, minlength=n_sessions)
        start = col["session_start_s"][first]
        end = np.maximum.reduceat(arrival_s, np.flatnonzero(first))
        subagents = np.zeros(n_sessions)
        if (~top).any():  # distinct sub-agent ids per session
            pairs = np.unique(np.stack([session_idx[~top], agent[~top]]), axis=1)
            subagents = np.bincount(pairs[0], minlength=n_sessions)
        self.counts["subagents"] += int(subagents.sum())
        self.session["requests"].add(per)
        self.session["top_level_requests"].add(per_top)
        self.session["user_turns"].add(turns)
        self.session["duration_s"].add(end - start)
        self.session["subagents"].add(subagents)

        # over time
        self.requests += np.bincount(self._bin(arrival_s), minlength=self.nbins)
        self.starts += np.bincount(self._bin(start), minlength=self.nbins)
        np.add.at(self.active, self._bin(start), 1)
        np.add.at(self.active, self._bin(end) + 1, -1)
        days = (arrival_s // DAY_S).astype(np.int64)
        for d, s_in, s_out in _by_day(days, inputs, col["output_tokens"]):
            self.day_in[d] = self.day_in.get(d, 0) + s_in
            self.day_out[d] = self.day_out.get(d, 0) + s_out
        if self.blocks is not None:
            self._add_blocks(t.column("block_hashes"), session_idx)

    def _bin(self, times_s: np.ndarray) -> np.ndarray:
        return np.clip((times_s // self.bin_s).astype(np.int64), 0, self.nbins - 1)

    def _shared_available(self, shared_id: np.ndarray, sid: np.ndarray) -> np.ndarray:
        """1 where the row's shared prefix was used by an earlier session (file order)."""
        has = shared_id >= 0
        out = np.zeros(len(sid), dtype=np.int64)
        if not has.any():
            return out
        uniq, inv = np.unique(shared_id[has], return_inverse=True)
        first_session = np.full(len(uniq), np.iinfo(np.int64).max)
        np.minimum.at(first_session, inv, sid[has])
        earlier = np.isin(uniq, self.seen_shared)
        out[has] = (earlier[inv] | (sid[has] > first_session[inv])).astype(np.int64)
        self.seen_shared = np.union1d(self.seen_shared, uniq)
        return out

    def _add_blocks(self, hashes: pa.ChunkedArray, session_idx: np.ndarray) -> None:
        arr = hashes.combine_chunks()
        if arr.null_count == len(arr):
            return
        lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False)
        values = pc.list_flatten(arr)
        # (session, block) pairs folded into one 64-bit key with an odd multiplier: a collision
        # needs two 64-bit values to meet by chance (hash-based distinct counts are 10x faster
        # than sorting 8M pairs)
        salt = np.repeat(session_idx.astype(np.uint64), lengths) * np.uint64(0x9E3779B97F4A7C15)
        pairs = pa.array(values.to_numpy() + salt)
        self.blocks["total"] += len(values)
        self.blocks["within_session_reused"] += len(values) - len(pc.unique(pairs))
        merged = np.concatenate([self.distinct_blocks, pc.unique(values).to_numpy()])
        merged.sort()
        self.distinct_blocks = (
            merged[np.concatenate([[True], merged[1:] != merged[:-1]])] if len(merged) else merged
        )

    def result(self, span_s: float) -> dict:
        h = self.hist
        active = np.cumsum(self.active[:-1])
        duration_total = self.session["duration_s"].total
        rates = {
            "bin_s": self.bin_s,
            "t_s": (np.arange(self.nbins) * self.bin_s).tolist(),
            "requests_per_s": (self.requests / self.bin_s).round(6).tolist(),
            "sessions_per_s": (self.starts / self.bin_s).round(6).tolist(),
            "active_sessions": active.tolist(),  # sessions with a request in or around the bin
            "mean_requests_per_s": self.counts["requests"] / span_s if span_s > 0 else None,
            "mean_sessions_per_hour": self.counts["sessions"] / span_s * HOUR_S if span_s > 0 else None,
            "peak_requests_per_s": float(self.requests.max() / self.bin_s),
            # time average of sessions between their first and last arrival (Little's law)
            "mean_concurrent_sessions": duration_total / span_s if span_s > 0 else None,
            "peak_active_sessions": int(active.max()) if len(active) else 0,
        }
        days = sorted(self.day_in)
        total_in = max(self.tokens["input"], 1)
        reuse = {
            "tokens": {
                "within_session": self.tokens["within_session"] / total_in,
                "cross_session": self.tokens["cross_session"] / total_in,
            },
            "blocks": None,
        }
        if self.blocks is not None and self.blocks["total"]:
            total = self.blocks["total"]
            reused = total - len(self.distinct_blocks)
            reuse["blocks"] = {
                "total": total,
                "distinct": len(self.distinct_blocks),
                "reused": reused / total,
                "within_session": self.blocks["within_session_reused"] / total,
                "cross_session": (reused - self.blocks["within_session_reused"]) / total,
            }
        return {
            **self.counts,
            "subagent_requests": self.counts["requests"] - self.counts["top_level_requests"],
            "sources": sorted(self.sources),
            "span_s": span_s,
            "session": {k: v.summary() for k, v in self.session.items()},
            "percentiles": {scope: {k: v.summary() for k, v in hs.items()} for scope, hs in h.items()},
            "think_time_s": {f"after_{k}": v.summary() for k, v in self.think.items()},
            "prefix_reuse": reuse,
            "tokens_per_day": {
                "day": days,
                "input_tokens": [self.day_in[d] for d in days],
                "output_tokens": [self.day_out[d] for d in days],
            },  # fmt: skip
            "rates": rates,
            "arrival_rules": self.arrival_rules,
            "stop_reasons": self.stops,
            "reasoning_effort": {str(k): v for k, v in sorted(self.efforts.items())},
            "images": self.images,
            "cdf": {
                k: h["top_level"][k].cdf()
                for k in ("input_tokens", "output_tokens", "new_tokens", "think_time_s")
            },
        }


def _count_into(counter: dict[str, int], column: pa.ChunkedArray) -> None:
    for item in pc.value_counts(column).to_pylist():
        counter[item["values"]] = counter.get(item["values"], 0) + item["counts"]


def _by_day(days: np.ndarray, inputs: np.ndarray, outputs: np.ndarray):
    uniq, inv = np.unique(days, return_inverse=True)
    s_in = np.bincount(inv, weights=inputs)
    s_out = np.bincount(inv, weights=outputs)
    return ((int(d), int(a), int(b)) for d, a, b in zip(uniq, s_in, s_out, strict=True))


def trace_stats(
    path: str | os.PathLike, progress: Callable[[int, int], None] | None = None, blocks: bool = True
) -> dict:
    """Statistics of a canonical trace file (see the module docstring for the keys). `blocks=False`
    skips block-level reuse (the slow part on files with long hash lists)."""
    info = trace_info(path)
    span_s = float(info["last_arrival_s"])
    bin_s = rate_bin_s(span_s)
    nbins = int(span_s // bin_s) + 1
    with_blocks = blocks and _has_blocks(path)
    acc = _Accumulator(bin_s, nbins, with_blocks)
    columns = _COLUMNS + (["block_hashes"] if with_blocks else [])
    done = 0
    for table in iter_session_batches(path, _HASH_BATCH_ROWS if with_blocks else 65_536, columns):
        acc.add(table)
        done += table.num_rows
        if progress is not None:
            progress(done, int(info["requests"]))
    result = acc.result(span_s)
    result["file"] = str(path)
    return result


def _has_blocks(path: str | os.PathLike) -> bool:
    """Whether any row group has block hashes (from column statistics, without reading rows)."""
    if Path(path).is_dir():
        return any(_has_blocks(part) for part in trace_parts(path))
    meta = open_parquet(path).metadata
    index = meta.schema.to_arrow_schema().get_field_index("block_size_tokens")
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(index).statistics
        if stats is None or not stats.has_min_max or stats.max > 0:
            return True
    return False
