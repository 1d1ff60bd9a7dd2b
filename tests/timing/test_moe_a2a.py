"""The MoE all-to-all by the pool's `moe_a2a` (sim.timing.roofline): DeepEP's measured low-latency kernels
in decode steps and normal kernels in steps with prefill rows, none apart for Mega MoE, the link model as
before; a pool asking for DeepEP on a GPU without its measurements is refused with one clear message."""

from __future__ import annotations

import pytest

from sim.config.errors import validate_or_raise
from sim.config.scenario import Scenario
from sim.errors import InputError
from sim.hardware import load_hw
from sim.timing.batch import PrefillChunk
from sim.timing.calibrated import build_calibrated
from sim.timing.factory import deepep_costs
from sim.timing.roofline import Parallelism

K = 1024


def _timing(context, moe_a2a: str, hardware: str = "nvidia-h200-hgx8"):
    ctx = context(hardware=hardware, tp=1, ep=4, dp=4)
    return build_calibrated(
        type(ctx)(**{**ctx.__dict__, "par": Parallelism(gpus=4, tp=1, ep=4, dp=4, moe_a2a=moe_a2a)})
    )


@pytest.mark.parametrize("hardware", ["nvidia-h200-hgx8", "nvidia-b200-hgx8", "nvidia-b300-hgx8"])
def test_deepep_charges_its_measured_kernels_by_the_step_kind(context, hardware):
    link, deepep, mega = (_timing(context, k, hardware) for k in ("link", "deepep", "megamoe"))
    costs = deepep_costs(load_hw(hardware).scale_up.deepep)
    layers = deepep.arith.moe_layers
    for rows in (4, 256, 8192):
        tokens = rows / 4  # every GPU dispatches its own DP rank's rows
        ll = layers * (costs.ll_dispatch.at(tokens) + costs.ll_combine.at(tokens))
        normal = layers * (costs.normal_dispatch.at(tokens) + costs.normal_combine.at(tokens))
        # the rest of the communication (TP all-reduce: none at TP 1, overhead) is the same for every kind
        rest = mega._comm_s(rows)
        assert deepep._comm_s(rows) == pytest.approx(ll + rest, rel=1e-12)
        assert deepep._comm_s(rows, True) == pytest.approx(normal + rest, rel=1e-12)
        assert mega._comm_s(rows, True) == rest
        assert link._comm_s(rows) == link._comm_s(rows, True) > rest  # the link model: one cost, overlapped
    # measured per call, the kernels cost tens of microseconds where the link model charges a few
    assert deepep._comm_s(64) > 3 * link._comm_s(64)
    # a step with a chunk runs the normal kernels: it costs more than the same step decoding only
    terms = deepep.decode_seq_terms(4 * K, 1).scaled(64)
    chunk = [PrefillChunk(2048, 0, last_chunk=True, rank=0)]
    extra_deepep = deepep.step_s(64, terms, chunk) - link.step_s(64, terms, chunk)
    assert extra_deepep == pytest.approx(
        deepep._comm_s(64 + 2048 * 4, True) - link._comm_s(64 + 2048 * 4, True)
    )


def test_deepep_on_a_gpu_without_measurements_is_refused():
    doc = {
        "name": "x",
        "models": ["deepseek-v4-flash"],
        "hardware": "nvidia-h100-hgx8",
        "cluster": {
            "pools": [
                {
                    "name": "w",
                    "role": "colocated",
                    "instances": 1,
                    "gpus_per_instance": 8,
                    "tp": 1,
                    "ep": 8,
                    "dp": 8,
                    "moe_a2a": "deepep",
                }
            ]
        },  # fmt: skip
        "workload": {"benchmark": {"isl_tokens": 1000, "osl_tokens": 100, "concurrency": 4}, "horizon_s": 60},
    }
    with pytest.raises(InputError) as err:
        validate_or_raise(Scenario, doc, file="s.yaml")
    text = str(err.value)
    assert "cluster.pools[0].moe_a2a" in text and "nvidia-h100-hgx8" in text and "scale_up.deepep" in text
    validate_or_raise(Scenario, {**doc, "hardware": "nvidia-h200-hgx8"}, file="s.yaml")  # measured there
