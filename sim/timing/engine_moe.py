"""The engines' MoE runners that sim times from measured module rows, not from its grouped-GEMM tables (issue 29,
docs/engines_and_validation.md sections 47, 59-61).

A pool names its engine's runner in `cluster.pools[].moe_runner` (from the launch flags); `auto` keeps sim's
default: Marlin's module for W4A16 experts on Hopper (sim.timing.marlin), the kernel tables or Mega MoE elsewhere.

| runner | what the engines run | rows | GPUs |
|---|---|---|---|
| flashinfer_cutlass | FlashInfer's SM90 CUTLASS mixed-input MoE, W4A16 (vLLM `--moe-backend flashinfer_cutlass`, SGLang `--moe-runner-backend flashinfer_mxfp4` on SM90; section 47) | measured here: FlashInfer 0.7.4, V4-Flash's and V4.1-Flash's shapes, EP 1-8, V4's expert TP 4 (kernels_bench.production.fi_w4a16_moe) | H100; the H200 takes the H100's rows [D] |
| flashinfer_trtllm | FlashInfer's TRT-LLM-gen MXFP4 MoE with MXFP8 activations, W4A8 (SGLang `--moe-runner-backend flashinfer_mxfp4` on SM100) | AIConfigurator 0.12.0's SGLang 0.5.14 module at V4-Flash's shape, TP 1-16, EP 1-256 (kernels_bench.aic_sglang_moe) | B200, B300; the GB200 takes the B200's rows [D] |
| triton_fp8 | SGLang's Triton fused MoE: what a Mega MoE pool runs in a step over Mega MoE's cap (not a pool's choice) | AIConfigurator's SGLang 0.5.14 module, FP8 block weights, V4-Flash's shape | B200, B300; GB200 as the B200 [D] |

How the rows are read (sim.timing.moe_module, the carry Marlin's module uses):
- The floor, the module's glue: the least time of the whole file, for every shape in it; sim charges the glue in
  the forward-pass term.
- One row an expert is `held` from the fewest tokens measured at or above it: these kernels' tiles hold many rows
  an expert, so their time follows the experts they touch (FlashInfer's W4A16 at V4.1's EP 8: 505-519 us from 64 to
  1,024 tokens).
- The model's own shape where measured; another model takes the measured shape nearest in weights an expert,
  carried by those weights at equal rows an expert [D].
- Under expert TP (TP without EP): the efficiency of the file's TP rows (at the first shape measured at TP) against
  its TP 1 rows, for every shape; held beyond the largest TP measured.

Why the GPUs without rows take another's: the H200 shares the H100's SM, clocks and 700 W limit, and FlashInfer's
W4A16 kernel streams its weights at half the H100's HBM bandwidth on its plateau (section 60 commits the
prediction of an H200 run: 0.93-1.03); the GB200 is the B200's GPU beside a Grace host.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from sim.errors import InputError
from sim.paths import project_root
from sim.timing.moe_module import ModulePoint, MoeModule, build, build_tp_split
from sim.timing.tables import gpu_key, read_table

Shape = tuple[int, int, int, int]  # hidden, intermediate, experts, top_k


class Runner(NamedTuple):
    """One engine MoE runner timed from measured rows (module doc)."""

    what: str  # how messages name it
    experts: str  # the experts' activation format it runs: bf16 (W4A16) | fp8 (W4A8)
    files: dict[str, str]  # gpu_key -> the measured CSV under hwprofiles/engine_modules/
    carried_from: dict[str, str]  # gpu_key without rows -> the gpu_key whose rows it takes [D]


RUNNERS: dict[str, Runner] = {
    "flashinfer_cutlass": Runner(
        "FlashInfer's SM90 CUTLASS W4A16 MoE",
        "bf16",
        {"h100": "flashinfer_w4a16_moe_h100.csv"},
        {"h200": "h100"},
    ),
    "flashinfer_trtllm": Runner(
        "FlashInfer's TRT-LLM-gen MXFP4 MoE (SGLang 0.5.14's module, AIConfigurator)",
        "fp8",
        {"b200": "sglang_flashinfer_trtllm_moe_b200.csv", "b300": "sglang_flashinfer_trtllm_moe_b300.csv"},
        {"gb200": "b200"},
    ),
    "triton_fp8": Runner(
        "SGLang's Triton fused MoE (FP8 block weights; SGLang 0.5.14's module, AIConfigurator)",
        "fp8",
        {"b200": "sglang_triton_fp8_moe_b200.csv", "b300": "sglang_triton_fp8_moe_b300.csv"},
        {"gb200": "b200"},
    ),
}
# the runners a pool may name (cluster.pools[].moe_runner), beside auto and marlin
POOL_RUNNERS = ("flashinfer_cutlass", "flashinfer_trtllm")


def rows_gpu(runner: str, gpu: str) -> str | None:
    """The GPU whose rows `runner` on `gpu` takes: its own, the one it is carried from, or None (refused)."""
    r = RUNNERS[runner]
    return gpu if gpu in r.files else r.carried_from.get(gpu)


def available_on(runner: str, profile) -> bool:
    return rows_gpu(runner, gpu_key(profile)) is not None


def is_carried(runner: str, profile) -> bool:
    """Whether `profile`'s GPU takes another GPU's rows of `runner` [D] (module doc)."""
    gpu = gpu_key(profile)
    return gpu not in RUNNERS[runner].files and gpu in RUNNERS[runner].carried_from


def points_file(runner: str, gpu: str) -> tuple[str, ...]:
    return ("hwprofiles", "engine_modules", RUNNERS[runner].files[gpu])


@functools.cache
def _rows(runner: str, gpu: str) -> tuple[tuple[ModulePoint, int], ...]:
    path = project_root().joinpath(*points_file(runner, gpu))
    rows = read_table(path, f"the measured module of {RUNNERS[runner].what}")[2]
    return tuple(
        (
            ModulePoint(int(r["hidden"]), int(r["intermediate"]), int(r["experts"]), int(r["top_k"]),
                        int(r["ep"]), int(r["tokens"]), float(r["time_us"]) * 1e-6),
            int(r["tp"]),
        )
        for r in rows
        if r["time_us"]
    )  # fmt: skip


def _shape(p: ModulePoint) -> Shape:
    return (p.hidden, p.intermediate, p.experts, p.top_k)


def load_points(runner: str, gpu: str) -> list[ModulePoint]:
    """The rows without expert TP (`ModulePoint.ep` the EP size)."""
    return [p for p, tp in _rows(runner, gpu) if tp == 1]


def tp_points(runner: str, gpu: str, shape: Shape) -> list[ModulePoint]:
    """`shape`'s rows at EP 1 with the TP size in `ModulePoint.ep` (TP 1 from the EP 1 rows), for
    `build_tp_split`."""
    return [p._replace(ep=tp) for p, tp in _rows(runner, gpu) if _shape(p) == shape and p.ep == 1]


def shape_for(runner: str, gpu: str, expert_weights: int, routed_experts: int, top_k: int) -> Shape:
    """The measured shape a model's experts are timed from: its own where measured, else the nearest in weights an
    expert (module doc) [D]."""
    shapes = sorted({_shape(p) for p in load_points(runner, gpu)})
    own = [s for s in shapes if 3 * s[0] * s[1] == expert_weights and s[2:] == (routed_experts, top_k)]
    return own[0] if own else min(shapes, key=lambda s: abs(3 * s[0] * s[1] - expert_weights))


@functools.cache
def module(runner: str, gpu: str, shape: Shape) -> MoeModule:
    """The module of `shape`'s rows of `runner` measured on `gpu` (module doc), built once."""
    points = load_points(runner, gpu)
    floor = min(p.seconds for p, _ in _rows(runner, gpu))
    built = build([p for p in points if _shape(p) == shape], floor_s=floor, one_row="held")
    tp_shape = min((_shape(p) for p, tp in _rows(runner, gpu) if tp > 1), default=None)
    if tp_shape is None:
        return built
    split = build_tp_split(tp_points(runner, gpu, tp_shape), floor_s=floor)
    return MoeModule(built.floor_s, built.per_weight, built.max_experts, split)


def for_model(runner: str, profile, expert_weights: int, routed_experts: int, top_k: int) -> MoeModule:
    """The module `profile`'s GPU times a model's experts with on `runner`; an InputError where it has no rows."""
    gpu = rows_gpu(runner, gpu_key(profile))
    if gpu is None:
        r = RUNNERS[runner]
        have = sorted({*r.files, *r.carried_from})
        raise InputError(
            f"{r.what} is timed from measured rows on {', '.join(g.upper() for g in have)} only",
            where="cluster.pools[].moe_runner",
            value=f"{runner} on {profile.gpu}",
            allowed=f"{runner} on {', '.join(g.upper() for g in have)}; auto elsewhere",
        )
    return module(runner, gpu, shape_for(runner, gpu, expert_weights, routed_experts, top_k))


W4A16_NEEDS = "W4A16 experts (models[].expert_activations: bf16) on a GPU without FP4 MMAs"
W4A8_NEEDS = "W4A8 experts on a GPU with FP4 MMAs"


def runner_misfit(runner: str, activations: str, native_fp4: bool) -> str | None:
    """What `runner` (marlin or one of RUNNERS) needs that experts run as `activations` on a GPU with or without
    FP4 MMAs lack, or None where it fits: the W4A16 runners dequantise MXFP4 to BF16 on Hopper, flashinfer_trtllm
    runs W4A8 on Blackwell."""
    if runner == "marlin" or RUNNERS[runner].experts == "bf16":
        return None if activations == "bf16" and not native_fp4 else W4A16_NEEDS
    return None if activations == "fp8" and native_fp4 else W4A8_NEEDS
