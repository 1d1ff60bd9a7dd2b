"""The family registry (sim.config.families) is the one place a model family is named: the scenario schema,
the cluster builder, the API price book, the kernel tables and the report all follow it."""

import pytest
import yaml
from pydantic import Field

from sim.config import families
from sim.config.base import StrictModel
from sim.config.cache import Cache
from sim.config.families import FAMILIES, Family, family_names, model_family, servable_models
from sim.config.family_cache import StoreRules, V41CachePolicy
from sim.config.timing import SpecDecode
from sim.errors import InputError
from sim.hardware.api_prices import API_PRICES_FILE, load_api_prices
from sim.model import load_model
from sim.timing.calibrated import MODEL_KEYS


def test_every_family_has_its_blocks_models_prices_and_kernel_key():
    cache, sd = Cache(), SpecDecode()
    book = load_api_prices()
    for f in FAMILIES:
        assert isinstance(cache.policy_for(f.key), f.cache_block)
        assert sd.for_family(f.key).method == f.spec_decode["method"]
        assert book.latest(f.key).family == f.key
        for model in f.models:
            assert model_family(model) == f.key
            assert load_model(model).name == model
            assert MODEL_KEYS[model] == f.label
        assert f.predecessor is None or f.predecessor in family_names()
    assert servable_models() == [
        "deepseek-v4-flash",
        "deepseek-v4-flash-0731",
        "deepseek-v4-flash-mini",
        "deepseek-v4.1-flash",
        "deepseek-v4.1-flash-mini",
    ]


def test_schema_fields_follow_the_registry_in_order():
    assert list(Cache.model_fields)[-len(FAMILIES) :] == family_names()
    assert list(SpecDecode.model_fields) == ["enabled", "workload_kind", *family_names()]


def test_a_new_family_is_one_registry_entry(monkeypatch):
    """A third family gets its schema field from the registry alone (the scenario modules build theirs the
    same way at import)."""
    v5 = Family(key="v5", label="V5", models=("deepseek-v5",), cache_block=V41CachePolicy, predecessor="v41")
    monkeypatch.setattr(families, "FAMILIES", (*FAMILIES, v5))

    class Base(StrictModel):
        enabled: bool = False

    Blocks = families.with_family_fields(
        Base, lambda f: (f.cache_block, Field(default_factory=f.cache_block))
    )
    m = Blocks.model_validate({"v5": {"swa_ttl_s": 60}})
    assert list(Blocks.model_fields) == ["enabled", "v4", "v41", "v5"]
    assert m.v5.swa_ttl_s == 60
    assert families.model_family("deepseek-v5") == "v5"
    assert families.family("v5").label == "V5"


def test_unknown_families_and_models_are_named_with_what_is_allowed():
    with pytest.raises(InputError, match="unknown model family.*v3.*allowed: v4, v41"):
        Cache().policy_for("v3")
    with pytest.raises(InputError, match="no policy family for model.*deepseek-v3"):
        model_family("deepseek-v3")


def test_the_price_book_accepts_only_registered_families(tmp_path):
    data = yaml.safe_load(API_PRICES_FILE.read_text())
    data["periods"][0]["family"] = "v3"
    bad = tmp_path / "prices.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(
        InputError, match=r"periods\[0\]\.family: not a model family \(got 'v3'\); allowed: v4, v41"
    ):
        load_api_prices(bad)


def test_store_rules_of_each_family_block():
    cache = Cache()
    v4 = cache.policy_for("v4").store_rules(window_rebuild_tokens=512, eps_s=1e-9)
    assert v4 == StoreRules(
        swa_persisted_with_prefix=True,
        swa_pool=False,
        swa_pool_dram_frac=0.0,
        swa_ttl_s=1e-9,
        swa_replay_tokens=512,
        persist_prefixes=True,
        retention_s=0.0,
    )
    v41 = cache.policy_for("v41").store_rules(window_rebuild_tokens=512, eps_s=1e-9)
    assert (v41.swa_pool, v41.swa_replay_tokens, v41.retention_s) == (True, 128, 259200.0)
