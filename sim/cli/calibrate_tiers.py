"""`sim calibrate tiers HW --model M --prefix-tokens N`: the time to the first token of a request whose
N-token prefix is cached in each tier of the default chain (sim.config.cache), and by recompute, on the
smallest instance of HW that holds M (one GPU when it fits).

    tier_s      = floor_s + the tier's read path (sim.kvcache.paths: per request + per segment + bytes / bw)
    floor_s     = request_overhead_s + per_token_s x N + the step that computes the last prompt token
    recompute_s = request_overhead_s + per_token_s x N + the prefill of N tokens in chunks (timing model)

The floor is what a hit in HBM costs: the engine's own work around a request, which the step times do not
hold, plus the one step that computes the last prompt token. Its two constants are the published H20 HBM-hit
curve itself (hwprofiles/nvidia-h20-hgx8.yaml S4, results/gpu.json, vLLM 0.18.1 eager, Qwen3-Coder-30B-A3B,
TTFT p50 at 1K/2K/4K/8K/16K/64K = 41.8/44.9/46.2/52.5/63.4/111 ms), so `hbm_s` reproduces that curve by
construction; it is an input here, not a prediction:
- 42 ms per request [B]: the 1K-prefix hit (41.8 ms). Our timing model puts the GPU's share of it, the
  last-token step, at 2.8 ms, so about 39 ms is engine work outside the GPU steps (API server, scheduling,
  eager launches); the floor counts the last-token step once more (~3 ms high for Qwen on one H20).
- 1 us per prompt token [C]: the least-squares slope of those six points is 1.05 us/token (residuals within
  3.3 ms); the points up to 16K alone give 1.37 us/token (the curve bends), which would put the 64K hit at
  0.131 s, +18 %. Why it grows with the prompt is our reading [D]: host work per token (tokenising, hashing
  16-token blocks, matching them); the GPU part cannot be it (one query's attention over a 64K cache
  reads 6.4 GB, ~2 ms on an H20).
Below HBM each tier adds its read path, whose per-request cost comes from the same source's 1K points
(sim.kvcache.paths), and recompute the timing model's chunked prefill. These engine constants were measured
with vLLM on a 30B MoE; taking them for DeepSeek-V4 on SGLang is an assumption [D]. The published setup's
engine pages are 16 tokens (vLLM's default block size); `--block-tokens` sets them (default: the scenario
default, 256). `--scenario FILE` takes the tier chain from a scenario (a tier added there, a CXL expander
say, is reported like the others: `<name>_s`).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from sim import units
from sim.cli.numbers import finite
from sim.errors import InputError

REQUEST_OVERHEAD_S = 0.042  # S4 [B]: TTFT of a 1K-token prefix hit in HBM, vLLM 0.18.1 eager on one H20
PER_TOKEN_S = 1e-6  # S4 [C]: slope of the HBM-hit TTFT over 1K-64K (1.05 us/token); its cause is our reading [D]


def tier_key(name: str) -> str:
    """The JSON key of a tier's time: `<name>_s` (the RDMA pool's is `rdma_s`)."""
    return "rdma_s" if name == "rdma_pool" else f"{name}_s"


def register(app: typer.Typer) -> None:
    app.command("tiers")(tiers_cmd)


def _instance_gpus(hw, spec, kv_bytes: float, reserve_frac: float) -> int:
    """The fewest GPUs (a power of two, one node at most) whose HBM holds the weights and the prefix."""
    from sim.cluster.build import instance_weight_bytes

    g = 1
    while g <= hw.gpus_per_node:
        weights = instance_weight_bytes(spec, 1, True)
        if weights + kv_bytes <= g * hw.hbm_capacity_bytes * (1.0 - reserve_frac):
            return g
        g *= 2
    raise InputError(
        f"{spec.name} does not fit one node of {hw.id}",
        where="--model",
        value=spec.name,
        allowed="a smaller model",
    )


def tier_times(
    hw_id: str,
    model: str,
    prefix_tokens: int,
    *,
    block_tokens: int | None = None,
    request_overhead_s: float = REQUEST_OVERHEAD_S,
    per_token_s: float = PER_TOKEN_S,
    cache=None,
) -> dict:
    """Seconds to the first token from each tier and by recompute, with their parts (see the module doc)."""
    from sim import model as m
    from sim.config.cache import Cache
    from sim.config.cluster import Cluster
    from sim.config.scheduler import Scheduler
    from sim.config.timing import Timing
    from sim.hardware import load_hw
    from sim.kvcache.paths import kv_regions_per_block, kv_segments, path_rates
    from sim.timing.arith import build_arith
    from sim.timing.batch import DecodeTerms, PrefillChunk
    from sim.timing.factory import TimingContext, make_timing, profile_achievable
    from sim.timing.roofline import Parallelism

    if prefix_tokens < 1:
        raise InputError("the prefix needs at least one token", where="--prefix-tokens", value=prefix_tokens)
    hw = load_hw(hw_id)
    spec = m.load_model(model)
    if prefix_tokens > spec.max_context_tokens:
        raise InputError(
            "prefix longer than the model's context",
            where="--prefix-tokens",
            value=prefix_tokens,
            allowed=f"1..{spec.max_context_tokens}",
        )
    cache, timing_cfg = cache or Cache(), Timing()
    block = block_tokens or cache.block_tokens
    kv_bytes = prefix_tokens * m.global_kv_bytes_per_token(spec) + (
        m.swa_bytes_per_sequence(spec) + m.compressor_state_bytes_per_sequence(spec)
    )
    reserve = Cluster.model_fields["activation_reserve_frac"].default
    gpus = _instance_gpus(hw, spec, kv_bytes, reserve)
    achievable = profile_achievable(hw)
    par = Parallelism(gpus=gpus, tp=gpus, ep=gpus, dp=1)
    ctx = TimingContext.of_instance(model, build_arith(model), hw, par, timing_cfg, achievable)
    timing = make_timing(timing_cfg.model, ctx)
    serve_s = request_overhead_s + per_token_s * prefix_tokens
    last_token_s = timing.step_s(0, DecodeTerms(), [PrefillChunk(1, prefix_tokens - 1, last_chunk=True)])
    floor_s = serve_s + last_token_s
    chunk = Scheduler().chunk_tokens
    prefill_s = 0.0
    for start in range(0, prefix_tokens, chunk):
        new = min(chunk, prefix_tokens - start)
        chunk_part = PrefillChunk(new, start, last_chunk=start + new == prefix_tokens)
        prefill_s += timing.step_s(0, DecodeTerms(), [chunk_part])
    segments = kv_segments(prefix_tokens, block, kv_regions_per_block(spec))
    out: dict = {
        "hardware": hw.id,
        "model": model,
        "prefix_tokens": prefix_tokens,
        "gpus": gpus,
        "timing": timing.name,
        "kv_bytes": kv_bytes,
        "block_tokens": block,
        "segments": segments,
        "floor_s": floor_s,
        "hbm_s": floor_s,
        "recompute_s": serve_s + prefill_s,
        "parts": {"hbm": {"floor_s": floor_s, "serve_s": serve_s, "last_token_s": last_token_s}},
        "tiers": [],
    }
    # every tier of the chain below HBM, enabled or not (a path is data whether or not a run uses it)
    for name, tier in sorted(cache.tiers.items(), key=lambda item: item[1].rank):
        path = tier.read
        if path is None:
            continue
        out["tiers"].append(name)
        lanes = 1 if path.link.startswith("ssd") else gpus
        rates = path_rates(path, hw, achievable, lanes)
        load_s = rates.transfer_s(kv_bytes, segments)
        out[tier_key(name)] = floor_s + load_s
        out["parts"][name] = {
            "link": path.link,
            "bw_GBps": rates.bw_bytes_per_s / units.GB,
            "per_request_s": rates.cost.per_request_s,
            "segments_s": segments * rates.cost.per_segment_s,
            "bytes_s": kv_bytes / rates.bw_bytes_per_s,
            "load_s": load_s,
        }
    out["parts"]["recompute"] = {"serve_s": serve_s, "prefill_s": prefill_s, "chunk_tokens": chunk}
    return out


def tiers_cmd(
    hw: Annotated[str, typer.Argument(help="hardware profile id (sim hw list), or its unique prefix")],
    model: Annotated[str, typer.Option("--model", help="model name (sim model list)")],
    prefix_tokens: Annotated[int, typer.Option("--prefix-tokens", help="tokens of the cached prefix")],
    block_tokens: Annotated[
        int | None,
        typer.Option("--block-tokens", min=1, help="engine KV page size (default cache.block_tokens)"),
    ] = None,
    request_overhead_s: Annotated[
        float,
        typer.Option("--request-overhead-s", min=0.0, callback=finite, help="engine cost of one request"),
    ] = REQUEST_OVERHEAD_S,
    per_token_s: Annotated[
        float,
        typer.Option(
            "--per-token-s", min=0.0, callback=finite, help="engine cost per prompt token (tokenise, hash)"
        ),
    ] = PER_TOKEN_S,
    scenario: Annotated[
        str | None,
        typer.Option("--scenario", help="take the tier chain (cache.tiers) from this scenario file"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Time to the first token of a request whose prefix is in HBM, host DRAM, the RDMA pool or SSD, or is
    recomputed, on one instance of HW: the default tier chain's paths over the profile's links."""
    from sim.hardware import hw_names
    from sim.model import model_names

    known = hw_names()
    by_prefix = [h for h in known if h.startswith(f"{hw}-")]  # nvidia-h20 -> nvidia-h20-hgx8
    if hw not in known and len(by_prefix) != 1:
        raise InputError("unknown hardware profile", where="HW", value=hw, allowed=known)
    hw = hw if hw in known else by_prefix[0]
    if model not in model_names():
        raise InputError("unknown model", where="--model", value=model, allowed=model_names())
    cache = None
    if scenario is not None:
        from sim.config.scenario import load_scenario

        cache = load_scenario(scenario).cache
    data = tier_times(
        hw,
        model,
        prefix_tokens,
        block_tokens=block_tokens,
        request_overhead_s=request_overhead_s,
        per_token_s=per_token_s,
        cache=cache,
    )
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    console = Console() if Console().is_terminal else Console(width=160)
    table = Table(
        title=f"{data['model']} on {data['gpus']} GPU(s) of {data['hardware']}: {data['prefix_tokens']:,}-token "
        f"prefix, {data['kv_bytes'] / units.GB:.3g} GB of KV in {data['segments']:,} segments "
        f"({data['block_tokens']}-token blocks), timing {data['timing']}"
    )
    for col in ("from", "first token (s)", "link", "GB/s", "request (s)", "segments (s)", "bytes (s)"):
        table.add_column(col, justify="left" if col in ("from", "link") else "right")
    hbm = data["parts"]["hbm"]
    table.add_row("hbm", f"{data['hbm_s']:.3f}", "-", "-", f"{hbm['serve_s']:.3f}", "-", "-")
    for name in data["tiers"]:
        p = data["parts"][name]
        table.add_row(
            name,
            f"{data[tier_key(name)]:.3f}",
            p["link"],
            f"{p['bw_GBps']:.1f}",
            f"{p['per_request_s']:.3f}",
            f"{p['segments_s']:.3f}",
            f"{p['bytes_s']:.3f}",
        )
    table.add_row("recompute", f"{data['recompute_s']:.3f}", "-", "-", "-", "-", "-")
    console.print(table)
    console.print(
        f"floor (an HBM hit): {hbm['serve_s']:.3f} s engine + {hbm['last_token_s']:.4f} s last-token step; "
        "a lower tier adds its read path (sim/kvcache/paths.py)",
        markup=False,
    )
