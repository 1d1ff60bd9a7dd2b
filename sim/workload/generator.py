"""The synthetic agent-workload generator: spec -> canonical trace, streamed in row groups.

`generate_trace(spec, out_path, seed, days=None, progress=None)` is the public entry point (also
used by the simulator when a scenario names a spec). It draws all session start times from the
arrival envelope, then generates sessions in batches of BATCH_SESSIONS with numpy (no Python loop
per request) and streams each batch to Parquet, so memory is bounded by one batch.

A parametric session (see spec.py): `requests_per_session` requests of the main agent (agent 0),
cut into user turns by tool loops, each ending with `end_turn`; every request appends the previous output plus a tool result or a
user message to the context, so its prefix parent is the previous request of the same agent; the
prefix a block-hashing cache finds there is whole blocks of that request's input (and output), less
a drawn rewind (spec.PrefixReuse: real sessions repeat the parent's input to its last 64-token block). Compaction (when input + output would pass the
session's context limit, or at random) restarts the context from keep_fraction of it. Sub-agents are extra
agents launched by a tool_use request; the main agent's next request waits for the last of them.
Arrivals are closed loop ("think" after the request waited for); `arrival_time_s` lays them out
with the spec's nominal service time.

Same spec + seed -> byte-identical file (fixed batch boundaries, named RNG streams, fixed writer
options, no timestamps).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from sim.errors import InputError
from sim.rng import RngStreams
from sim.units import DAY_S, HOUR_S

from .dists import normal_cdf
from .envelope import envelope_shape, session_starts
from .ids import stable_id
from .io import TraceWriter, read_trace_table
from .parts import TracePartsWriter
from .rows import request_table
from .schema import ARRIVAL_ABSOLUTE, ARRIVAL_THINK
from .spec import GeneratorSpec, ParametricSessions, TemplateSessions, load_spec

BATCH_SESSIONS = 1024
PILOT_SESSIONS = 4096
_STOPS = ("tool_use", "end_turn")
_ARRIVALS = (ARRIVAL_ABSOLUTE, ARRIVAL_THINK)


@dataclass
class Sessions:
    """A batch of generated sessions as flat row arrays, rows grouped by session, times relative
    to each session's start; link columns hold row positions within the batch (-1 = none)."""

    session: np.ndarray
    agent: np.ndarray
    time_s: np.ndarray
    think_s: np.ndarray
    depends_on: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    prefix_parent: np.ndarray
    prefix_tokens: np.ndarray
    shared_prefix_id: np.ndarray
    shared_prefix_tokens: np.ndarray
    stop: np.ndarray  # index into _STOPS
    image_count: np.ndarray
    image_tokens: np.ndarray
    effort: np.ndarray  # per session
    tenant: np.ndarray  # per session, index into tenant names (-1 = none)
    template: np.ndarray | None  # per session, index into template names
    end_s: np.ndarray  # per session: when its last response ends (relative)


def generate_trace(spec: GeneratorSpec | str | os.PathLike, out_path: str | os.PathLike, seed: int | None = None,
                   days: float | None = None, progress: Callable[[int, int], None] | None = None,
                   sessions_per_hour: float | None = None, part_sessions: int | None = None) -> dict:  # fmt: skip
    """Generate the trace a spec describes into `out_path` (atomically) and return its summary.

    `spec` is a GeneratorSpec or a YAML path (relative file names in it are resolved against its
    folder). `seed` defaults to the spec's, `days` to the spec's horizon, `sessions_per_hour` to the
    spec's arrivals (the capacity search raises it: the same seed draws the same sessions, started
    faster). `progress(done, total)` is called with sessions generated so far. Same spec, seed, days
    and rate -> byte-identical file. `part_sessions`: `out_path` is a new folder of parts, one per day
    of session starts and at most that many sessions (sim.workload.parts): the same rows.
    """
    spec, base = (spec, Path.cwd()) if isinstance(spec, GeneratorSpec) else load_spec(spec)
    if sessions_per_hour is not None:
        arrivals = spec.arrivals.model_copy(
            update={"sessions_per_hour": sessions_per_hour, "concurrent_sessions": None}
        )
        spec = spec.model_copy(update={"arrivals": arrivals})
    seed = spec.seed if seed is None else seed
    days = spec.days if days is None else days
    if not days > 0:
        raise InputError("must be positive", where="days", value=days)
    sampler = _sampler(spec, base)
    streams = RngStreams(seed)
    horizon_s = days * DAY_S
    step_s, shape = envelope_shape(spec.arrivals.envelope, horizon_s, base)
    mean_duration_s = None
    if spec.arrivals.sessions_per_hour is not None:
        rate_per_s = spec.arrivals.sessions_per_hour / HOUR_S
    else:  # a pilot sample of the spec's own sessions gives their mean duration
        mean_duration_s = sampler.mean_duration_s(RngStreams(seed).get("gen/pilot"))
        rate_per_s = spec.arrivals.concurrent_sessions / mean_duration_s
    starts = session_starts(streams.get("gen/arrivals"), rate_per_s, step_s, shape, horizon_s)
    rng = streams.get("gen/sessions")
    metadata = {
        "sim.source": f"gen:{spec.name}",
        "sim.generator.spec_sha256": hashlib.sha256(spec.model_dump_json().encode()).hexdigest(),
        "sim.generator.seed": str(seed),
        "sim.generator.days": repr(float(days)),
    }
    next_request = 0
    writer = (
        TraceWriter(out_path, metadata=metadata)
        if part_sessions is None
        else TracePartsWriter(out_path, metadata=metadata, part_sessions=part_sessions)
    )
    with writer:
        for lo in range(0, len(starts), BATCH_SESSIONS):
            batch = sampler.draw(rng, len(starts[lo : lo + BATCH_SESSIONS]))
            table = _table(spec, sampler, batch, starts[lo : lo + BATCH_SESSIONS], lo, next_request)
            writer.write(table)
            next_request += table.num_rows
            if progress is not None:
                progress(min(lo + BATCH_SESSIONS, len(starts)), len(starts))
    return {
        **writer.summary,
        "seed": seed,
        "days": days,
        "sessions_per_hour": rate_per_s * HOUR_S,
        "pilot_mean_session_duration_s": mean_duration_s,
    }


def _sampler(spec: GeneratorSpec, base: Path):
    if isinstance(spec.sessions, TemplateSessions):
        return _TemplateSampler(spec, base)
    return _ParametricSampler(spec)


# ------------------------------------------------------------------------------------ parametric


def _early(rng: np.random.Generator, bands: list, position: np.ndarray, appended: np.ndarray,
           initial: np.ndarray) -> np.ndarray:  # fmt: skip
    """Replace what the first requests of each chain append by draws from the early band that
    covers the chain's initial context (see spec.EarlyGrowth)."""
    if not bands:
        return appended
    appended = appended.copy()
    limits = np.array([b.up_to_tokens if b.up_to_tokens is not None else np.inf for b in bands])
    band = np.searchsorted(limits, initial, side="left")  # first band with up_to >= initial
    for b, growth in enumerate(bands):
        for k, dist in enumerate(growth.appended_tokens, start=1):
            rows = np.flatnonzero((position == k) & (band == b))
            appended[rows] = dist.counts(rng, len(rows))
    return appended


def _segmented_cumsum(start: np.ndarray, base: np.ndarray, inc: np.ndarray) -> np.ndarray:
    """x[i] = base[i] at rows where start, else x[i-1] + inc[i] (row 0 must be a start)."""
    c = np.cumsum(np.where(start, 0, inc))
    anchor = np.maximum.accumulate(np.where(start, np.arange(len(start)), 0))
    return base[anchor] + c - c[anchor]


def _first_per_group(mask: np.ndarray, group_start: np.ndarray) -> np.ndarray:
    """Rows where mask is True for the first time within their group (groups are contiguous)."""
    c = np.cumsum(mask)
    anchor = np.maximum.accumulate(np.where(group_start, np.arange(len(mask)), 0))
    before = c[anchor] - mask[anchor]
    return mask & (c - before == 1)


class _ParametricSampler:
    def __init__(self, spec: GeneratorSpec) -> None:
        self.spec = spec
        self.p: ParametricSessions = spec.sessions
        tenants = spec.tenants
        self.tenant_names = [f"t{k}" for k in range(tenants.count)] if tenants else []
        if tenants:
            w = 1.0 / np.arange(1, tenants.count + 1) ** tenants.zipf_exponent
            self.tenant_weights = w / w.sum()
        self.prefix_ids = np.array(
            [stable_id(spec.name, "shared-prefix", v) for v in range(spec.shared_prefix.variants)]
        )
        self.sub_prefix_id = stable_id(spec.name, "subagent-prefix")
        self.template_names: list[str] = []

    def mean_duration_s(self, rng: np.random.Generator) -> float:
        return float(self.draw(rng, PILOT_SESSIONS).end_s.mean())

    def draw(self, rng: np.random.Generator, n_sessions: int) -> Sessions:
        spec, p = self.spec, self.p
        cap, max_out = spec.max_context_tokens, spec.max_output_tokens
        S = n_sessions
        # --- sessions and their main-agent requests, cut into turns by tool loops
        if p.profiles is not None:  # joint rows of a fitted table
            prof = p.profiles
            pick = rng.integers(len(prof.requests), size=S)
            per_session = np.asarray(prof.requests)[pick]
            initial = np.asarray(prof.initial_context_tokens)[pick]
            scale = np.asarray(prof.session_scale)[pick]
            end_p = np.asarray(prof.turn_end_probability)[pick]
            limit_drawn = np.asarray(prof.limit_tokens)[pick]
            compact_p = np.asarray(prof.compaction_probability)[pick]
        else:  # marginals; length, initial context and scale correlated through a copula
            z = np.linalg.cholesky(p.correlation.normal_correlation()) @ rng.standard_normal((3, S))
            u = normal_cdf(z)
            per_session = np.maximum(np.rint(p.requests_per_session.from_uniform(u[0])), 1).astype(np.int64)
            initial = np.maximum(np.rint(p.main.initial_context_tokens.from_uniform(u[1])), 0).astype(
                np.int64
            )
            scale = p.session_scale.from_uniform(u[2])
            end_p = np.clip(p.turn_end_probability.sample(rng, S), 0.0, 1.0)
            limit_drawn = None
            compact_p = np.full(S, p.compaction.probability)
        variant = rng.integers(spec.shared_prefix.variants, size=S)
        effort = np.clip(p.reasoning_effort.counts(rng, S), 0, 100)
        tenant = (
            rng.choice(len(self.tenant_names), size=S, p=self.tenant_weights)
            if self.tenant_names
            else np.full(S, -1)
        )
        main_session = np.repeat(np.arange(S), per_session)
        R = len(main_session)
        session_start = np.concatenate([[True], main_session[1:] != main_session[:-1]])
        turn_end = rng.random(R) < end_p[main_session]
        turn_start = session_start | np.concatenate([[False], turn_end[:-1]])

        # --- sub-agents: launched by tool_use requests of the main agent
        sub = p.subagents
        if sub is not None and sub.probability > 0:
            spawn_rows = np.flatnonzero((rng.random(R) < sub.probability) & ~turn_end)
            per_spawn = sub.count.counts(rng, len(spawn_rows), low=1)
        else:
            spawn_rows, per_spawn = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        chain_spawn = np.repeat(spawn_rows, per_spawn)  # main row that launched each sub chain
        C = len(chain_spawn)
        sub_loop = sub.requests.counts(rng, C, low=1) if C else np.zeros(0, dtype=np.int64)
        sub_chain = np.repeat(np.arange(C), sub_loop)
        Rs = len(sub_chain)
        sub_first = (
            np.concatenate([[0], np.cumsum(sub_loop)[:-1]]).astype(np.int64) if C else np.zeros(0, np.int64)
        )
        sub_last = np.cumsum(sub_loop) - 1 if C else np.zeros(0, np.int64)
        sub_is_first = np.zeros(Rs, dtype=bool)
        sub_is_first[sub_first] = True
        sub_is_last = np.zeros(Rs, dtype=bool)
        sub_is_last[sub_last] = True

        # --- all rows: main rows [0, R), sub rows [R, R + Rs)
        n = R + Rs
        chain_start = np.concatenate([session_start, sub_is_first])
        session = np.concatenate([main_session, main_session[chain_spawn][sub_chain]])
        # sub-agents are numbered 1, 2, ... within their session in launch order
        chain_session = main_session[chain_spawn]
        chain_rank = (
            np.arange(C) - np.searchsorted(chain_session, chain_session) + 1 if C else np.zeros(0, np.int64)
        )
        agent = np.concatenate([np.zeros(R, dtype=np.int64), chain_rank[sub_chain]])
        out = np.minimum(np.concatenate([p.main.output_tokens.counts(rng, R, low=1),
                                         sub.loop.output_tokens.counts(rng, Rs, low=1) if Rs else []]), max_out)  # fmt: skip
        out = out.astype(np.int64)
        shared = np.concatenate(
            [np.full(R, spec.shared_prefix.tokens), np.full(Rs, sub.shared_prefix_tokens if Rs else 0)]
        )

        # what each request appends (user message, tool result, or the initial context)
        user_msg = turn_start & ~session_start
        tool = np.rint(p.main.tool_result_tokens.sample(rng, R) * scale[main_session])
        appended = np.where(
            session_start,
            initial[main_session],
            np.where(user_msg, np.rint(p.user_message_tokens.sample(rng, R) * scale[main_session]), tool),
        )
        position = np.arange(R) - np.flatnonzero(session_start)[main_session]
        appended = _early(rng, p.main.early, position, appended, initial[main_session])
        images = p.images
        with_images = turn_start & (rng.random(R) < images.probability)
        image_count = np.where(with_images, images.count.counts(rng, R, low=1), 0)
        image_tokens = image_count * images.tokens_per_image
        appended = appended + image_tokens
        if Rs:
            sub_initial = sub.loop.initial_context_tokens.counts(rng, C)[sub_chain]
            sub_appended = np.where(sub_is_first, sub_initial, sub.loop.tool_result_tokens.counts(rng, Rs))
            sub_appended = _early(
                rng, sub.loop.early, np.arange(Rs) - sub_first[sub_chain], sub_appended, sub_initial
            )
            appended = np.concatenate([appended, sub_appended])
            image_count = np.concatenate([image_count, np.zeros(Rs, dtype=np.int64)])
            image_tokens = np.concatenate([image_tokens, np.zeros(Rs, dtype=np.int64)])
        appended = appended.astype(np.int64)

        # think times: first request of a session none; after end_turn human; else tool time
        think = np.where(
            user_msg, p.think_after_end_turn_s.sample(rng, R), p.main.think_after_tool_s.sample(rng, R)
        )
        think = np.where(session_start, 0.0, think)
        if Rs:
            think = np.concatenate([think, sub.loop.think_after_tool_s.sample(rng, Rs)])

        compaction = p.compaction
        reset_p = np.concatenate([compact_p[main_session], np.zeros(Rs)])  # sub-agents: only at the cap
        random_reset = (rng.random(n) < reset_p) & ~chain_start
        keep = np.clip(compaction.keep_fraction.sample(rng, n), 0.0, 1.0)
        first_input = np.minimum(shared + appended, cap - out)
        limit = np.full(n, cap)
        first_context = first_input[:R][session_start] + out[:R][session_start]
        if limit_drawn is not None:  # 0 = no limit
            session_limit = np.where(limit_drawn > 0, np.clip(limit_drawn, first_context + 1, cap), cap)
            limit[:R] = session_limit[main_session]
        elif compaction.limit_tokens is not None:  # each session's own limit, above its first context
            drawn = np.rint(compaction.limit_tokens.sample_at_least(rng, first_context + 1))
            limit[:R] = np.where(drawn > first_context + 1, np.minimum(drawn, cap), cap)[main_session]
        inputs, reset = _contexts(chain_start, first_input, appended, out, random_reset, keep, shared, limit)
        cache_break = rng.random(n) < p.cache_break_probability
        # what a block-hashing cache finds of the parent's context (spec.PrefixReuse)
        reuse = p.prefix_reuse
        block = reuse.block_tokens
        repeated = np.roll(inputs + out if reuse.output_reused else inputs, 1)
        rewind = reuse.rewind_blocks.counts(rng, n)
        prefix = np.minimum(np.maximum(repeated // block - rewind, 0) * block, inputs)
        prefix_parent = np.where(chain_start | reset | cache_break | (prefix == 0), -1, np.arange(n) - 1)
        prefix = np.where(prefix_parent >= 0, prefix, 0)
        shared_tokens = np.minimum(shared, inputs)
        shared_id = np.concatenate([self.prefix_ids[variant[main_session]], np.full(Rs, self.sub_prefix_id)])
        shared_id = np.where(shared_tokens > 0, shared_id, -1)

        # --- nominal times (relative to the session start)
        ns = spec.nominal_service
        svc = ns.overhead_s + (inputs - prefix) / ns.prefill_tokens_per_s + out / ns.decode_tokens_per_s
        prev_svc = np.roll(svc, 1)
        time_s = np.zeros(n)
        depends_on = np.where(chain_start, -1, np.arange(n) - 1)
        wait = np.zeros(R)
        if C:
            depends_on[R + sub_first] = chain_spawn  # a sub-agent starts after the request that launched it
            s_idx = slice(R, n)
            sub_rel = _segmented_cumsum(sub_is_first, np.zeros(Rs), prev_svc[s_idx] + think[s_idx])
            sub_end = sub_rel[sub_last] + svc[R + sub_last]
            total = think[R + sub_first] + sub_end  # from the launching request's end to the agent's end
            np.maximum.at(wait, chain_spawn, total)
            # the main agent waits for the sub-agent that ends last
            order = np.lexsort((total, chain_spawn))
            last_of_spawn = order[np.concatenate([chain_spawn[order][1:] != chain_spawn[order][:-1], [True]])]
            join = np.full(R, -1)
            join[chain_spawn[last_of_spawn]] = R + sub_last[last_of_spawn]
            after_spawn = np.concatenate([[False], join[:-1] >= 0]) & ~session_start
            depends_on[:R] = np.where(after_spawn, np.roll(join, 1), depends_on[:R])
        main_inc = prev_svc[:R] + np.roll(wait, 1) + think[:R]
        time_s[:R] = _segmented_cumsum(session_start, np.zeros(R), main_inc)
        if C:
            offset = time_s[chain_spawn] + svc[chain_spawn] + think[R + sub_first]
            time_s[R:] = offset[sub_chain] + sub_rel
        stop = np.where(np.concatenate([turn_end, sub_is_last]), 1, 0)
        last_end = time_s + svc
        end_s = np.zeros(S)
        np.maximum.at(end_s, session, last_end)
        return Sessions(session, agent, time_s, think, depends_on, inputs, out, prefix_parent, prefix, shared_id,
                        shared_tokens, stop, image_count, image_tokens, effort, tenant, None, end_s)  # fmt: skip


def _contexts(chain_start, first_input, appended, out, random_reset, keep, shared, cap):
    """Input tokens of every row, and which rows restart from a compacted context.

    A row's input is the previous row's input + output + what it appends; a chain's first row
    starts from `first_input` (<= cap - output). Compaction events (random, or input + output
    passing the row's `cap`) are placed one per chain per pass, earliest first, because each
    depends on the context before it; each pass only revisits the chains that had an event.
    """
    n = len(chain_start)
    value = np.zeros(n, dtype=np.int64)
    reset = np.zeros(n, dtype=bool)
    rows = np.arange(n)  # rows of the chains still to settle (whole chains, in order)
    start = chain_start.copy()
    base = np.where(chain_start, first_input, 0).astype(np.int64)
    inc = np.concatenate([[0], out[:-1]]) + appended
    pending = random_reset.copy()
    while len(rows):
        s, first = start[rows], chain_start[rows]
        v = _segmented_cumsum(s, base[rows], inc[rows])
        value[rows] = v
        events = (pending[rows] | (v + out[rows] > cap[rows])) & ~s
        if not events.any():
            break
        hit = np.flatnonzero(_first_per_group(events, first))
        at = rows[hit]
        before = v[hit - 1] + out[at - 1]
        base[at] = np.clip(np.floor(keep[at] * before), shared[at] + 1, cap[at] - out[at])
        start[at] = reset[at] = True
        pending[at] = False
        # keep only the chains that had an event (their later rows change)
        chain = np.cumsum(first) - 1
        rows = rows[np.isin(chain, chain[hit])]
    return value, reset


# ------------------------------------------------------------------------------------ templates


class _TemplateSampler:
    """Resamples whole sessions of an imported trace (see spec.TemplateSessions)."""

    def __init__(self, spec: GeneratorSpec, base: Path) -> None:
        self.spec = spec
        path = Path(spec.sessions.file)
        path = path if path.is_absolute() else base / path
        columns = ["session_id", "session_start_s", "template", "request_id", "agent_id", "arrival", "arrival_time_s",
                   "think_time_s", "depends_on_request_id", "input_tokens", "output_tokens", "prefix_parent_request_id",
                   "prefix_tokens", "shared_prefix_id", "shared_prefix_tokens", "stop_reason", "image_count",
                   "image_tokens", "reasoning_effort"]  # fmt: skip
        t = read_trace_table(path, columns=columns)
        if t.num_rows == 0:
            raise InputError("template trace has no requests", file=str(path))
        c = {k: t.column(k).to_numpy(zero_copy_only=False) for k in columns}
        sid = c["session_id"]
        first = np.flatnonzero(np.concatenate([[True], sid[1:] != sid[:-1]]))
        bounds = np.concatenate([first, [len(sid)]])
        too_big = (
            np.maximum.reduceat(c["input_tokens"].astype(np.int64) + c["output_tokens"], first)
            > spec.max_context_tokens
        )
        keep = np.flatnonzero(~too_big)
        if not len(keep):
            raise InputError(
                "no template session fits max_context_tokens", file=str(path), value=spec.max_context_tokens
            )
        self.skipped = int(too_big.sum())
        self.lo, self.hi = bounds[keep], bounds[keep + 1]
        self.c = c
        self.rel_s = c["arrival_time_s"] - c["session_start_s"]
        names = c["template"]
        self.template_names = [
            str(names[i]) if names[i] is not None else f"{path.name}#{int(sid[i])}" for i in self.lo
        ]
        self.tenant_names: list[str] = []
        self.stop_names = sorted({s for s in c["stop_reason"] if s is not None})

    def mean_duration_s(self, rng: np.random.Generator) -> float:
        ns = self.spec.nominal_service
        last = self.hi - 1
        tail = ns.overhead_s + self.c["output_tokens"][last] / ns.decode_tokens_per_s
        return float(np.mean(self.rel_s[last] + tail))

    def draw(self, rng: np.random.Generator, n_sessions: int) -> Sessions:
        pick = rng.integers(len(self.lo), size=n_sessions)
        lengths = self.hi[pick] - self.lo[pick]
        session = np.repeat(np.arange(n_sessions), lengths)
        first_out = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        rows = self.lo[pick][session] + np.arange(len(session)) - first_out[session]
        c = self.c
        shift = (first_out - self.lo[pick])[session]  # template row -> output position

        def remap(ids: np.ndarray) -> np.ndarray:
            # ids -> template rows (request ids increase with rows) -> output positions
            pos = np.searchsorted(c["request_id"], ids)
            return np.where(ids >= 0, pos + shift, -1)

        stop = c["stop_reason"][rows]
        return Sessions(
            session=session,
            agent=c["agent_id"][rows],
            time_s=self.rel_s[rows],
            think_s=c["think_time_s"][rows],
            depends_on=remap(c["depends_on_request_id"][rows]),
            input_tokens=c["input_tokens"][rows],
            output_tokens=c["output_tokens"][rows],
            prefix_parent=remap(c["prefix_parent_request_id"][rows]),
            prefix_tokens=c["prefix_tokens"][rows],
            shared_prefix_id=c["shared_prefix_id"][rows],
            shared_prefix_tokens=c["shared_prefix_tokens"][rows],
            stop=stop,
            image_count=c["image_count"][rows],
            image_tokens=c["image_tokens"][rows],
            effort=c["reasoning_effort"][self.lo[pick]],
            tenant=np.full(n_sessions, -1),
            template=pick,
            end_s=self.rel_s[self.hi[pick] - 1],
        )


# ------------------------------------------------------------------------------------ output


def _table(
    spec: GeneratorSpec, sampler, b: Sessions, starts: np.ndarray, first_session: int, first_request: int
) -> pa.Table:
    """Sort each session's rows by arrival and write them in the canonical layout."""
    n = len(b.session)
    order = np.lexsort((np.arange(n), b.time_s, b.session))
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)
    ids = first_request + np.arange(n)

    def link(rows: np.ndarray) -> np.ndarray:
        rows = rows[order]
        return np.where(rows >= 0, first_request + position[np.maximum(rows, 0)], -1)

    session = b.session[order]
    first = np.concatenate([[True], session[1:] != session[:-1]])
    index = np.arange(n) - np.maximum.accumulate(np.where(first, np.arange(n), 0))
    depends_on = link(b.depends_on)
    if b.template is not None:  # template rows keep their own arrival rules and stop reasons
        arrival = pa.array(np.where(depends_on >= 0, ARRIVAL_THINK, ARRIVAL_ABSOLUTE))
        stop = pa.array(b.stop[order], pa.string())
        template = pa.DictionaryArray.from_arrays(
            pa.array(b.template[session], pa.int32()), sampler.template_names
        )
    else:
        arrival = pa.DictionaryArray.from_arrays(
            pa.array((depends_on >= 0).astype(np.int32)), list(_ARRIVALS)
        )
        stop = pa.DictionaryArray.from_arrays(pa.array(b.stop[order].astype(np.int32)), list(_STOPS))
        template = None
    tenant = None
    if sampler.tenant_names:
        tenant = pa.DictionaryArray.from_arrays(
            pa.array(b.tenant[session].astype(np.int32)), sampler.tenant_names
        )
    start = _to_us(starts[session])
    return request_table(
        n,
        {
            "session_id": first_session + session,
            "session_start_s": start,
            "tenant": tenant,
            "source": f"gen:{spec.name}",
            "template": template,
            "request_id": ids,
            "request_index": index,
            "agent_id": b.agent[order],
            "arrival": arrival,
            "arrival_time_s": _to_us(start + b.time_s[order]),
            "think_time_s": _to_us(np.where(depends_on >= 0, b.think_s[order], 0.0)),
            "depends_on_request_id": depends_on,
            "input_tokens": b.input_tokens[order],
            "output_tokens": b.output_tokens[order],
            "prefix_parent_request_id": link(b.prefix_parent),
            "prefix_tokens": b.prefix_tokens[order],
            "shared_prefix_id": b.shared_prefix_id[order],
            "shared_prefix_tokens": b.shared_prefix_tokens[order],
            "stop_reason": stop,
            "image_count": b.image_count[order],
            "image_tokens": b.image_tokens[order],
            "reasoning_effort": b.effort[session],
        },
    )


def _to_us(seconds: np.ndarray) -> np.ndarray:
    """Times rounded to the microsecond. numpy's exp and log are vectorised per CPU (AVX2, AVX-512)
    and may differ in the last bit between machines; rounded, the same seed writes the same file
    on any of them (a last-bit difference lands on a rounding boundary about once in 1e9 values)."""
    return np.round(seconds, 6)
