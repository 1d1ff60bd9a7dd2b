"""Weka / Claude Code sessions (kv-cache-tester "v8" JSONL: one session per line, 64-token block
hashes, nested sub-agents, think times). Fields and caveats: ../shared/traces/public/README.md §3.

Mapping to the canonical format:
- one line = one session; `session_id` is the line's ordinal, `template` the upstream id
  (`trace_NNNN`). The source has no wall-clock starts: `session_start` chooses them
  (`sim.workload.starts`: zero, the default, i.e. every session at 0 s; poisson:RATE_PER_H; spread:HOURS).
- `model` is each request's model; a sub-agent its parent did not wait for (the parent's next
  request came before the sub-agent's end) has `agent_async` set.
- a sub-agent must start when the request that launched it ended: one whose recorded start
  (`t - duration_ms`) is more than SUBAGENT_START_TOLERANCE_S away from that is started there
  instead, and counted in the import summary (`subagents_retimed`; dev trace_0004 put two 143,000 s
  after the session's last request).
- agent 0 is the main agent, sub-agents are numbered 1, 2, ... in file order (depth first).
- closed loop: a request waits `think_time` after the previous request of its agent; a sub-agent's
  first request waits after the parent request that launched it; the parent's next request waits
  for the sub-agent that finished last (the source's parent `think_time` includes the sub-agents'
  run time, so the gap is recomputed from the sub-agent's end).
- `arrival_time_s` is the source's `t` (the session timeline as recorded, Anthropic's latency included).
- prefix: the earlier request of the session sharing the longest block-hash prefix.
- the first (tool_tokens + system_tokens) // 64 blocks of each agent's first request are the tool
  and system prompt; they map onto one prefix shared across sessions per (that request's model,
  agent kind) in the block ids, unless the session already mapped that key onto other blocks (ids
  stay one-to-one within a session: imported distinct blocks equal the source's). Later requests
  share it only when they start with those same blocks; their `shared_prefix_id` names the prompt's
  key and, when it differs, their own model (its KV is computed by the model that serves it). All
  other block ids get a per-session namespace.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..ids import LOCAL_ID_LIMIT, NAMESPACE_LIMIT, NAMESPACE_SHIFT, SHARED_BLOCK_BIT, stable_id
from ..io import iter_lines
from ..rows import list_array, request_table
from ..schema import ARRIVAL_ABSOLUTE, ARRIVAL_THINK
from ..starts import SessionStarts
from .common import Where, as_count, as_seconds, as_text, get_field, parse_json_line

SOURCE = "weka"

# The block-hash lists are most of the bytes, and each request repeats its predecessor's list and
# appends a few ids. They are cut out of the JSON text and parsed with numpy, re-using the parsed
# predecessor when the text starts the same: 20x faster than the json module. Anything unusual
# stays in the JSON text and goes through the strict per-field checks.
_HASH_KEY = b'"hash_ids"'
# Dev sub-agents start within 1.1 s of their launching request's end (41 of 43); the tolerance is ours [D].
SUBAGENT_START_TOLERANCE_S = 60.0
_LIST_CHARS = b"0123456789, \t\r\n"


@dataclass
class _Row:
    agent: int
    order: int
    time_s: float
    end_s: float  # time_s + api_time (the source's response end)
    think_s: float
    dep: int  # index of the row it waits for, -1 = absolute
    input_tokens: int
    output_tokens: int
    stop: str | None
    hashes: np.ndarray
    model: str | None
    shared_key: tuple[str, str] | None  # the agent's first request only: (model, agent kind)
    shared_blocks: int


@dataclass
class _Session:
    where: Where
    block_size: int
    rows: list[_Row] = field(default_factory=list)
    agents: int = 0
    lists: list[np.ndarray] = field(default_factory=list)
    async_agents: set[int] = field(default_factory=set)
    retimed: int = 0


def read(src: str | Path, progress: Callable[[int, int], None] | None = None, *,
         starts: SessionStarts | None = None, notes: dict[str, int] | None = None) -> Iterator[pa.Table]:  # fmt: skip
    """Canonical request tables, one per session, in file order; sessions start at `starts`
    (default: all at 0 s); repairs are counted into `notes`."""
    starts = starts or SessionStarts()
    if starts.needs_count:
        starts.set_count(sum(1 for _, raw in iter_lines(src) if raw.strip()))
    ordinal = 0
    next_request_id = 0
    for lineno, raw in iter_lines(src, progress):
        if not raw.strip():
            continue
        session = _parse_session(raw, Where(str(src), lineno), ordinal)
        table = _session_table(session, ordinal, next_request_id, starts.next_s())
        if notes is not None:
            notes["subagents_retimed"] = notes.get("subagents_retimed", 0) + session[0].retimed
            notes["subagents_async"] = notes.get("subagents_async", 0) + len(session[0].async_agents)
        ordinal += 1
        next_request_id += table.num_rows
        yield table


def _parse_session(raw: bytes, where: Where, ordinal: int) -> tuple[_Session, dict]:
    text, lists = _cut_hash_lists(raw)
    obj = parse_json_line(text, where)
    session = _Session(where, as_count(get_field(obj, "block_size", where), where, "block_size"))
    if session.block_size <= 0:
        raise where.at("block_size").error("not positive", session.block_size, "> 0")
    session.lists = _parse_lists(lists)
    upstream_id = as_text(get_field(obj, "id", where), where, "id", allow_none=False)
    requests = get_field(obj, "requests", where)
    if not isinstance(requests, list) or not requests:
        raise where.at("requests").error("expected a non-empty list of requests")
    chain = _Chain(agent=0, origin_s=0.0, spawn=-1, kind="main", meta=obj, where=where)
    _walk(session, chain, requests, where.at("requests"))
    if not session.rows:
        raise where.at("requests").error("session has no requests")
    if ordinal >= NAMESPACE_LIMIT:
        raise where.error("too many sessions in one file", ordinal, f"< {NAMESPACE_LIMIT}")
    return session, {"id": upstream_id}


def _cut_hash_lists(raw: bytes) -> tuple[bytes, list[bytes]]:
    """Replace each well-formed `"hash_ids": [...]` by `"hash_ids": k` and return the k-th list's text."""
    parts: list[bytes] = []
    lists: list[bytes] = []
    pos = 0
    while (key := raw.find(_HASH_KEY, pos)) >= 0:
        lo = raw.find(b"[", key)
        hi = raw.find(b"]", lo)
        body = raw[lo + 1 : hi]
        if (
            lo < 0
            or hi < 0
            or raw[key + len(_HASH_KEY) : lo].strip() != b":"
            or body.translate(None, _LIST_CHARS)
        ):
            parts.append(raw[pos : key + len(_HASH_KEY)])
            pos = key + len(_HASH_KEY)
            continue
        parts += (raw[pos:lo], b"%d" % len(lists))
        lists.append(body)
        pos = hi + 1
    parts.append(raw[pos:])
    return b"".join(parts), lists


def _parse_lists(lists: list[bytes]) -> list[np.ndarray | None]:
    """Parsed id arrays (None where the text is not a clean comma-separated list)."""
    out: list[np.ndarray | None] = []
    prev_text, prev_ids = b"", np.zeros(0, dtype=np.int64)
    for body in lists:
        text = body.replace(b" ", b"").replace(b"\n", b"").replace(b"\t", b"").replace(b"\r", b"")
        if (
            prev_text
            and text.startswith(prev_text)
            and text[len(prev_text) : len(prev_text) + 1] in (b",", b"")
        ):
            ids = np.concatenate([prev_ids, _parse_ids(text[len(prev_text) + 1 :])])
        else:
            ids = _parse_ids(text)
        if ids is None or (len(ids) and ids.min() < 0):
            out.append(None)
            prev_text, prev_ids = b"", np.zeros(0, dtype=np.int64)
            continue
        out.append(ids)
        prev_text, prev_ids = text, ids
    return out


def _parse_ids(text: bytes) -> np.ndarray | None:
    if not text:
        return np.zeros(0, dtype=np.int64)
    if text.startswith(b",") or text.endswith(b",") or b",," in text:
        return None
    return np.fromstring(text, dtype=np.int64, sep=",")


@dataclass
class _Chain:
    agent: int
    origin_s: float
    spawn: int  # row index of the request that launched this agent, -1 for the main agent
    kind: str
    meta: dict
    where: Where


def _walk(session: _Session, chain: _Chain, entries: list, where: Where) -> int:
    """Append the chain's requests (and, recursively, its sub-agents') to session.rows; return
    the index of its last request row (-1 when it has none)."""
    prev = chain.spawn
    first = True
    joined: list[int] = []  # last rows of sub-agents launched since the previous request
    last_t = -math.inf
    for i, entry in enumerate(entries):
        w = where.at(i)
        kind = get_field(entry, "type", w, required=False)
        if kind == "subagent":
            joined.append(_subagent(session, chain, entry, w, prev))
            continue
        t = as_seconds(get_field(entry, "t", w), w, "t")
        if t < last_t:
            raise w.at("t").error(
                "time going backwards within the agent", t, f">= {last_t} (the previous request)"
            )
        last_t = t
        time_s = chain.origin_s + t
        api = get_field(entry, "api_time", w, required=False)
        api_s = 0.0 if api is None else as_seconds(api, w, "api_time")
        input_tokens = as_count(get_field(entry, "in", w), w, "in")
        output_tokens = as_count(get_field(entry, "out", w), w, "out")
        stop = as_text(get_field(entry, "stop", w, required=False), w, "stop") or None
        hashes = _hashes(session, get_field(entry, "hash_ids", w), w)
        if len(hashes) > -(-input_tokens // session.block_size):
            raise w.at("hash_ids").error("more blocks than the input holds", len(hashes),
                                         f"<= ceil(in / {session.block_size})")  # fmt: skip
        model = as_text(get_field(entry, "model", w, required=False), w, "model") or None
        shared_key, shared_blocks = None, 0
        if first:
            shared_key = (model or "unknown", chain.kind)
            prompt = sum(
                as_count(chain.meta.get(k, 0), chain.where, k) for k in ("tool_tokens", "system_tokens")
            )
            shared_blocks = min(prompt // session.block_size, len(hashes))
        dep, think_s = _dependency(session, entry, w, time_s, prev, joined, first)
        session.rows.append(_Row(chain.agent, len(session.rows), time_s, time_s + api_s, think_s, dep, input_tokens,
                                 output_tokens, stop, hashes, model, shared_key, shared_blocks))  # fmt: skip
        prev = len(session.rows) - 1
        first = False
        joined = []
    return prev


def _subagent(session: _Session, parent: _Chain, entry: dict, w: Where, spawn: int) -> int:
    session.agents += 1
    t_end = as_seconds(get_field(entry, "t", w), w, "t")
    duration_ms = get_field(entry, "duration_ms", w, required=False)
    launched_s = session.rows[spawn].end_s if spawn >= 0 else parent.origin_s + t_end
    if duration_ms is None:  # no duration: assume it started when the launching request ended
        start_s = launched_s
    else:
        start_s = parent.origin_s + t_end - as_seconds(duration_ms, w, "duration_ms") / 1000.0
        if spawn >= 0 and abs(start_s - launched_s) > SUBAGENT_START_TOLERANCE_S:
            start_s = launched_s  # a time that contradicts the parent's timeline: repaired
            session.retimed += 1
    kind = as_text(get_field(entry, "subagent_type", w, required=False), w, "subagent_type") or "subagent"
    requests = get_field(entry, "requests", w)
    if not isinstance(requests, list):
        raise w.at("requests").error("expected a list of requests")
    chain = _Chain(agent=session.agents, origin_s=start_s, spawn=spawn, kind=kind, meta=entry, where=w)
    return _walk(session, chain, requests, w.at("requests"))


def _dependency(session: _Session, entry: dict, w: Where, time_s: float, prev: int, joined: list[int],
                first: bool) -> tuple[int, float]:  # fmt: skip
    """Which earlier row this request waits for, and the think time after that row's end."""
    rows = session.rows
    ready = [j for j in joined if j >= 0 and rows[j].time_s <= time_s]
    session.async_agents.update(rows[j].agent for j in joined if j >= 0 and rows[j].time_s > time_s)
    if ready:  # after sub-agents: wait for the one that finished last
        dep = max(ready, key=lambda j: (rows[j].end_s, j))
        return dep, max(0.0, time_s - rows[dep].end_s)
    if prev < 0 or rows[prev].time_s > time_s:
        return -1, 0.0
    think = get_field(entry, "think_time", w, required=False)
    if first or think is None:  # a sub-agent's first request, or a gap the source left out
        return prev, max(0.0, time_s - rows[prev].end_s)
    return prev, as_seconds(think, w, "think_time")


def _hashes(session: _Session, value: object, w: Where) -> np.ndarray:
    if type(value) is int and 0 <= value < len(session.lists) and session.lists[value] is not None:
        ids = session.lists[value]
    elif isinstance(value, list):  # not taken by the fast path: check element by element
        for k, x in enumerate(value):
            as_count(x, w.at("hash_ids"), k)
        ids = np.asarray(value, dtype=np.int64)
    else:
        raise w.at("hash_ids").error("expected a list of non-negative block ids")
    return ids


def _session_table(
    parsed: tuple[_Session, dict], ordinal: int, first_request_id: int, start_s: float
) -> pa.Table:
    session, info = parsed
    rows = session.rows
    order = sorted(range(len(rows)), key=lambda j: (rows[j].time_s, rows[j].order))
    rank = np.empty(len(rows), dtype=np.int64)
    rank[order] = np.arange(len(rows))
    rows = [rows[j] for j in order]
    n = len(rows)
    ids = first_request_id + np.arange(n, dtype=np.int64)
    t0 = min(0.0, rows[0].time_s)
    dep = np.array([-1 if r.dep < 0 else ids[rank[r.dep]] for r in rows], dtype=np.int64)
    parent, prefix_blocks, shared_blocks, keys, blocks = _prefixes(session, rows, ordinal)
    input_tokens = np.array([r.input_tokens for r in rows], dtype=np.int64)
    lengths = np.array([len(r.hashes) for r in rows], dtype=np.int64)
    return request_table(
        n,
        {
            "session_id": ordinal,
            "session_start_s": start_s,
            "source": SOURCE,
            "template": info["id"],
            "request_id": ids,
            "request_index": np.arange(n),
            "agent_id": [r.agent for r in rows],
            "arrival": pa.array([ARRIVAL_ABSOLUTE if d < 0 else ARRIVAL_THINK for d in dep], pa.string()),
            "arrival_time_s": [start_s + r.time_s - t0 for r in rows],
            "think_time_s": [r.think_s for r in rows],
            "depends_on_request_id": dep,
            "input_tokens": input_tokens,
            "output_tokens": [r.output_tokens for r in rows],
            "prefix_parent_request_id": np.where(parent >= 0, ids[np.maximum(parent, 0)], -1),
            "prefix_tokens": np.minimum(prefix_blocks * session.block_size, input_tokens),
            "shared_prefix_id": [
                (stable_id(SOURCE, *k) if r.model in (None, k[0]) else stable_id(SOURCE, *k, r.model))
                if k and b
                else -1
                for k, b, r in zip(keys, shared_blocks, rows, strict=True)
            ],
            "shared_prefix_tokens": shared_blocks * session.block_size,
            "block_size_tokens": session.block_size,
            "block_hashes": list_array(np.concatenate([[0], np.cumsum(lengths)]), blocks),
            "stop_reason": pa.array([r.stop for r in rows], pa.string()),
            "model": pa.array([r.model for r in rows], pa.string()),
            "agent_async": [r.agent in session.async_agents for r in rows],
        },
    )


def _prefixes(session: _Session, rows: list[_Row], ordinal: int):
    """Per row: the latest earlier row with the longest common block prefix, its length in blocks,
    the length of the cross-session shared prompt in blocks and its key, and the namespaced block ids.

    Block ids are chained (an id fixes its whole prefix), so the row holding block k-1 of the
    longest common prefix holds all of it."""
    flat = np.concatenate([r.hashes for r in rows])
    max_id = int(flat.max()) if len(flat) else 0
    if max_id >= LOCAL_ID_LIMIT:
        raise session.where.error("block id too large", max_id, f"< {LOCAL_ID_LIMIT}")
    owner = np.full(max_id + 1, -1, dtype=np.int64)  # a row holding each block (the latest to extend it)
    namespace = np.uint64((ordinal + 1) << NAMESPACE_SHIFT)
    global_ids = np.arange(max_id + 1, dtype=np.uint64) | namespace
    shared = np.zeros(max_id + 1, dtype=bool)
    head_key: dict[int, tuple[str, str]] = {}  # first block of a shared prompt -> its key
    mapped: set[tuple[str, str]] = set()
    # The prompt blocks of each agent's first request become one prefix shared across sessions,
    # once per key and session (two different heads under one key would merge distinct blocks).
    for r in rows:
        if r.shared_key and r.shared_blocks and not shared[r.hashes[0]] and r.shared_key not in mapped:
            head = r.hashes[: r.shared_blocks]
            if shared[head].any():
                continue
            key = np.uint64(SHARED_BLOCK_BIT | (stable_id(SOURCE, *r.shared_key, bits=31) << NAMESPACE_SHIFT))
            global_ids[head] = key | np.arange(len(head), dtype=np.uint64)
            shared[head] = True
            head_key[int(head[0])] = r.shared_key
            mapped.add(r.shared_key)
    longest_prompt = max(r.shared_blocks for r in rows) + 1
    n = len(rows)
    parent = np.full(n, -1, dtype=np.int64)
    prefix_blocks = np.zeros(n, dtype=np.int64)
    shared_blocks = np.zeros(n, dtype=np.int64)
    keys: list[tuple[str, str] | None] = [None] * n
    for i, r in enumerate(rows):
        h = r.hashes
        if not len(h):
            continue
        k = len(h) if owner[h[-1]] >= 0 else _leading_true(owner[h] >= 0)
        if k:
            p = int(owner[h[k - 1]])
            ph = rows[p].hashes
            if len(ph) < k or ph[k - 1] != h[k - 1]:  # ids not chained after all: compare in full
                m = min(len(ph), len(h))
                k = _leading_true(ph[:m] == h[:m])
            parent[i], prefix_blocks[i] = (p, k) if k else (-1, 0)
        shared_blocks[i] = _leading_true(shared[h[:longest_prompt]])
        keys[i] = head_key.get(int(h[0])) if shared_blocks[i] else None
        if keys[i] is None:
            shared_blocks[i] = 0
        owner[h[max(k - 1, 0) :]] = i
    return parent, prefix_blocks, shared_blocks, keys, global_ids[flat]


def _leading_true(mask: np.ndarray) -> int:
    """How many leading entries are True."""
    return len(mask) if mask.all() else int(np.argmin(mask))
