"""`cache.swa_prefix_rows`: what an engine's prefix cache keeps of the sliding window (sim.model.kv
.SwaPrefixState). `every_token` (the served reduced model) keeps every token's raw window rows in its
blocks: a hit recomputes nothing, and the rows cost bytes per token; `window` (the default, production
engines) keeps the last window, and a hit whose window is gone rebuilds it."""

from __future__ import annotations

import pytest
import yaml

from sim.cluster.build import cache_policy
from sim.config.scenario import load_scenario
from sim.errors import InputError
from sim.kvcache.lookup import plan_prefix
from sim.model import global_kv_bytes_per_token, load_model, swa_bytes_per_sequence, swa_rebuild_tokens

from . import objects

ROW_BYTES = 584  # a window row of V4's layouts (model.md §5.1)


def _scenario(tmp_path, model: str, cache: dict):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({
        "name": "swa", "models": [model], "hardware": "nvidia-h200-hgx8",
        "cluster": {"pools": [{"name": "p", "role": "colocated", "instances": 1, "gpus_per_instance": 1}]},
        "cache": cache, "workload": {"benchmark": {"isl_tokens": 10, "osl_tokens": 10, "concurrency": 1},
                                     "horizon_s": 10},
    }))  # fmt: skip
    return load_scenario(path)


@pytest.mark.parametrize("model, layers", [("deepseek-v4-flash-mini", 5), ("deepseek-v4-flash", 43)])
def test_every_token_keeps_the_rows_per_token_and_never_replays(tmp_path, model, layers):
    spec = load_model(model)
    window = cache_policy(_scenario(tmp_path, model, {}), "v4", spec, None)
    rows = cache_policy(_scenario(tmp_path, model, {"swa_prefix_rows": "every_token"}), "v4", spec, None)
    assert window.global_kv_bytes_per_token == global_kv_bytes_per_token(spec)  # the default is unchanged
    assert window.swa_state_bytes == swa_bytes_per_sequence(spec)
    assert window.swa_replay_tokens == swa_rebuild_tokens(spec, 256) > 0
    assert rows.global_kv_bytes_per_token == global_kv_bytes_per_token(spec) + layers * ROW_BYTES
    assert rows.swa_state_bytes == 0.0 and rows.swa_replay_tokens == 0 and not rows.swa_pool


@pytest.mark.parametrize("family", ["v4", "v41"])
def test_a_deep_hit_with_raw_rows_computes_only_the_new_tokens(tmp_path, family):
    """5,000 of 10,000 cached tokens repeated: the window at the hit (4,864) left the kept blocks long ago,
    so `window` rebuilds it (V4 under `rebuild`: its receptive field, V4.1: 128 tokens); with every token's rows
    kept it is in the blocks."""
    model = "deepseek-v4-flash" if family == "v4" else "deepseek-v4.1-flash"
    spec = load_model(model)
    for rows, replay in (("window", 4_864 if family == "v4" else 128), ("every_token", 0)):
        cache = {"swa_prefix_rows": rows, "swa_checkpoints": "rebuild"}
        pol = cache_policy(_scenario(tmp_path, model, cache), family, spec, None)
        store = objects.store(pol, (10 * objects.GB, 10 * objects.GB), 100.0)
        store.finish(7, 0, tokens=10_000, reserved_bytes=0.0, unpin_key=None, now_s=0.0, persist=True)
        plan = plan_prefix(store, objects.request(5_000, 9_000), 0, 1.0)
        assert plan.tokens == 4_864 and plan.replay_tokens == replay, rows


def test_unknown_setting_is_one_clear_error(tmp_path):
    with pytest.raises(InputError) as err:
        _scenario(tmp_path, "deepseek-v4-flash", {"swa_prefix_rows": "all"})
    assert "swa_prefix_rows" in str(err.value) and "every_token" in str(err.value)
