"""Fit generator parameters to a canonical trace: `fit_spec(path) -> GeneratorSpec`.

Everything is an empirical distribution (101 quantiles) of what the trace shows, measured per agent
chain (consecutive requests of one agent of one session):
- main-agent requests per session; a turn ends at a request whose stop reason is not `tool_use`
  (end_turn, or none recorded: the Weka trace's streaming requests without a stop are followed by
  human-scale gaps); each session's share of turn ends, weighted by its requests (so the mix of
  tool and human think times comes out as in the source), gives turn_end_probability;
- appended tokens = input - (previous input + previous output), clipped at 0; after a turn end it is
  a user message, otherwise a tool result. The first EARLY_POSITIONS requests get their own
  distributions (`early`, two bands split at the median initial context); later ones are divided
  by a per-session scale (the session's mean over the median of the sessions' means, kept within
  SCALE_RANGE), fitted separately as `session_scale`;
- a transition resets the prefix when less than half the previous input survives as prefix (or,
  in files without prefix information, when the input halves). If the context also shrank below
  90 % it is a compaction (keep_fraction = input / previous context), otherwise a cache break
  (prefix lost, context carried on). Per-session context limits: a Kaplan-Meier estimate from the
  context at each session's first compaction, sessions that never compacted being censored at
  their largest context; the mass left above the largest compaction goes to max_context_tokens;
- think times are split by the previous request's stop reason in the same chain;
- sub-agents: launch probability per tool_use request, agents per launch, and their own loop;
- the nominal service time is a least-squares fit of the source's response times (arrival gap
  minus think time) against new input and output tokens;
- session arrivals: the source's mean rate when its sessions start at different times, otherwise
  as many sessions per day as the source holds.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from sim.errors import InputError
from sim.units import DAY_S, HOUR_S

from .dists import Dist, fit_quantiles
from .io import atomic_output, read_trace_table
from .spec import (
    AgentLoop,
    Arrivals,
    Compaction,
    DiurnalEnvelope,
    EarlyGrowth,
    GeneratorSpec,
    Images,
    NominalService,
    ParametricSessions,
    PrefixReuse,
    SessionCorrelation,
    SessionProfiles,
    SharedPrefix,
    SubAgents,
    Tenants,
    spec_to_yaml,
)
from .turns import ends_turn

_COLUMNS = ["session_id", "session_start_s", "tenant", "source", "request_id", "agent_id", "arrival", "arrival_time_s",
            "think_time_s", "depends_on_request_id", "input_tokens", "output_tokens", "prefix_tokens",
            "shared_prefix_id", "shared_prefix_tokens", "stop_reason", "image_count", "image_tokens",
            "reasoning_effort", "block_size_tokens"]  # fmt: skip
RESET_KEPT_FRACTION = 0.5  # README §3 (Weka): "reset (< 50 % of the previous prefix kept)"
COMPACTION_KEPT_CONTEXT = 0.9  # a reset that keeps less of the context than this compacted it
MIN_SESSIONS_FOR_SCALE = 3  # tool transitions a session needs before its mean counts
SCALE_RANGE = (0.02, 50.0)
AUTO_LIMIT_MARGIN = 1.1  # a session that grew 10 % past its highest compaction point has no limit
MANUAL_BELOW = 0.8  # compactions below 80 % of a session's limit were not forced by it
EARLY_POSITIONS = 5  # first requests of a chain with their own appended-token distribution
MIN_ROWS_PER_POSITION = 30  # a session reading almost nothing must not blow up the normalised values


def _dist(values, fallback: Dist) -> Dist:
    return fit_quantiles(values) or fallback


def fit_spec(path: str | os.PathLike, name: str | None = None) -> GeneratorSpec:
    """Generator parameters fitted to the trace at `path` (see the module docstring)."""
    df = read_trace_table(path, columns=_COLUMNS).to_pandas()
    if df.empty:
        raise InputError("trace has no requests to fit", file=str(path))
    df["stop_reason"] = df["stop_reason"].fillna("")
    chain = df.groupby(["session_id", "agent_id"], sort=False)
    df["chain_first"] = chain.cumcount() == 0
    df["prev_in"] = chain["input_tokens"].shift()
    df["prev_out"] = chain["output_tokens"].shift()
    df["prev_stop"] = chain["stop_reason"].shift()
    has_prefix = bool((df["prefix_tokens"] > 0).any())
    trans = ~df["chain_first"]
    kept = df["prefix_tokens"] if has_prefix else df["input_tokens"]
    df["reset"] = trans & (kept < RESET_KEPT_FRACTION * df["prev_in"])
    df["appended"] = (df["input_tokens"] - df["prev_in"] - df["prev_out"]).clip(lower=0)
    df["after_tool"] = df["prev_stop"] == "tool_use"

    main = df[df["agent_id"] == 0]
    subs = df[df["agent_id"] > 0]
    per_session_series = main.groupby("session_id", sort=False).size()
    per_session = per_session_series.to_numpy()
    ends = (
        pd.Series(ends_turn(main["stop_reason"]), index=main.index)
        .groupby(main["session_id"], sort=False)
        .mean()
    )
    end_probability = np.repeat(ends.to_numpy(), per_session)  # weighted by requests

    steady = main.groupby("session_id").cumcount() > EARLY_POSITIONS
    moves = main[trans.loc[main.index] & ~main["reset"] & steady]
    per = moves.groupby("session_id")["appended"].agg(["mean", "size"])
    per = per[per["size"] >= MIN_SESSIONS_FOR_SCALE]["mean"]
    overall = float(per.median()) if len(per) and per.median() > 0 else 1.0
    scale = (per / overall).clip(*SCALE_RANGE)
    normalised = moves["appended"] / moves["session_id"].map(scale).fillna(1.0)
    tool_norm, user_norm = normalised[moves["after_tool"]], normalised[~moves["after_tool"]]

    first = main[main["chain_first"]].set_index("session_id", drop=False)
    summary = pd.DataFrame({"length": per_session_series, "initial": first["input_tokens"] - first["shared_prefix_tokens"],
                            "scale": scale}).rank()  # fmt: skip
    corr = summary.corr(method="pearson").fillna(0.0)
    resets = main[main["reset"]]
    keep = resets["input_tokens"] / (resets["prev_in"] + resets["prev_out"])
    compacted = keep < COMPACTION_KEPT_CONTEXT
    transitions = int((~main["chain_first"]).sum())
    limits, manual = _session_limits(main, resets[compacted])
    think_rows = main[(main["arrival"] == "think") & ~main["chain_first"]]
    shared_tokens = (
        int(first["shared_prefix_tokens"].median()) if (first["shared_prefix_tokens"] > 0).any() else 0
    )
    variants = int(first.loc[first["shared_prefix_id"] >= 0, "shared_prefix_id"].nunique()) or 1

    max_context = int(max(1_000_000, np.ceil((df["input_tokens"] + df["output_tokens"]).max() * 1.1)))
    main_loop = AgentLoop(
        initial_context_tokens=_dist(
            first["input_tokens"] - first["shared_prefix_tokens"], Dist(constant=1000)
        ),
        tool_result_tokens=_dist(tool_norm, Dist(constant=0)),
        early=_fit_early(main),
        output_tokens=_dist(main["output_tokens"], Dist(constant=1)),
        think_after_tool_s=_dist(think_rows.loc[think_rows["after_tool"], "think_time_s"], Dist(constant=0)),
    )
    spec_sessions = ParametricSessions(
        requests_per_session=_dist(per_session, Dist(constant=1)),
        turn_end_probability=_dist(end_probability, Dist(constant=1)),
        main=main_loop,
        user_message_tokens=_dist(user_norm, Dist(constant=0)),
        think_after_end_turn_s=_dist(
            think_rows.loc[~think_rows["after_tool"], "think_time_s"], Dist(constant=0)
        ),
        session_scale=_dist(scale, Dist(constant=1)),
        correlation=SessionCorrelation(
            length_initial_context=round(float(corr.loc["length", "initial"]), 3),
            length_scale=round(float(corr.loc["length", "scale"]), 3),
            initial_context_scale=round(float(corr.loc["initial", "scale"]), 3),
        ),
        profiles=_fit_profiles(main, first, scale, limits, manual),
        compaction=Compaction(
            limit_tokens=_fit_limits(main, resets[compacted], max_context),
            probability=float(manual.sum()) / transitions if transitions else 0.0,
            keep_fraction=_dist(keep[compacted].clip(0, 1), Dist(constant=0.1)),
        ),  # fmt: skip
        cache_break_probability=float((~compacted).sum() / transitions) if transitions else 0.0,
        prefix_reuse=_fit_prefix_reuse(df[trans & ~df["reset"] & (df["prefix_tokens"] > 0)]),
        subagents=_fit_subagents(df, main, subs),
        images=_fit_images(main),
        reasoning_effort=_fit_effort(first),
    )
    max_output = int(min(max(32_000, df["output_tokens"].max()), (max_context - shared_tokens) // 2 - 1))
    arrivals, days = _fit_arrivals(first)
    return GeneratorSpec(
        name=name or f"fit-{os.path.splitext(os.path.basename(path))[0]}",
        days=days,
        max_context_tokens=max_context,
        max_output_tokens=max_output,
        arrivals=arrivals,
        sessions=spec_sessions,
        shared_prefix=SharedPrefix(tokens=shared_tokens, variants=variants),
        tenants=_fit_tenants(first),
        nominal_service=_fit_service(df),
    )


def _fit_early(chain: pd.DataFrame) -> list[EarlyGrowth]:
    """What the k-th request appends, k = 1..EARLY_POSITIONS (non-reset transitions), in two bands
    split at the median initial context (new tasks read more than resumed ones)."""
    position = chain.groupby(["session_id", "agent_id"]).cumcount()
    initial = (chain["input_tokens"] - chain["shared_prefix_tokens"]).where(chain["chain_first"])
    initial = initial.groupby([chain["session_id"], chain["agent_id"]]).transform("first")
    split = float(initial[chain["chain_first"]].median())
    ok = ~chain["chain_first"] & ~chain["reset"]
    bands = []
    for up_to, in_band in ((int(split), initial <= split), (None, initial > split)):
        dists = []
        for k in range(1, EARLY_POSITIONS + 1):
            values = chain.loc[ok & in_band & (position == k), "appended"]
            if len(values) < MIN_ROWS_PER_POSITION:
                break
            dists.append(fit_quantiles(values))
        if dists:
            bands.append(EarlyGrowth(up_to_tokens=up_to, appended_tokens=dists))
    if len(bands) == 1:  # one band left: it applies to every agent
        bands = [EarlyGrowth(appended_tokens=bands[0].appended_tokens)]
    return bands


def _session_limits(main: pd.DataFrame, compactions: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Per session: the context limit at which it compacts (0 = none seen), and the number of
    compactions that look manual (well below that limit, or in a session that later grew past all
    of its compaction points: a larger window, compacted by hand)."""
    pre = (compactions["prev_in"] + compactions["prev_out"]).groupby(compactions["session_id"])
    highest = pre.max()
    largest = (main["input_tokens"] + main["output_tokens"]).groupby(main["session_id"]).max()
    auto = highest[largest.loc[highest.index] <= AUTO_LIMIT_MARGIN * highest]
    limit = auto.reindex(largest.index).fillna(0)
    threshold = compactions["session_id"].map(auto).fillna(np.inf) * MANUAL_BELOW
    is_manual = (compactions["prev_in"] + compactions["prev_out"]) < threshold
    manual = is_manual.groupby(compactions["session_id"]).sum().reindex(largest.index).fillna(0)
    return limit, manual


def _fit_prefix_reuse(moves: pd.DataFrame) -> PrefixReuse:
    """The block size, whether the parent's output counts, and the whole blocks of the parent's
    repeated part that are not repeated, on requests continuing their parent (no reset)."""
    blocks = moves["block_size_tokens"].to_numpy()
    if not len(moves) or blocks.max() <= 0:  # no hashes: prefixes exact to the token, as written
        return PrefixReuse(block_tokens=1, output_reused=True)
    block = int(np.bincount(blocks[blocks > 0]).argmax())
    past_input = moves["prefix_tokens"] > moves["prev_in"]
    output_reused = bool(past_input.mean() > 0.5)
    repeated = moves["prev_in"] + (moves["prev_out"] if output_reused else 0)
    rewind = (repeated // block - moves["prefix_tokens"] // block).clip(lower=0)
    return PrefixReuse(
        block_tokens=block, output_reused=output_reused, rewind_blocks=_dist(rewind, Dist(constant=0))
    )


def _fit_profiles(main: pd.DataFrame, first: pd.DataFrame, scale: pd.Series, limit: pd.Series,
                  manual: pd.Series) -> SessionProfiles:  # fmt: skip
    """One row per source session: its own length, turn-end share, initial context, scale,
    context limit (0 = none) and rate of manual compactions per request."""
    sessions = main.groupby("session_id", sort=True)
    ids = sessions.size().index
    transitions = (sessions.size() - 1).clip(lower=1)
    return SessionProfiles(
        requests=[int(x) for x in sessions.size()],
        turn_end_probability=[
            round(float(x), 4)
            for x in pd.Series(ends_turn(main["stop_reason"]), index=main.index)
            .groupby(main["session_id"])
            .mean()
        ],
        initial_context_tokens=[
            int(x) for x in (first["input_tokens"] - first["shared_prefix_tokens"]).loc[ids]
        ],
        session_scale=[round(float(x), 4) for x in scale.reindex(ids).fillna(1.0)],
        limit_tokens=[int(x) for x in limit.reindex(ids).fillna(0)],
        compaction_probability=[round(float(x), 5) for x in (manual.reindex(ids).fillna(0) / transitions)],
    )


def _fit_limits(main: pd.DataFrame, compactions: pd.DataFrame, max_context: int) -> Dist | None:
    """Kaplan-Meier quantiles of the per-session context limit (see the module docstring)."""
    if compactions.empty:
        return None
    first = compactions.groupby("session_id").first()
    observed = first["prev_in"] + first["prev_out"]
    largest = (main["input_tokens"] + main["output_tokens"]).groupby(main["session_id"]).max()
    censored = largest.drop(observed.index)
    values = np.concatenate([observed.to_numpy(float), censored.to_numpy(float)])
    event = np.concatenate([np.ones(len(observed), bool), np.zeros(len(censored), bool)])
    order = np.lexsort((~event, values))  # events before censorings at equal values
    values, event = values[order], event[order]
    at_risk = len(values) - np.arange(len(values))
    survival = np.cumprod(np.where(event, 1 - 1 / at_risk, 1.0))
    cdf, limits = 1 - survival[event], values[event]
    probs = np.linspace(0, 1, 101)
    q = np.interp(probs, np.concatenate([[0], cdf]), np.concatenate([[limits[0]], limits]))
    q[probs > cdf[-1]] = max_context  # never compacted within what the trace shows
    q = np.maximum.accumulate(np.array([float(f"{v:.4g}") for v in q]))
    return Dist(quantiles=[float(v) for v in q])


def _fit_subagents(df: pd.DataFrame, main: pd.DataFrame, subs: pd.DataFrame) -> SubAgents | None:
    if subs.empty:
        return None
    starts = subs[subs["chain_first"]]
    launches = starts.groupby("depends_on_request_id").size()
    tool_requests = int((main["stop_reason"] == "tool_use").sum())
    trans = subs[~subs["chain_first"]]
    think = subs[(subs["arrival"] == "think")]
    loop = AgentLoop(
        initial_context_tokens=_dist(
            starts["input_tokens"] - starts["shared_prefix_tokens"], Dist(constant=1000)
        ),
        tool_result_tokens=_dist(trans.loc[~trans["reset"], "appended"], Dist(constant=0)),
        output_tokens=_dist(subs["output_tokens"], Dist(constant=1)),
        think_after_tool_s=_dist(think["think_time_s"], Dist(constant=0)),
    )
    return SubAgents(
        probability=min(1.0, len(launches) / tool_requests) if tool_requests else 0.0,
        count=_dist(launches, Dist(constant=1)),
        requests=_dist(subs.groupby(["session_id", "agent_id"]).size(), Dist(constant=1)),
        shared_prefix_tokens=int(starts["shared_prefix_tokens"].median()),
        loop=loop,
    )


def _fit_images(main: pd.DataFrame) -> Images:
    turn_starts = main[main["chain_first"] | ~main["after_tool"]]
    with_images = turn_starts[turn_starts["image_count"] > 0]
    if with_images.empty:
        return Images()
    return Images(
        probability=len(with_images) / len(turn_starts),
        count=_dist(with_images["image_count"], Dist(constant=1)),
        tokens_per_image=int(round(with_images["image_tokens"].sum() / with_images["image_count"].sum())),
    )


def _fit_effort(first: pd.DataFrame) -> Dist:
    values = first["reasoning_effort"]
    if not (values > 0).any():
        return Dist(constant=0)
    counts = values.value_counts().sort_index()
    return Dist(choice={"values": [float(v) for v in counts.index], "weights": [float(c) for c in counts]})


def _fit_tenants(first: pd.DataFrame) -> Tenants | None:
    counts = first["tenant"].dropna().value_counts().to_numpy()
    if not len(counts):
        return None
    if len(counts) < 3:
        return Tenants(count=len(counts), zipf_exponent=0.0)
    slope = np.polyfit(np.log(np.arange(1, len(counts) + 1)), np.log(counts), 1)[0]
    return Tenants(count=len(counts), zipf_exponent=float(round(max(0.0, -slope), 3)))


def _fit_arrivals(first: pd.DataFrame) -> tuple[Arrivals, float]:
    starts = first["session_start_s"].to_numpy()
    span = float(starts.max() - starts.min())
    flat = DiurnalEnvelope(amplitude=0.0)
    if span > 0 and len(starts) > 1:
        return Arrivals(sessions_per_hour=float(len(starts) / span * HOUR_S), envelope=flat), round(
            span / DAY_S, 6
        )
    # no arrival information (all sessions start together): one day holds the source's sessions
    return Arrivals(sessions_per_hour=len(starts) / 24.0, envelope=flat), 1.0


def _fit_service(df: pd.DataFrame) -> NominalService:
    """svc = a + new/prefill + out/decode from the gaps before think arrivals (same chain)."""
    rows = df[(df["arrival"] == "think") & (df["depends_on_request_id"] >= 0)]
    by_id = df.set_index("request_id")
    dep = by_id.loc[rows["depends_on_request_id"]]
    svc = (
        rows["arrival_time_s"].to_numpy() - dep["arrival_time_s"].to_numpy() - rows["think_time_s"].to_numpy()
    )
    new = (dep["input_tokens"] - dep["prefix_tokens"]).to_numpy(dtype=float)
    out = dep["output_tokens"].to_numpy(dtype=float)
    ok = np.isfinite(svc) & (svc > 0)
    default = NominalService()
    if ok.sum() < 10:
        return default
    a = np.stack([np.ones(ok.sum()), new[ok], out[ok]], axis=1)
    coef = np.linalg.lstsq(a, svc[ok], rcond=None)[0]
    overhead = float(max(coef[0], 0.05))
    prefill = 1.0 / coef[1] if coef[1] > 0 else default.prefill_tokens_per_s
    decode = 1.0 / coef[2] if coef[2] > 0 else default.decode_tokens_per_s
    return NominalService(overhead_s=round(overhead, 4), prefill_tokens_per_s=float(f"{prefill:.4g}"),
                          decode_tokens_per_s=float(f"{decode:.4g}"))  # fmt: skip


def write_spec(spec: GeneratorSpec, out: str | os.PathLike, header: str = "") -> None:
    """Write a spec as YAML, atomically, with optional comment lines on top."""
    text = "".join(f"# {line}\n" for line in header.splitlines()) + spec_to_yaml(spec)
    with atomic_output(out) as tmp:
        tmp.write_text(text)
