"""Build the replay trace of issue 14: Weka Claude Code sessions scaled to the reduced model (CPU side: needs
``sim`` installed; the GPU machine only reads the result).

    python3 -m kernels_bench.serve.trace --out traces/replay_v4_mini.parquet \
        [--src ../shared/traces/public/weka_claude_code/weka_cc_traces_v8_dev.jsonl.xz (SIM_SHARED moves it)] \
        [--sessions 48] [--requests-per-session 10] [--context-scale 0.0625] [--think-scale 0.1] \
        [--think-cap-s 30] [--output-cap 2048] [--stagger-s 0.1]

Rules (each a stated choice [D], none tuned to a result):
- sessions: the first ``--sessions`` sessions of the file (in file order) with at least
  ``--requests-per-session`` requests; of each, its first that many requests in arrival order (closed loop:
  later requests depend only on earlier ones, so a cut session replays as the start of the real one);
- tokens: input, prefix and shared-prompt lengths times ``--context-scale`` (rounded; at least one input
  token; a prefix never longer than its input), so a pure append stays a pure append; outputs unscaled
  but capped at ``--output-cap``; a request that produced no output token (Claude Code logs such turns:
  a call interrupted before its first token) is replayed with one, since an engine's prefill always samples
  the first token: its prompt is still served and its successors still wait for it (counted as
  ``zero_output_requests`` in the summary the command prints);
- time: think times times ``--think-scale``, capped at ``--think-cap-s`` (a human's hours-long pause would
  idle the GPU); session k starts at ``k * --stagger-s``; other absolute arrivals keep their offset from
  their session's start, times ``--think-scale``;
- ids: sessions renumbered 0.., requests 0.. in file order; block hashes dropped (they name 64-token
  blocks of the unscaled prompt): the prefix relation is ``prefix_parent_request_id`` / ``prefix_tokens``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa

WEKA_FILE = Path("weka_claude_code/weka_cc_traces_v8_dev.jsonl.xz")
REPLAY_TRACE = Path("traces/replay_v4_mini.parquet")  # the committed trace, made by the defaults below


def default_src() -> Path:
    from sim.paths import public_traces_dir

    return public_traces_dir() / WEKA_FILE


def _scale(x: np.ndarray, f: float) -> np.ndarray:
    return np.rint(np.asarray(x, dtype=np.float64) * f).astype(np.int64)


def first_requests(t: pa.Table, requests: int) -> pa.Table:
    """A session's first ``requests`` requests in arrival order (module doc, sessions)."""
    return t.sort_by("request_index").slice(0, requests)


def scale_session(t: pa.Table, session_id: int, first_request_id: int, start_s: float, *, requests: int,
                  context_scale: float, think_scale: float, think_cap_s: float, output_cap: int) -> pa.Table:  # fmt: skip
    """The first ``requests`` rows of one imported session, scaled and renumbered."""
    from sim.workload.rows import request_table
    from sim.workload.schema import ARRIVAL_ABSOLUTE

    t = first_requests(t, requests)
    n = t.num_rows
    c = {
        name: t.column(name).to_numpy(zero_copy_only=False)
        for name in t.column_names
        if name != "block_hashes"
    }
    old_ids = c["request_id"]
    new_id = {int(o): first_request_id + k for k, o in enumerate(old_ids)}

    def remap(values: np.ndarray) -> np.ndarray:
        return np.array([new_id.get(int(v), -1) if v >= 0 else -1 for v in values], dtype=np.int64)

    inp = np.maximum(_scale(c["input_tokens"], context_scale), 1)
    out = np.clip(c["output_tokens"], 1, output_cap)  # no output: the one token prefill samples (module doc)
    parent = remap(c["prefix_parent_request_id"])
    prefix = np.where(parent >= 0, np.minimum(_scale(c["prefix_tokens"], context_scale), inp), 0)
    shared = np.where(
        c["shared_prefix_id"] >= 0, np.minimum(_scale(c["shared_prefix_tokens"], context_scale), inp), 0
    )
    dep = remap(c["depends_on_request_id"])
    absolute = (c["arrival"] == ARRIVAL_ABSOLUTE) | (dep < 0)
    offset = (c["arrival_time_s"] - c["session_start_s"]) * think_scale
    return request_table(
        n,
        {
            "session_id": session_id,
            "session_start_s": start_s,
            "tenant": pa.array(c["tenant"], pa.string()),
            "source": "weka-scaled",
            "template": pa.array(c["template"], pa.string()),
            "request_id": first_request_id + np.arange(n),
            "request_index": np.arange(n),
            "agent_id": c["agent_id"],
            "arrival": pa.array(np.where(absolute, ARRIVAL_ABSOLUTE, "think"), pa.string()),
            "arrival_time_s": start_s + offset,
            "think_time_s": np.where(absolute, 0.0, np.minimum(c["think_time_s"] * think_scale, think_cap_s)),
            "depends_on_request_id": np.where(absolute, -1, dep),
            "input_tokens": inp,
            "output_tokens": out,
            "prefix_parent_request_id": np.where(prefix > 0, parent, -1),
            "prefix_tokens": prefix,
            "shared_prefix_id": np.where(shared > 0, c["shared_prefix_id"], -1),
            "shared_prefix_tokens": shared,
            "stop_reason": pa.array(c["stop_reason"], pa.string()),
            "model": pa.array(c["model"], pa.string()),
            "agent_async": c["agent_async"],
        },
    )


def build(src: Path, out: Path, *, sessions: int, requests: int, context_scale: float, think_scale: float,
          think_cap_s: float, output_cap: int, stagger_s: float) -> dict:  # fmt: skip
    """Write the scaled trace to ``out``; returns the writer's summary plus the rules used."""
    from sim.errors import InputError
    from sim.workload.importers.weka import read
    from sim.workload.io import TraceWriter

    if sessions < 1 or requests < 1 or not 0 < context_scale <= 1 or think_scale < 0 or output_cap < 1:
        raise InputError("bad scaling options", value=dict(sessions=sessions, requests=requests,
                         context_scale=context_scale, think_scale=think_scale, output_cap=output_cap),
                         allowed="sessions, requests, output_cap >= 1; 0 < context_scale <= 1; think_scale >= 0")  # fmt: skip
    rules = {
        "source": str(src.name),
        "sessions": sessions,
        "requests_per_session": requests,
        "context_scale": context_scale,
        "think_scale": think_scale,
        "think_cap_s": think_cap_s,
        "output_cap": output_cap,
        "stagger_s": stagger_s,
    }
    kept: list[str] = []
    zero_output = 0
    with TraceWriter(out, metadata={"sim.scaling": json.dumps(rules, sort_keys=True)}) as w:
        next_id = 0
        for table in read(src):
            if table.num_rows < requests:
                continue
            k = len(kept)
            scaled = scale_session(table, k, next_id, k * stagger_s, requests=requests, context_scale=context_scale,
                                   think_scale=think_scale, think_cap_s=think_cap_s, output_cap=output_cap)  # fmt: skip
            w.write(scaled)
            outputs = first_requests(table, requests).column("output_tokens").to_numpy()
            zero_output += int(np.count_nonzero(outputs == 0))
            kept.append(str(table.column("template")[0]))
            next_id += scaled.num_rows
            if len(kept) == sessions:
                break
        if len(kept) < sessions:
            raise InputError(f"only {len(kept)} sessions have {requests} requests", file=str(src),
                             value=sessions, allowed=f"<= {len(kept)}")  # fmt: skip
    return {**(w.summary or {}), "scaling": rules, "templates": kept, "zero_output_requests": zero_output}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--src", type=Path, default=None)
    ap.add_argument("--sessions", type=int, default=48)
    ap.add_argument("--requests-per-session", type=int, default=10)
    ap.add_argument("--context-scale", type=float, default=1 / 16)
    ap.add_argument("--think-scale", type=float, default=0.1)
    ap.add_argument("--think-cap-s", type=float, default=30.0)
    ap.add_argument("--output-cap", type=int, default=2048)
    ap.add_argument("--stagger-s", type=float, default=0.1)
    args = ap.parse_args(argv)
    from sim.errors import InputError

    src = args.src or default_src()
    try:
        if not src.is_file():
            raise InputError("Weka trace not found (set SIM_SHARED or pass --src)", file=str(src))
        summary = build(src, args.out, sessions=args.sessions, requests=args.requests_per_session,
                        context_scale=args.context_scale, think_scale=args.think_scale, think_cap_s=args.think_cap_s,
                        output_cap=args.output_cap, stagger_s=args.stagger_s)  # fmt: skip
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
