"""The hardware profiles' `scale_up.deepep` block: DeepEP's per-call times fitted to AIConfigurator's SGLang
tables (issue 29; sim/timing/roofline.py reads the block for pools with `moe_a2a: deepep`).

    python3 -m kernels_bench.aic_deepep --aic-data $SIM_AIC_DATA

For each GPU, AIConfigurator's `comm/sglang/<version>/wideep_deepep_{ll,normal}_perf.parquet` rows at
V4-Flash's shapes (hidden 4096, top-6 of 256 experts, one node) give dispatch and combine microseconds per
call by the tokens of one rank: the low-latency kernels up to 1,024 tokens, the normal ones at 20 SMs
(DeepEP's default `Buffer.num_sms`) up to 16,384 tokens. Each is fitted as fixed + per_token x tokens by
least squares on the relative error (every row weighs alike, small calls included); the block printed is
what the profiles hold, with the worst row's error in its note. The normal tables' SM sweep (4-24 SMs) gives
how the per-token time follows the SMs: the per-token fit at each SM count, least squares of a + b / SMs,
and the share b / 20 / (a + b / 20) that shrinks with more SMs (SGLang `--deepep-config` num_sms).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

HIDDEN, TOP_K, EXPERTS = 4096, 6, 256  # V4-Flash (model.md §2)
NORMAL_SMS = 20  # DeepEP's default Buffer.num_sms (deep_ep/buffer.py)
NORMAL_MAX_TOKENS = 16384  # a prefill step's tokens per rank stay below this
MEASURED_EP = 8  # AIConfigurator's DeepEP tables: one node of 8 GPUs, every GPU an EP rank
# GPU key of AIConfigurator's data folder -> (hardware profile, SGLang version of its DeepEP tables)
SOURCES = {
    "h200_sxm": ("nvidia-h200-hgx8", "0.5.12"),
    "b200_sxm": ("nvidia-b200-hgx8", "0.5.12"),
    "b300_sxm": ("nvidia-b300-hgx8", "0.5.12"),
}


@dataclass(frozen=True)
class Fit:
    """fixed_us + per_token_us x tokens, and the worst row's relative error."""

    fixed_us: float
    per_token_us: float
    worst_rel: float
    rows: int


def fit_relative(tokens: list[float], times_us: list[float]) -> Fit:
    """Least squares of (fixed + per_token x t - y) / y over the rows: the 2x2 normal equations."""
    if len(tokens) < 2 or len(set(tokens)) < 2:
        raise ValueError("need at least two distinct token counts to fit fixed + per-token")
    a = [1.0 / y for y in times_us]
    b = [t / y for t, y in zip(tokens, times_us, strict=True)]
    saa, sab, sbb = (
        sum(x * x for x in a),
        sum(x * z for x, z in zip(a, b, strict=True)),
        sum(z * z for z in b),
    )
    sa, sb = sum(a), sum(b)  # the right-hand side is 1 for every row
    det = saa * sbb - sab * sab
    fixed, per_token = (sa * sbb - sb * sab) / det, (saa * sb - sab * sa) / det
    worst = max(abs((fixed + per_token * t) / y - 1.0) for t, y in zip(tokens, times_us, strict=True))
    return Fit(fixed, per_token, worst, len(tokens))


def sm_frac(per_token_by_sms: dict[int, float], at_sms: int) -> float:
    """Least squares of per_token = a + b / SMs over the sweep; the share of the time at `at_sms` that goes as
    1 / SMs, b / at_sms / (a + b / at_sms), kept in [0, 1]."""
    if len(per_token_by_sms) < 2:
        raise ValueError("need per-token times at two SM counts or more to fit a + b / SMs")
    b, a = statistics.linear_regression([1.0 / s for s in per_token_by_sms], list(per_token_by_sms.values()))
    return min(1.0, max(0.0, (b / at_sms) / (a + b / at_sms)))


def _rows(path: Path, **where):
    import pyarrow.parquet as pq

    table = pq.read_table(path).to_pylist()
    return sorted(
        (r for r in table if all(r[k] == v for k, v in where.items())), key=lambda r: r["num_token"]
    )


def normal_sm_fracs(aic_data: Path, gpu: str) -> dict[str, float]:
    """{"dispatch" | "combine": the share of the per-token time at NORMAL_SMS that goes as 1 / SMs}."""
    path = aic_data / gpu / "comm" / "sglang" / SOURCES[gpu][1] / "wideep_deepep_normal_perf.parquet"
    shape = {"hidden_size": HIDDEN, "num_topk": TOP_K, "num_experts": EXPERTS}
    out = {}
    for what in ("dispatch", "combine"):
        rows = [r for r in _rows(path, **shape) if r["num_token"] <= NORMAL_MAX_TOKENS]
        by_sms = {}
        for sms in sorted({r[f"{what}_sms"] for r in rows}):
            at = [r for r in rows if r[f"{what}_sms"] == sms]
            by_sms[sms] = fit_relative(
                [r["num_token"] for r in at], [r[f"{what}_transmit_us"] for r in at]
            ).per_token_us
        out[what] = sm_frac(by_sms, NORMAL_SMS)
    return out


def fits(aic_data: Path, gpu: str) -> dict[str, dict[str, Fit]]:
    """{"low_latency" | "normal": {"dispatch" | "combine": Fit}} for one GPU's tables."""
    folder = aic_data / gpu / "comm" / "sglang" / SOURCES[gpu][1]
    shape = {"hidden_size": HIDDEN, "num_topk": TOP_K, "num_experts": EXPERTS}
    ll = _rows(folder / "wideep_deepep_ll_perf.parquet", **shape)
    out: dict[str, dict[str, Fit]] = {"low_latency": {}, "normal": {}}
    for what in ("dispatch", "combine"):
        out["low_latency"][what] = fit_relative(
            [r["num_token"] for r in ll], [r[f"{what}_avg_t_us"] for r in ll]
        )
        normal = [
            r
            for r in _rows(
                folder / "wideep_deepep_normal_perf.parquet", **shape, **{f"{what}_sms": NORMAL_SMS}
            )
            if r["num_token"] <= NORMAL_MAX_TOKENS
        ]
        out["normal"][what] = fit_relative(
            [r["num_token"] for r in normal], [r[f"{what}_transmit_us"] for r in normal]
        )
    return out


def block(gpu: str, f: dict[str, dict[str, Fit]], sm_fracs: dict[str, float]) -> str:
    """The profile's `scale_up.deepep` YAML block for `f` and the normal kernels' `sm_fracs` (sm_frac)."""
    lines = [f"  # {SOURCES[gpu][0]}: AIConfigurator {gpu}/comm/sglang/{SOURCES[gpu][1]}", "  deepep:"]
    for mode, span in (
        ("low_latency", "1-1024 tokens"),
        ("normal", f"1-{NORMAL_MAX_TOKENS} tokens at {NORMAL_SMS} SMs"),
    ):
        lines.append(f"    {mode}:")
        for what in ("dispatch", "combine"):
            x = f[mode][what]
            lines.append(
                f'      {what}_us: {{value: {x.fixed_us:.2f}, src: [EP1], est: true, tag: B, note: "over {span} '
                f'({x.rows} rows): within {x.worst_rel * 100:.0f} % of each row [B]"}}'
            )
            lines.append(
                f"      {what}_us_per_token: {{value: {x.per_token_us:.4f}, src: [EP1], est: true, tag: B}}"
            )
    lines.append(f"    measured_ep_gpus: {{value: {MEASURED_EP}, src: [EP1]}}")
    lines.append("    normal_sms:")
    lines.append(f"      measured_sms: {{value: {NORMAL_SMS}, src: [EP1]}}")
    for what in ("dispatch", "combine"):
        lines.append(
            f'      {what}_sm_frac: {{value: {sm_fracs[what]:.3f}, src: [EP1], est: true, tag: B, note: "least squares '
            f"of per-token = a + b / SMs over the 4-24 SM sweep, b / {NORMAL_SMS} / (a + b / {NORMAL_SMS}) [B]; beyond "
            f'24 SMs extrapolated [D]"}}'
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="kernels_bench.aic_deepep", description=__doc__.splitlines()[0])
    ap.add_argument("--aic-data", type=Path, required=True, help="AIConfigurator's systems/data folder")
    args = ap.parse_args(argv)
    for gpu in SOURCES:
        if not (args.aic_data / gpu).is_dir():
            print(f"{gpu}: not in {args.aic_data}", file=sys.stderr)
            continue
        print(block(gpu, fits(args.aic_data, gpu), normal_sm_fracs(args.aic_data, gpu)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
