"""The generator spec: a strict YAML file (unknown keys rejected) describing a multi-day agent
workload. Documented field by field in traces/README.md; `traces/agent_2w.yaml` is an example.

Top level: `name`, `days`, `max_context_tokens`, `max_output_tokens`, `arrivals` (session rate and
its daily/weekly envelope), `sessions` (parametric agent behaviour, or `templates` resampled
from an imported trace), `shared_prefix`, `tenants`, `nominal_service` (the service-time model
that only fills `arrival_time_s` of closed-loop requests).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sim.config.base import MAX_DURATION_S
from sim.errors import InputError

from .dists import Dist

STRICT = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # no NaN or infinity (issue 17)


class DiurnalEnvelope(BaseModel):
    """Rate shape: 1 + amplitude * cos(2 pi (hour - peak_hour) / 24), times weekend_factor on
    Saturdays and Sundays (day 0 is `start_weekday`, 0 = Monday), normalised to mean 1."""

    model_config = STRICT
    kind: Literal["diurnal"] = "diurnal"
    amplitude: float = Field(default=0.5, ge=0, le=1)
    peak_hour: float = Field(default=15.0, ge=0, lt=24)
    weekend_factor: float = Field(default=1.0, gt=0)
    start_weekday: int = Field(default=0, ge=0, le=6)


class FileEnvelope(BaseModel):
    """Rate shape from an imported envelope (`sim trace import servegen`): the summed rate of the
    clients whose name starts with `select`, normalised to mean 1, repeated past its end."""

    model_config = STRICT
    kind: Literal["file"] = "file"
    file: str
    select: str | None = None


class Arrivals(BaseModel):
    """Session starts: a Poisson process whose rate is mean_rate * envelope(t). Give the mean as
    `sessions_per_hour` or as `concurrent_sessions` (then rate = concurrency / mean session
    duration, the duration estimated from a pilot sample of the spec's own sessions)."""

    model_config = STRICT
    sessions_per_hour: float | None = Field(default=None, gt=0)
    concurrent_sessions: float | None = Field(default=None, gt=0)
    envelope: DiurnalEnvelope | FileEnvelope = Field(default_factory=DiurnalEnvelope, discriminator="kind")

    @model_validator(mode="after")
    def _one_rate(self) -> Arrivals:
        if (self.sessions_per_hour is None) == (self.concurrent_sessions is None):
            raise ValueError("give exactly one of sessions_per_hour, concurrent_sessions")
        return self


class Compaction(BaseModel):
    """Context resets (e.g. Claude Code's auto-compaction): when a request's input + output would
    pass the session's context limit, and at any request with `probability`, the context restarts
    from keep_fraction x (previous input + output). Each session draws its limit from
    `limit_tokens` (conditioned on exceeding its first request; capped at max_context_tokens;
    absent: max_context_tokens)."""

    model_config = STRICT
    limit_tokens: Dist | None = None
    probability: float = Field(default=0.0, ge=0, le=1)
    keep_fraction: Dist = Field(default_factory=lambda: Dist(constant=0.1))


class Images(BaseModel):
    """Images attached to user messages: with `probability` per message, `count` images of
    `tokens_per_image` tokens each (part of the input)."""

    model_config = STRICT
    probability: float = Field(default=0.0, ge=0, le=1)
    count: Dist = Field(default_factory=lambda: Dist(constant=1))
    tokens_per_image: int = Field(default=1_000, ge=0)


class EarlyGrowth(BaseModel):
    """What the first requests of an agent append when its initial context is at most
    `up_to_tokens` (null: any): appended_tokens[k-1] for the k-th request (tool result or user
    message alike, without the session scale)."""

    model_config = STRICT
    up_to_tokens: int | None = Field(default=None, ge=0)
    appended_tokens: list[Dist] = Field(min_length=1)


class AgentLoop(BaseModel):
    """How one agent works through a task: an initial context, then tool calls, each appending
    the previous output and a tool result. Token counts exclude the shared prefix. Agents read
    most at the start of a new task (in Weka sessions that start small the second request appends
    a median 3,400 tokens, later ones about 250; resumed sessions much less): the first band of
    `early` whose up_to_tokens covers the agent's initial context gives the first requests'
    appended tokens; later tool results are tool_result_tokens x the session's scale."""

    model_config = STRICT
    initial_context_tokens: Dist
    tool_result_tokens: Dist
    early: list[EarlyGrowth] = Field(default_factory=list)

    @model_validator(mode="after")
    def _bands_in_order(self) -> AgentLoop:
        limits = [b.up_to_tokens if b.up_to_tokens is not None else float("inf") for b in self.early]
        if limits != sorted(limits):
            raise ValueError("early bands must be in increasing up_to_tokens order (null last)")
        return self

    output_tokens: Dist
    think_after_tool_s: Dist  # tool execution + harness time before the next request


class SubAgents(BaseModel):
    """Sub-agents launched by a main-agent tool call: with `probability` per tool_use request,
    `count` agents run in parallel, each `requests` requests of `loop` ending with end_turn; the
    main agent waits for all of them."""

    model_config = STRICT
    probability: float = Field(default=0.0, ge=0, le=1)
    count: Dist = Field(default_factory=lambda: Dist(constant=1))
    requests: Dist = Field(default_factory=lambda: Dist(constant=5))
    shared_prefix_tokens: int = Field(default=0, ge=0)
    loop: AgentLoop


class SessionCorrelation(BaseModel):
    """Rank correlations between a session's length (requests_per_session), its initial context
    and its session_scale, imposed with a Gaussian copula (0 = independent). In the Weka sessions
    longer sessions start from smaller contexts and read less per tool call."""

    model_config = STRICT
    length_initial_context: float = Field(default=0.0, ge=-1, le=1)
    length_scale: float = Field(default=0.0, ge=-1, le=1)
    initial_context_scale: float = Field(default=0.0, ge=-1, le=1)

    def normal_correlation(self) -> np.ndarray:
        """The copula's correlation matrix of normal scores (Spearman rho -> 2 sin(pi rho / 6))."""
        r = [
            2 * np.sin(np.pi * x / 6)
            for x in (self.length_initial_context, self.length_scale, self.initial_context_scale)
        ]
        return np.array([[1.0, r[0], r[1]], [r[0], 1.0, r[2]], [r[1], r[2], 1.0]])

    @model_validator(mode="after")
    def _positive_definite(self) -> SessionCorrelation:
        if np.linalg.eigvalsh(self.normal_correlation()).min() <= 1e-9:
            raise ValueError(
                "these three correlations are not jointly possible (matrix not positive definite)"
            )
        return self


class SessionProfiles(BaseModel):
    """Per-session values drawn together as one row of this table: a fitted empirical joint
    distribution (`sim trace fit` writes one row per source session), which keeps what the
    marginals lose: in the Weka trace long sessions start small, read less per tool call and
    compact; short ones resume big contexts. When present, a session takes its length, turn-end
    probability, initial context, scale, context limit (0 = max_context_tokens) and rate of
    compactions not forced by the limit from a row drawn uniformly; the marginal fields are then
    only a readable summary."""

    model_config = STRICT
    requests: list[int] = Field(min_length=1)
    turn_end_probability: list[float]
    initial_context_tokens: list[int]
    session_scale: list[float]
    limit_tokens: list[int]
    compaction_probability: list[float]

    @model_validator(mode="after")
    def _rows(self) -> SessionProfiles:
        n = len(self.requests)
        for name in ("turn_end_probability", "initial_context_tokens", "session_scale", "limit_tokens",
                     "compaction_probability"):  # fmt: skip
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} must have one entry per session ({n})")
        if min(self.requests) < 1 or min(self.initial_context_tokens) < 0 or min(self.limit_tokens) < 0:
            raise ValueError("requests must be >= 1, token counts >= 0")
        if min(self.session_scale) < 0:
            raise ValueError("session_scale must be >= 0")
        if not all(0 <= x <= 1 for x in (*self.turn_end_probability, *self.compaction_probability)):
            raise ValueError("turn_end_probability and compaction_probability must be in 0..1")
        return self


class PrefixReuse(BaseModel):
    """How much of its parent's context a request repeats, as a block-hashing prefix cache sees it:
    whole `block_tokens` blocks of the parent's input (and of its output when `output_reused`),
    less `rewind_blocks` whole blocks (partial rewrites of the tail). The defaults are what the Weka
    dev trace shows (`sim trace fit` measures them): 64-token blocks, the output not repeated as
    hashed (95 % of hits end in the last block of the parent's input), no rewind in 95 % of requests.
    `block_tokens: 1, output_reused: true` is the old exact-to-the-token rule."""

    model_config = STRICT
    block_tokens: int = Field(default=64, ge=1)
    output_reused: bool = False
    rewind_blocks: Dist = Field(default_factory=lambda: Dist(constant=0))


class ParametricSessions(BaseModel):
    """Sessions drawn from distributions: `requests_per_session` main-agent requests; each ends the
    user turn (end_turn) with the session's `turn_end_probability`, else calls a tool (tool_use),
    so tool loops are geometric with mean 1/p within a session and p varies across sessions. After
    end_turn the human answers after think_after_end_turn_s with user_message_tokens. A session
    may stop inside a loop (half of the Weka sessions end on tool_use). With
    `cache_break_probability` per request the prefix is lost while the context carries on (a
    changed system prompt or model: 1% of Weka requests)."""

    model_config = STRICT
    kind: Literal["parametric"] = "parametric"
    requests_per_session: Dist
    turn_end_probability: Dist
    main: AgentLoop
    user_message_tokens: Dist
    think_after_end_turn_s: Dist
    # per-session multiplier of tool results and user messages (median 1): some sessions read far more
    session_scale: Dist = Field(default_factory=lambda: Dist(constant=1))
    correlation: SessionCorrelation = Field(default_factory=SessionCorrelation)
    profiles: SessionProfiles | None = None
    compaction: Compaction = Field(default_factory=Compaction)
    cache_break_probability: float = Field(default=0.0, ge=0, le=1)
    prefix_reuse: PrefixReuse = Field(default_factory=PrefixReuse)
    subagents: SubAgents | None = None
    images: Images = Field(default_factory=Images)
    reasoning_effort: Dist = Field(default_factory=lambda: Dist(constant=0))  # 1..100, 0 = unknown


class TemplateSessions(BaseModel):
    """Sessions resampled (uniformly, with replacement) from an imported canonical trace: each
    generated session copies one source session's requests, dependencies and think times; its
    arrival offsets are the source's. Sessions whose context passes max_context_tokens are left out."""

    model_config = STRICT
    kind: Literal["templates"] = "templates"
    file: str


class SharedPrefix(BaseModel):
    """A system + tool prompt shared across sessions: `variants` distinct prompts (e.g. per model
    or client version) of `tokens` tokens each, chosen uniformly per session."""

    model_config = STRICT
    tokens: int = Field(default=0, ge=0)
    variants: int = Field(default=1, ge=1)


class Tenants(BaseModel):
    """Tenants t0..t{count-1}, chosen per session with Zipf weights 1/(k+1)^zipf_exponent."""

    model_config = STRICT
    count: int = Field(ge=1)
    zipf_exponent: float = Field(default=1.0, ge=0)


class NominalService(BaseModel):
    """Service time used only to lay out `arrival_time_s` of closed-loop requests (the simulator
    computes its own): overhead_s + new input tokens / prefill rate + output / decode rate."""

    model_config = STRICT
    overhead_s: float = Field(default=0.5, gt=0)
    prefill_tokens_per_s: float = Field(default=20_000.0, gt=0)
    decode_tokens_per_s: float = Field(default=60.0, gt=0)


class GeneratorSpec(BaseModel):
    model_config = STRICT
    name: str = Field(min_length=1)
    days: float = Field(gt=0, le=MAX_DURATION_S / 86_400)  # one year at most (sim.config.base)
    seed: int = 0
    max_context_tokens: int = Field(default=1_000_000, gt=0)
    max_output_tokens: int = Field(default=32_000, gt=0)
    arrivals: Arrivals
    sessions: ParametricSessions | TemplateSessions = Field(discriminator="kind")
    shared_prefix: SharedPrefix = Field(default_factory=SharedPrefix)
    tenants: Tenants | None = None
    nominal_service: NominalService = Field(default_factory=NominalService)

    @model_validator(mode="after")
    def _fits(self) -> GeneratorSpec:
        if 2 * self.max_output_tokens + self.shared_prefix.tokens >= self.max_context_tokens:
            raise ValueError("max_context_tokens must exceed shared_prefix.tokens + 2 x max_output_tokens")
        return self


def load_spec(path: str | os.PathLike) -> tuple[GeneratorSpec, Path]:
    """Parse and validate a spec file; returns the spec and the folder that relative paths in it
    (template and envelope files) are resolved against. Errors name the file and the field."""
    path = Path(path)
    if not path.is_file():
        raise InputError("spec file not found", file=str(path))
    try:
        raw = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        line = getattr(getattr(err, "problem_mark", None), "line", None)
        raise InputError(f"not valid YAML ({err.__class__.__name__})", file=str(path),
                         where=f"line {line + 1}" if line is not None else None) from None  # fmt: skip
    return parse_spec(raw, str(path)), path.parent


def parse_spec(raw: object, file: str = "<spec>") -> GeneratorSpec:
    if not isinstance(raw, dict):
        raise InputError("expected a mapping of spec fields", file=file)
    try:
        return GeneratorSpec.model_validate(raw)
    except ValidationError as err:
        lines = []
        for e in err.errors():
            where = ".".join(str(p) for p in e["loc"]) or "(top level)"
            value = e.get("input")
            shown = (
                f" (got {value!r})" if not isinstance(value, dict | list) and e["type"] != "missing" else ""
            )
            lines.append(f"{where}: {e['msg']}{shown}")
        raise InputError.many(lines, file=file) from None


class _SpecDumper(yaml.SafeDumper):
    """Lists of numbers on one line (quantile tables and session profiles stay readable)."""


def _represent_list(dumper: yaml.SafeDumper, data: list) -> yaml.Node:
    flow = all(isinstance(x, int | float) for x in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_SpecDumper.add_representer(list, _represent_list)


def spec_to_yaml(spec: GeneratorSpec) -> str:
    """The spec as YAML, every field written out (defaults too), in declaration order."""
    return yaml.dump(
        spec.model_dump(mode="json", exclude_none=True), Dumper=_SpecDumper, sort_keys=False, width=100
    )
