"""`workload:` of a scenario: where requests come from and how they are replayed.

Requests come from a trace, a generator spec, or a `benchmark` block (fixed-shape requests from a
client holding a concurrency or a request rate, as serving benchmarks publish; sim.workload.arrivals
documents how they arrive). Paths are relative to the scenario file; the loader passes that folder
as validation context (`base_dir`), and the validated model holds absolute paths.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from sim.config.base import MAX_DURATION_S, StrictModel
from sim.config.errors import Problem, field_error, raise_problems
from sim.config.yamlio import read_yaml_mapping


class ClientDraw(StrictModel):
    """Lengths drawn as a named benchmark client draws them (sim.workload.bench_clients): the
    published run's own sample, request by request. `isl_tokens` / `osl_tokens` are then the
    client's full lengths (`--random-input-len` / `--random-output-len`) and `workload.max_requests`
    its `--num-prompts`."""

    client: Literal["sglang_bench_serving_random"] = Field(
        description="SGLang `bench_serving --dataset-name random` (v0.5.15)"
    )
    seed: int = Field(42, ge=0, lt=2**32, description="the client's --seed (42: bench_serving's default)")
    range_ratio: float = Field(
        0.0,
        ge=0,
        le=1,
        description="the client's --random-range-ratio (0.0: its default, lengths in [1, full])",
    )


class QuantilePoint(StrictModel):
    """One point of a published length distribution: the share `q` of requests at or below `tokens`."""

    q: float = Field(ge=0, le=1, description="the quantile (0 = the shortest request, 1 = the longest)")
    tokens: int = Field(ge=1, description="the length at that quantile, tokens")
    src: str | None = Field(None, description="where the point comes from (or [D] and why it was chosen)")


@cache
def published_traces() -> dict[str, dict]:
    """Published traces whose quantiles sim holds, by name (published_traces.yaml beside this module)."""
    return read_yaml_mapping(Path(__file__).with_name("published_traces.yaml"))


class TraceQuantileDraw(StrictModel):
    """Lengths of a trace the client replays row by row when the rows are not at hand, only the trace's
    published quantiles: each request's input and output drawn independently (their joint distribution is
    rarely published), log-linear between the quantiles given. The drawn inputs are sorted and cut into
    sessions of `turns_per_session` neighbouring lengths, growing turn by turn, and the sessions sent in a
    shuffled order: so each turn can reuse `prefix_reuse_frac` of its input from the previous turn's
    context (an agent's context grows a little each turn) while the inputs keep the published
    distribution. `workload.max_requests` is the trace's row count; `isl_tokens` / `osl_tokens` are then
    only the trace's nominal lengths (sim.workload.bench_clients)."""

    client: Literal["trace_quantiles"] = Field(description="draws from a trace's published length quantiles")
    trace: str | None = Field(
        None, description="a published trace sim holds the quantiles of (sim/config/published_traces.yaml)"
    )
    input_quantiles: list[QuantilePoint] | None = Field(
        None, description="input tokens from q 0 to q 1, both non-decreasing (default: the named trace's)"
    )
    output_quantiles: list[QuantilePoint] | None = Field(
        None, description="output tokens from q 0 to q 1, both non-decreasing (default: the named trace's)"
    )
    seed: int = Field(0, ge=0, lt=2**32, description="seed of the draws and of the session order")

    @field_validator("trace")
    @classmethod
    def _known_trace(cls, name: str | None) -> str | None:
        if name is not None and name not in published_traces():
            raise field_error(f"no published trace {name!r}", sorted(published_traces()))
        return name

    @field_validator("input_quantiles", "output_quantiles")
    @classmethod
    def _a_distribution(cls, points: list[QuantilePoint] | None) -> list[QuantilePoint] | None:
        if points is None:
            return None
        qs = [p.q for p in points]
        if len(points) < 2 or qs[0] != 0.0 or qs[-1] != 1.0:
            raise field_error(f"quantiles run from {qs[0]:g} to {qs[-1]:g}", "the first q 0 and the last q 1")
        for a, b in zip(points, points[1:], strict=False):
            if b.q <= a.q or b.tokens < a.tokens:
                raise field_error(
                    f"q {b.q:g} ({b.tokens} tokens) after q {a.q:g} ({a.tokens} tokens)",
                    "q strictly increasing, tokens non-decreasing",
                )
        return points

    @model_validator(mode="before")
    @classmethod
    def _from_the_trace(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        published = published_traces().get(data.get("trace") or "", {})
        missing = [name for name in ("input_quantiles", "output_quantiles") if data.get(name) is None]
        if missing and not published and data.get("trace") is None:
            raise_problems([Problem(name, "no quantiles and no published trace named",
                                    allowed="trace: a published trace, or both quantile lists") for name in missing])  # fmt: skip
        return {**data, **{name: published[name] for name in missing if published}}


class Benchmark(StrictModel):
    """A benchmark client: fixed-shape requests in sessions of `turns_per_session` turns, each turn
    after the first repeating `prefix_reuse_frac` of its input from the previous turn's context."""

    isl_tokens: int = Field(ge=1, description="input tokens per request")
    osl_tokens: int = Field(ge=1, description="output tokens per request")
    prefix_reuse_frac: float = Field(
        0.0, ge=0, lt=1, description="share of a turn's input that repeats the previous turn of its session"
    )
    concurrency: int | None = Field(
        None, ge=1, description="closed loop: requests always in flight (the next starts when one ends)"
    )
    request_rate_per_s: float | None = Field(None, gt=0, description="open loop: Poisson arrivals per second")
    think_s: float = Field(0.0, ge=0, description="closed loop: pause between a request's end and the next")
    length_jitter_frac: float = Field(
        0.0, ge=0, lt=1, description="input and output lengths drawn uniformly within +-this share"
    )
    turns_per_session: int = Field(
        20, ge=1, description="turns of one session; its first turn shares nothing with earlier ones"
    )  # a choice [D]: with 0.9 reuse, 20 turns give 85.5% reused input over all requests
    lengths_drawn_by: ClientDraw | TraceQuantileDraw | None = Field(
        None,
        discriminator="client",
        description="each request's lengths as this client draws them (replaces length_jitter_frac)",
    )

    @model_validator(mode="after")
    def _one_load(self) -> Benchmark:
        if (self.concurrency is None) == (self.request_rate_per_s is None):
            given = "both" if self.concurrency is not None else "neither"
            raise_problems(
                [Problem("", f"{given} concurrency and request_rate_per_s given",
                         allowed="exactly one of: concurrency (closed loop), request_rate_per_s (open loop)")]
            )  # fmt: skip
        if isinstance(self.lengths_drawn_by, TraceQuantileDraw) and self.concurrency is None:
            raise_problems(
                [Problem("lengths_drawn_by", "a trace's rows are replayed by a closed loop here",
                         "trace_quantiles", "concurrency with trace_quantiles")]
            )  # fmt: skip
        if self.lengths_drawn_by is not None and self.length_jitter_frac > 0:
            raise_problems(
                [Problem("length_jitter_frac", "the client draws the lengths (lengths_drawn_by); no jitter on top",
                         self.length_jitter_frac, "0 with lengths_drawn_by")]
            )  # fmt: skip
        return self


class Workload(StrictModel):
    trace: str | None = Field(
        None,
        description="canonical Parquet trace (sim.workload.schema), relative path; or a folder of its "
        "parts (`sim trace gen --parts`), which a fleet (cluster.cells) splits by cell",
    )
    generator: str | None = Field(None, description="generator spec YAML, relative path")
    benchmark: Benchmark | None = Field(None, description="fixed-shape benchmark requests, no file")
    days: float | None = Field(
        None,
        gt=0,
        le=MAX_DURATION_S / 86_400,
        description="days to generate (generator only; default: the spec's)",
    )
    replay: Literal["closed_loop", "open_loop"] = Field(
        "closed_loop",
        description="closed: next turn after the previous finishes + think time; open: trace times",
    )
    warmup_s: float = Field(0.0, ge=0, description="simulated seconds excluded from metrics")
    horizon_s: float | None = Field(None, gt=0, description="stop after this simulated time (> warmup_s)")
    max_requests: int | None = Field(None, ge=1, description="stop after this many arrivals")
    drain_limit_s: float = Field(
        604800.0,
        gt=0,
        description="after the last arrival, run at most this long; requests still in the system are "
        "then rejected as unfinished_at_end",
    )  # a choice: 7 days, so an overloaded cluster ends instead of running on

    @field_validator("trace", "generator")
    @classmethod
    def _file_exists(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        base = Path((info.context or {}).get("base_dir", "."))
        path = (base / value).resolve()
        if info.field_name == "trace" and path.is_dir():  # a trace in parts (a fleet's: sim.fleet)
            if not any(path.glob("*.parquet")):
                raise field_error(f"folder holds no .parquet part: {path}", "a trace in parts")
            return str(path)
        if info.field_name == "trace" and path.suffix != ".parquet":
            raise field_error(
                "a trace must be a canonical Parquet file; import others with `sim trace`", ".parquet"
            )
        if info.field_name == "generator" and path.suffix not in (".yaml", ".yml"):
            raise field_error("a generator spec must be a YAML file", ".yaml, .yml")
        if not path.is_file():
            raise field_error(f"file not found: {path}")
        return str(path)

    @model_validator(mode="after")
    def _source_and_window(self) -> Workload:
        problems = []
        sources = [name for name in ("trace", "generator", "benchmark") if getattr(self, name) is not None]
        if len(sources) != 1:
            message = f"{' and '.join(sources)} given" if sources else "no request source given"
            problems.append(Problem("", message, allowed="exactly one of: trace, generator, benchmark"))
        if self.benchmark is not None and self.horizon_s is None and self.max_requests is None:
            problems.append(
                Problem("horizon_s", "a benchmark runs until horizon_s or max_requests; give one",
                        allowed="horizon_s > warmup_s, or max_requests")
            )  # fmt: skip
        if (
            self.benchmark is not None
            and self.benchmark.lengths_drawn_by is not None
            and self.max_requests is None
        ):
            problems.append(
                Problem("max_requests", "the client draws one length per prompt it sends: give its prompt count",
                        allowed="max_requests: the client's --num-prompts")
            )  # fmt: skip
        if self.days is not None and self.generator is None:
            problems.append(Problem("days", "days applies to a generator only", self.days))
        if self.horizon_s is not None and self.horizon_s <= self.warmup_s:
            problems.append(
                Problem(
                    "horizon_s",
                    f"must be greater than warmup_s ({self.warmup_s:g} s)",
                    self.horizon_s,
                    f"> {self.warmup_s:g}",
                )
            )
        raise_problems(problems)
        return self

    @property
    def source_path(self) -> Path | None:
        """The trace or generator spec, absolute; None for a benchmark."""
        path = self.trace or self.generator
        return Path(path) if path is not None else None
