"""Mooncake FAST'25 traces (JSONL, one request per line: `timestamp` ms, `input_length`,
`output_length`, `hash_ids` = 512-token prefix blocks in one namespace for the whole file).
Fields and caveats: ../shared/traces/public/README.md §1.

Mapping to the canonical format:
- sessions are inferred as in README §6: a request continues an earlier request whose full-block
  prefix (all its ids but the last, partial one) is a prefix of this request, provided the deepest
  matching block has at most 8 distinct successors in the whole file (so a shared system prompt
  does not chain strangers together) and the input did not shrink. Of several, we take the
  deepest match (the latest among equally deep ones) where the README says "the latest": both give
  8,080 sessions on the conversation trace (the README counts 8,081). A session is one tree of
  such links; it starts at its first request.
- every request arrives at its recorded time (open loop): the gaps contain Moonshot's own service
  time, so they are not think times.
- `prefix_parent_request_id` is the request it continues; `block_hashes` keeps the ids (global, so
  prefix reuse across sessions is exact); `shared_prefix_*` names the deepest leading block that
  requests of other sessions share too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..ids import stable_id
from ..io import iter_lines
from ..rows import list_array, request_table
from ..schema import ARRIVAL_ABSOLUTE
from .common import Where, as_count, get_field, parse_json_line

SOURCE = "mooncake"
BLOCK_TOKENS = 512  # README §1: 512 tokens per hash block
MAX_SUCCESSORS = 8  # README §6: deeper blocks with more successors are shared prompts, not a conversation
SESSIONS_PER_BATCH = 8_192


def read(src: str | Path, progress: Callable[[int, int], None] | None = None) -> Iterator[pa.Table]:
    """Canonical request tables in session order (the whole file is read first: sessions are
    inferred from successor counts over all requests)."""
    times_ms, inputs, outputs, hashes = _load(src, progress)
    parent = _infer_parents(inputs, hashes)
    yield from _tables(times_ms, inputs, outputs, hashes, parent)


def _load(src: str | Path, progress) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
    times, inputs, outputs, hashes = [], [], [], []
    last = 0
    for lineno, raw in iter_lines(src, progress):
        if not raw.strip():
            continue
        w = Where(str(src), lineno)
        obj = parse_json_line(raw, w)
        t = as_count(get_field(obj, "timestamp", w), w, "timestamp")
        if t < last:
            raise w.at("timestamp").error("time going backwards", t, f">= {last} (the previous line)")
        last = t
        n_in = as_count(get_field(obj, "input_length", w), w, "input_length")
        n_out = as_count(get_field(obj, "output_length", w), w, "output_length")
        ids = get_field(obj, "hash_ids", w)
        if not isinstance(ids, list):
            raise w.at("hash_ids").error("expected a list of block ids")
        for k, x in enumerate(ids):
            if type(x) is not int or x < 0:
                as_count(x, w.at("hash_ids"), k)
        if len(ids) > -(-n_in // BLOCK_TOKENS):
            raise w.at("hash_ids").error("more blocks than the input holds", len(ids),
                                         f"<= ceil(input_length / {BLOCK_TOKENS})")  # fmt: skip
        times.append(t)
        inputs.append(n_in)
        outputs.append(n_out)
        hashes.append(np.asarray(ids, dtype=np.int64))
    if not times:
        raise Where(str(src), 1).error("no requests in the file")
    return np.asarray(times), np.asarray(inputs), np.asarray(outputs), hashes


def _infer_parents(inputs: np.ndarray, hashes: list[np.ndarray]) -> np.ndarray:
    """README §6 heuristic: the parent of each request, -1 where it starts a session."""
    successors: dict[int, set[int]] = {}
    for ids in hashes:
        for a, b in zip(ids[:-1].tolist(), ids[1:].tolist(), strict=True):
            successors.setdefault(a, set()).add(b)
    by_prefix_end: dict[int, int] = {}  # last id of a request's full-block prefix -> latest such request
    parent = np.full(len(hashes), -1, dtype=np.int64)
    for i, ids in enumerate(hashes):
        best = -1
        for k, block in enumerate(ids.tolist()):
            cand = by_prefix_end.get(block, -1)
            # ids are chained: a candidate whose prefix ends with this id at this depth is a prefix of
            # ours; deeper candidates replace shallower ones
            if cand >= 0 and len(hashes[cand]) - 1 == k + 1 and inputs[cand] <= inputs[i]:
                if len(successors.get(block, ())) <= MAX_SUCCESSORS:
                    best = cand
        parent[i] = best
        if len(ids) >= 2:
            by_prefix_end[int(ids[-2])] = i
    return parent


def _tables(times_ms, inputs, outputs, hashes, parent) -> Iterator[pa.Table]:
    n = len(hashes)
    root = np.arange(n)
    for i in range(n):  # parents come earlier in the file, so one pass resolves the roots
        if parent[i] >= 0:
            root[i] = root[parent[i]]
    # sessions in start order (the root's line, which is also time order); rows in line order
    order = np.lexsort((np.arange(n), root))
    session_of_root = np.full(n, -1, dtype=np.int64)
    session_of_root[np.unique(root)] = np.arange(len(np.unique(root)))
    session = session_of_root[root[order]]
    new_id = np.empty(n, dtype=np.int64)
    new_id[order] = np.arange(n)
    shared_tokens, shared_ids = _shared_prefix(hashes, root, inputs)
    start_s = times_ms[root[order]] / 1000.0
    first = np.concatenate([[True], session[1:] != session[:-1]])
    index = np.arange(n) - np.maximum.accumulate(np.where(first, np.arange(n), 0))
    par = parent[order]
    prefix = np.array([_common_tokens(hashes[order[j]], hashes[par[j]], inputs[order[j]], inputs[par[j]]) if par[j] >= 0 else 0
                       for j in range(n)], dtype=np.int64)  # fmt: skip
    lengths = np.array([len(hashes[j]) for j in order], dtype=np.int64)
    flat = np.concatenate([hashes[j] for j in order]) if n else np.zeros(0, np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    # cut on session boundaries so each batch holds whole sessions
    starts = np.flatnonzero(first)
    for first_session in range(0, len(starts), SESSIONS_PER_BATCH):
        lo = starts[first_session]
        end = first_session + SESSIONS_PER_BATCH
        hi = starts[end] if end < len(starts) else n
        sl = slice(lo, hi)
        rows = order[sl]
        yield request_table(
            hi - lo,
            {
                "session_id": session[sl],
                "session_start_s": start_s[sl],
                "source": SOURCE,
                "request_id": np.arange(lo, hi),
                "request_index": index[sl],
                "arrival": ARRIVAL_ABSOLUTE,
                "arrival_time_s": times_ms[rows] / 1000.0,
                "input_tokens": inputs[rows],
                "output_tokens": outputs[rows],
                "prefix_parent_request_id": np.where(par[sl] >= 0, new_id[np.maximum(par[sl], 0)], -1),
                "prefix_tokens": prefix[sl],
                "shared_prefix_id": shared_ids[rows],
                "shared_prefix_tokens": shared_tokens[rows],
                "block_size_tokens": BLOCK_TOKENS,
                "block_hashes": list_array(
                    offsets[lo : hi + 1] - offsets[lo], flat[offsets[lo] : offsets[hi]]
                ),
            },
        )


def _common_tokens(ids: np.ndarray, parent_ids: np.ndarray, n_in: int, parent_in: int) -> int:
    m = min(len(ids), len(parent_ids))
    same = ids[:m] == parent_ids[:m]
    k = m if same.all() else int(np.argmin(same))
    return int(min(k * BLOCK_TOKENS, n_in, parent_in))


def _shared_prefix(
    hashes: list[np.ndarray], root: np.ndarray, inputs: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per request: tokens of its leading blocks that other sessions also use, and an id for that
    prefix (the deepest such block: ids are chained, so it names the whole prefix)."""
    sessions_of: dict[int, int] = {}  # block -> a session using it, or -1 when several do
    for i, ids in enumerate(hashes):
        for block in ids.tolist():
            seen = sessions_of.get(block)
            if seen is None:
                sessions_of[block] = int(root[i])
            elif seen != root[i]:
                sessions_of[block] = -1
    tokens = np.zeros(len(hashes), dtype=np.int64)
    ids_out = np.full(len(hashes), -1, dtype=np.int64)
    for i, ids in enumerate(hashes):
        k = 0
        for block in ids.tolist():
            if sessions_of[block] != -1:
                break
            k += 1
        if k:
            tokens[i] = min(k * BLOCK_TOKENS, int(inputs[i]))
            ids_out[i] = stable_id(SOURCE, int(ids[k - 1]))
    return tokens, ids_out
