"""`cache.swa_checkpoints`: where an engine's prefix cache keeps DeepSeek-V4's sliding windows, and what a hit
without one does (sim.kvcache.lookup, the engine rule `swa_checkpoints` in sim.config.engine_rules).

The case every rule is about: a turn repeats 5,000 tokens of its parent's 10,000-token prompt, a hit of 4,864
(19 blocks of 256) whose window left the parent's kept blocks long ago."""

from __future__ import annotations

import pytest
import yaml

from sim.cluster.build import cache_policy
from sim.config.scenario import load_scenario
from sim.kvcache.lookup import plan_prefix, prompt_checkpoint, window_at_or_before
from sim.model import load_model

from . import objects
from .objects import GB, request

DEEP = (5_000, 9_000)  # repeated tokens, the new turn's prompt
HIT = 4_864


def _store(mode: str, family: str = "v4"):
    return objects.store(objects.policy(family, swa_checkpoints=mode), (10 * GB, 10 * GB), 100.0)


def _parent(store, *, prompt: int = 10_000, junction: int = 0, chunks: tuple[int, int] = (0, 0)) -> None:
    """Lineage 7's last turn finished: `prompt` tokens in, 200 out, prefilled from chunks[0] in chunks[1]."""
    store.finish(7, 0, tokens=prompt + 200, reserved_bytes=0.0, unpin_key=None, now_s=0.0, persist=True,
                 prompt_tokens=prompt, junction_tokens=junction, chunk_from_tokens=chunks[0],
                 chunk_tokens=chunks[1])  # fmt: skip
    store.hbm[0].reserved_bytes = 0.0


def test_rebuild_reruns_the_receptive_field():
    """The what-if mode (sglang#31713, opt-in and unmerged): a deep hit recomputes its window's receptive field
    (5,632 tokens for V4-Flash, capped by the hit)."""
    store = _store("rebuild")
    _parent(store)
    plan = plan_prefix(store, request(*DEEP), 0, 1.0)
    assert (plan.tokens, plan.replay_tokens, plan.junction_tokens) == (HIT, HIT, 0)


def test_sequence_ends_reads_the_prompt_or_sequence_end_window_and_misses_elsewhere():
    """SGLang's main (and DeepSeek's prefix units): windows where the parent's prompt and its sequence ended. A
    hit at the prompt's last block boundary reads it; the deep hit has none before it and misses; nothing is
    re-run."""
    store = _store("sequence_ends")
    _parent(store)
    assert plan_prefix(store, request(*DEEP), 0, 1.0) is None
    plan = plan_prefix(store, request(10_000, 12_000), 0, 1.0)
    assert (plan.tokens, plan.tier, plan.replay_tokens) == (9_984, 0, 0)
    plan = plan_prefix(
        store, request(10_200, 12_000), 0, 1.0
    )  # the output repeated: the sequence end's window
    assert (plan.tokens, plan.replay_tokens) == (
        9_984,
        0,
    )  # 10,200 rounds down to 9,984, inside its kept blocks


def test_sequence_ends_reads_a_chunk_end_window_of_the_last_prefill():
    """SGLang's main also keeps the window before each prefill chunk's end: the parent prefilled its 10,000 tokens
    from 0 in chunks of 4,096, so the deep hit of 4,864 ends at 4,096; from 2,000 on, at 6,096's last boundary
    before it is too far (its pages start at 5,632) and 2,000 + 4,096 = 6,096 > 4,864: none."""
    store = _store("sequence_ends")
    _parent(store, chunks=(0, 4_096))
    plan = plan_prefix(store, request(*DEEP), 0, 1.0)
    assert (plan.tokens, plan.replay_tokens, plan.junction_tokens) == (4_096, 0, 4_096)
    store = _store("sequence_ends")
    _parent(store, chunks=(2_000, 4_096))
    assert plan_prefix(store, request(*DEEP), 0, 1.0) is None


@pytest.mark.parametrize(
    "end, hit, kept",
    [
        (10_000, 9_984, 9_984),
        (10_000, 9_000, 0),
        (10_000, 12_000, 9_984),
        (10_240, 10_240, 10_240),
        (10_100, 10_000, 9_984),
        (10_200, 10_200, 9_984),  # 216 tokens into the last page: the page before it is kept too
        (10_200, 9_728, 0),
        (0, 5_000, 0),
    ],
)
def test_the_deepest_window_at_or_before_a_hit(end, hit, kept):
    """The pages covering the last max(128, 256) tokens before the end are kept (SGLang's free threshold)."""
    assert window_at_or_before(end, hit, 128, 256) == kept


def test_every_block_reads_the_window_in_hbm_and_replays_nothing():
    """vLLM 0.23: the window blocks before every 256-token boundary keep their hash until reused, so the same
    deep hit from HBM is whole and recomputes nothing."""
    store = _store("every_block")
    _parent(store)
    plan = plan_prefix(store, request(*DEEP), 0, 1.0)
    assert (plan.tokens, plan.tier, plan.hbm_tokens, plan.replay_tokens) == (HIT, 0, HIT, 0)


def test_every_block_below_hbm_falls_back_to_the_prompt_end_or_nothing():
    """On another instance only a lower tier has the prefix: the windows lived in the first instance's HBM
    blocks, so the hit ends at the parent's prompt checkpoint, or there is none; no replay either way."""
    store = _store("every_block")
    _parent(store)
    assert plan_prefix(store, request(*DEEP), 1, 10.0) is None  # 9,984 lies past the 4,864 the turn repeats
    plan = plan_prefix(store, request(10_100, 12_000), 1, 10.0)
    assert (plan.tokens, store.tier_names[plan.tier], plan.replay_tokens) == (
        9_984,
        "ssd",
        0,
    )  # node 1: the SSD


def test_prompt_ends_misses_a_deep_hit_and_pins_it_as_a_junction_the_next_turn_reads():
    """vLLM 0.28: windows only at prompt ends; the deep hit has none, so nothing is a hit, and the engine pins
    the cut-short length (#47782). A later turn whose hit ends there reads that window."""
    store = _store("prompt_ends")
    _parent(store)
    plan = plan_prefix(store, request(*DEEP), 0, 1.0)
    assert plan is not None and (plan.tokens, plan.junction_tokens) == (0, HIT)
    _parent(store, junction=HIT)  # that turn finished, keeping the junction
    plan = plan_prefix(store, request(*DEEP), 0, 2.0)
    assert (plan.tokens, plan.replay_tokens, plan.junction_tokens) == (HIT, 0, HIT)  # kept for the next turn


def test_prompt_ends_hit_at_the_prompt_checkpoint_is_whole():
    store = _store("prompt_ends")
    _parent(store)
    plan = plan_prefix(store, request(10_000, 12_000), 0, 1.0)
    assert (plan.tokens, plan.replay_tokens, plan.junction_tokens) == (9_984, 0, 9_984)


@pytest.mark.parametrize(
    "prompt, checkpoint", [(10_000, 9_984), (10_240, 9_984), (10_241, 10_240), (1, 0), (0, 0)]
)
def test_the_prompt_checkpoint_is_short_of_the_last_prompt_token(prompt, checkpoint):
    assert prompt_checkpoint(prompt, 256) == checkpoint


def test_v41_keeps_its_own_pool_whatever_the_mode():
    """V4.1's windows live in the SWA pool and replay 128 on a miss (model.md §10): the mode does not touch it."""
    store = _store("every_block", family="v41")
    _parent(store)
    assert plan_prefix(store, request(*DEEP), 0, 1.0).replay_tokens == 128


def _scenario(tmp_path, model: str, engine: dict | None, cache: dict | None = None):
    doc = {
        "name": "swa", "models": [model], "hardware": "nvidia-h200-hgx8",
        "cluster": {"pools": [{"name": "p", "role": "colocated", "instances": 1, "gpus_per_instance": 1}]},
        "workload": {"benchmark": {"isl_tokens": 10, "osl_tokens": 10, "concurrency": 1}, "horizon_s": 10},
    }  # fmt: skip
    if engine is not None:
        doc["engine"] = engine
    if cache is not None:
        doc["cache"] = cache
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_scenario(path)


@pytest.mark.parametrize(
    "engine, cache, model, family, mode",
    [
        (None, None, "deepseek-v4-flash", "v4", "sequence_ends"),
        ({"name": "sglang"}, None, "deepseek-v4-flash", "v4", "sequence_ends"),  # main@006cbb66
        ({"name": "sglang", "version": "0.5.15"}, None, "deepseek-v4-flash", "v4", "every_block"),
        ({"name": "sglang"}, {"swa_checkpoints": "rebuild"}, "deepseek-v4-flash", "v4", "rebuild"),
        ({"name": "vllm", "version": "0.23.0"}, None, "deepseek-v4-flash", "v4", "every_block"),
        ({"name": "vllm", "version": "0.26.0"}, None, "deepseek-v4-flash", "v4", "every_block"),
        ({"name": "vllm"}, None, "deepseek-v4-flash", "v4", "prompt_ends"),  # the newest known, 0.28.1
        ({"name": "vllm", "version": "0.23.0"}, {"swa_checkpoints": "sequence_ends"}, "deepseek-v4-flash", "v4",
         "sequence_ends"),
        ({"name": "vllm", "version": "0.23.0"}, None, "deepseek-v4.1-flash", "v41", "sequence_ends"),
    ],
)  # fmt: skip
def test_the_engine_decides_the_mode_unless_the_scenario_sets_it(
    tmp_path, engine, cache, model, family, mode
):
    scn = _scenario(tmp_path, model, engine, cache)
    assert cache_policy(scn, family, load_model(model), None).swa_checkpoints == mode


def _turns(tmp_path, engine: dict) -> list[tuple[int, int, int]]:
    """(request index in its session, hit tokens, replayed tokens) of every completed request of two sessions of
    four turns, each repeating 90 % of its parent's 8,000-token prompt (a hit deep inside it), under `engine`."""
    from sim.api import run_scenario

    doc = {
        "name": "swa-e2e", "seed": 3, "models": ["deepseek-v4-flash"], "hardware": "nvidia-h200-hgx8",
        "engine": engine,
        "cluster": {"pools": [{"name": "p", "role": "colocated", "instances": 1, "gpus_per_instance": 8, "tp": 1,
                               "ep": 8, "dp": 8}]},
        "workload": {"benchmark": {"isl_tokens": 8000, "osl_tokens": 20, "prefix_reuse_frac": 0.9, "concurrency": 2,
                                   "turns_per_session": 4},
                     "warmup_s": 0, "max_requests": 8},
        "outputs": {"timeseries_interval_s": 5},
    }  # fmt: skip
    path = tmp_path / f"{engine.get('version', 'x')}.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = tmp_path / f"out-{engine['name']}-{engine.get('version', 'newest')}"
    run_scenario(load_scenario(path), out_dir=out)
    import pyarrow.parquet as pq

    t = pq.read_table(out / "deepseek-v4-flash" / "requests.parquet").to_pylist()
    return sorted(
        (r["request_index"], r["hit_tokens"], r["replay_tokens"]) for r in t if r["status"] == "completed"
    )


def test_a_run_hits_as_each_engine_keeps_its_windows(tmp_path):
    """The same sessions end to end, each later turn repeating 7,200 of its parent's 8,000 prompt tokens (a hit of
    7,168): SGLang 0.5.15 and vLLM 0.23 keep every prompt page's window and hit it whole; SGLang's main keeps the
    windows at the prompt's and the sequence's end only, so it misses; vLLM 0.28 misses each session's second turn,
    pins the junction there and hits it from the third turn on (every turn repeats that far); no engine re-runs
    a window."""
    runs = {
        name: _turns(tmp_path, engine)
        for name, engine in (
            ("sglang 0.5.15", {"name": "sglang", "version": "0.5.15"}),
            ("sglang main", {"name": "sglang"}),
            ("vllm 0.23", {"name": "vllm", "version": "0.23.0"}),
            ("vllm 0.28", {"name": "vllm", "version": "0.28.1"}),
        )
    }
    later = {name: [(i, hit) for i, hit, _ in turns if i > 0] for name, turns in runs.items()}
    assert later["sglang 0.5.15"] and all(hit == 7_168 for _, hit in later["sglang 0.5.15"])
    assert later["vllm 0.23"] == later["sglang 0.5.15"]
    assert all(hit == 0 for _, hit in later["sglang main"])
    assert (
        all(hit == (0 if i == 1 else 7_168) for i, hit in later["vllm 0.28"])
        and max(later["vllm 0.28"])[0] >= 2
    )
    assert all(replay == 0 for turns in runs.values() for _, _, replay in turns)
