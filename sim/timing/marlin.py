"""Marlin MoE (W4A16) on the H200 and the H100, timed from AIConfigurator's measured module (issue 29, thirteenth
and fifteenth sittings).

A model with `expert_activations: bf16` runs its MXFP4 routed experts as W4A16: the weights dequantised inside the
kernel, BF16 MMAs. On Hopper that is vLLM's `--moe-backend marlin` (Dynamo's H200 recipes for V4-Flash), which
sim would otherwise time as the H200's measured DeepGEMM FP8 rows. Marlin behaves differently from those: it reads
half the weight bytes (faster with one row an expert over many experts), and it reaches 150-230 TFLOP/s where
DeepGEMM reaches about 1,000 (several times slower at prefill sizes).

**Measured** (hwprofiles/engine_modules/marlin_mxfp4_h200.csv, written by `kernels_bench.aic_marlin`):
AIConfigurator 0.12.0's rows of vLLM 0.24.0's MoE module on the H200, MXFP4 on Marlin, one shape (hidden 3,584,
intermediate 3,072, 896 experts, top-16), EP 1-128, balanced routing, 1-16,384 tokens of the EP group.

**Carried to another model's experts.** vLLM picks Marlin's block size by the rows each expert gets, so at equal
rows per expert the kernel runs the same configuration and streams each local expert's weights the same number of
times: its time above the module's floor scales with the weights of the experts it runs. Per measured EP size,
`(t - floor) / (local experts x weights an expert)` is a cost per weight at each rows-per-expert (the measured
tokens from one row an expert up, the first point interpolated at exactly one row); between the measured local
expert counts (7 to 896) that cost is interpolated geometrically in the experts, because fewer experts fill fewer
SMs (at 16,384 tokens the module reaches 30 TFLOP/s over 7 local experts and 232 over 896); below 7 or above 896
the nearest count's. Beyond the most rows an expert measured (293) the time grows linearly with the rows, as the
last segment (compute-bound there). The floor is the least time measured, 80 us: the module with almost nothing to
do, i.e. vLLM's MoE glue (the routing's block alignment, the activation, the launches). sim charges every expert
kernel's glue in the forward-pass term (sim.timing.forward: our production pass runs its own routing around
DeepGEMM, 55 us a layer at decode, hwprofiles/h200/forward_pass_results.csv), so the module is charged above its
floor: `experts x weights x cost(experts, rows per expert)` a layer, the busiest EP rank's touched experts and their
rows (sim.timing.experts). Charging the floor as well counts the glue twice (docs/engines_and_validation.md
section 19 gives both).

Checks, not fitted (`python3 -m kernels_bench.aic_marlin --cross-shapes`): across shapes within one format, the same
carry built on AIConfigurator's vLLM 0.19.0 int4 Marlin module at DeepSeek-V3's shape (7,168 x 2,048, 256 experts,
top-8) gives that module's measured time at eight other fine-grained shapes at a median 0.93-1.12 (at 4,096 x 1,536,
128 experts top-8, the nearest to V4-Flash, 0.94, 10th-90th percentile 0.79-1.04); it fails on 8-expert shapes
(0.45-0.55), far from any served here. Across formats, vLLM 0.24.0's int4 module at Kimi-K2's shape (7,168 x 2,048,
384 experts, top-8) runs at 0.5-0.8x what this MXFP4 module carries to it: int4's per-128 scales against MXFP4's
per-32 move Marlin's time by that much, which is why the MXFP4 module is the one taken [D]. Each measured GPU stands
for itself only. AIConfigurator measured the same module on the H100 (hwprofiles/engine_modules/marlin_mxfp4_h100.csv,
fifteenth sitting): within 1-6 % of the H200 at every point, where its 0.7x HBM bandwidth would have made a
weight-bound kernel 1.43x slower, so Marlin here is bound by its in-kernel dequantisation, not by HBM, and a carry
by bandwidth would have been wrong; other GPUs without native FP4 (H20, AMD) are refused.

**Under expert TP** (TP without EP: each GPU runs a 1/t slice of every expert) the module does not take 1/t of its
time: its slices fill Marlin's tiles less well. AIConfigurator measured SGLang 0.5.14's Marlin module (the same
kernel and shape, EP 1) at TP 1 to 32 on both GPUs (hwprofiles/engine_modules/marlin_mxfp4_tp_*.csv): above the
least time measured, TP t runs e(t, rows an expert) of a perfect split, 0.93 at decode sizes and 0.70-0.76 at
prefill sizes for TP 8 (docs/engines_and_validation.md section 27). A GPU of expert TP t takes the module's time
over its experts / (t x e), e geometric between measured t and linear in the rows an expert, held beyond.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

from sim.errors import InputError
from sim.paths import project_root
from sim.timing.moe_module import ModulePoint, MoeModule, build, build_tp_split
from sim.timing.tables import gpu_key, read_table

MEASURED_GPUS = ("h200", "h100")  # gpu_key of the GPUs the module was measured on
# by gpu_key: the module's rows, and SGLang's module at each expert-TP size (docs/engines_and_validation.md section 27)
POINTS_FILES: dict[str, tuple[str, ...]] = {
    gpu: ("hwprofiles", "engine_modules", f"marlin_mxfp4_{gpu}.csv") for gpu in MEASURED_GPUS
}
TP_FILES: dict[str, tuple[str, ...]] = {
    gpu: ("hwprofiles", "engine_modules", f"marlin_mxfp4_tp_{gpu}.csv") for gpu in MEASURED_GPUS
}


def load_tp_points(gpu: str) -> list[ModulePoint]:
    """SGLang's module at each expert-TP size on `gpu` (the TP size in `ModulePoint.ep`)."""
    rows = list(
        read_table(project_root().joinpath(*TP_FILES[gpu]), "the measured Marlin module under expert TP")[2]
    )
    return [
        ModulePoint(int(r["hidden"]), int(r["intermediate"]), int(r["experts"]), int(r["top_k"]), int(r["tp"]),
                    int(r["tokens"]), float(r["time_us"]) * 1e-6)
        for r in rows
    ]  # fmt: skip


def load_points(path: Path | None = None, gpu: str = "h200") -> list[ModulePoint]:
    """The measured rows of `path`, else of `gpu`'s committed file (the CSV's header names their source)."""
    path = path or project_root().joinpath(*POINTS_FILES[gpu])
    rows = list(read_table(path, "the measured Marlin module")[2])
    return [
        ModulePoint(
            hidden=int(r["hidden"]),
            intermediate=int(r["intermediate"]),
            experts=int(r["experts"]),
            top_k=int(r["top_k"]),
            ep=int(r["ep"]),
            tokens=int(r["tokens"]),
            seconds=float(r["time_us"]) * 1e-6,
        )
        for r in rows
    ]


def measured(gpu: str = "h200") -> MoeModule:
    """The module of `gpu`'s committed measurement (module doc), built once per GPU."""
    return _measured(gpu)


@functools.cache
def _measured(gpu: str) -> MoeModule:
    module = build(load_points(gpu=gpu))
    if gpu in TP_FILES:
        module = replace(module, tp_split=build_tp_split(load_tp_points(gpu)))
    return module


REFUSAL = (
    "W4A16 experts (Marlin) are timed from measurements on the H200 and the H100 only; other GPUs without native "
    "FP4 are not carried"
)
ALLOWED = "bf16 on an H200, an H100 or a GPU with native FP4 (sim.timing.carry rule 4); fp8 elsewhere"


def measured_on(profile) -> bool:
    """Whether `profile`'s GPU is one the module was measured on."""
    return gpu_key(profile) in POINTS_FILES


def for_gpu(profile) -> MoeModule:
    """The module measured on `profile`'s GPU; an InputError where it was not measured."""
    if not measured_on(profile):
        raise InputError(
            REFUSAL, where="models[].expert_activations", value=f"bf16 on {profile.gpu}", allowed=ALLOWED
        )
    return measured(gpu_key(profile))
