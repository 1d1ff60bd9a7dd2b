"""Dotted-path overrides of a scenario document."""

import pytest

from sim.errors import InputError
from sim.plan.overrides import apply_overrides, parse_path

DOC = {
    "name": "t",
    "cache": {"policy": "lru", "dram": {"gb": 1, "ttl_s": 60}},
    "cluster": {"pools": [{"name": "prefill", "nodes": 1}, {"name": "decode", "nodes": 2}]},
}


def test_parse_path_keeps_dots_inside_selectors():
    assert parse_path("a.b[name=v4.1].c") == [("a", None), ("b", "name=v4.1"), ("c", None)]


def test_selector_sets_one_pool_and_leaves_the_template_untouched():
    out = apply_overrides(DOC, {"cluster.pools[name=decode].nodes": 5, "cluster.pools[0].nodes": 3})
    assert [p["nodes"] for p in out["cluster"]["pools"]] == [3, 5]
    assert [p["nodes"] for p in DOC["cluster"]["pools"]] == [1, 2]


def test_mapping_values_deep_merge_scalars_replace():
    out = apply_overrides(DOC, {"cache": {"dram": {"gb": 4}}, "name": "u"})
    assert out["cache"] == {"policy": "lru", "dram": {"gb": 4, "ttl_s": 60}}
    assert out["name"] == "u"


def test_mapping_into_a_selected_list_element_merges():
    out = apply_overrides(DOC, {"cluster.pools[name=prefill]": {"tp": 8}})
    assert out["cluster"]["pools"][0] == {"name": "prefill", "nodes": 1, "tp": 8}


def test_new_keys_and_sections_are_set_for_the_schema_to_judge():
    assert apply_overrides(DOC, {"cache.ssd_gb": 9})["cache"]["ssd_gb"] == 9
    assert apply_overrides(DOC, {"cluster.node.dram_gb": 4096})["cluster"]["node"] == {"dram_gb": 4096}


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("cluster.pools[name=mixed].nodes", "matches 0 elements"),
        ("cluster.pools[7].nodes", "out of range"),
        ("cluster.nope[0].x", "does not have"),
        ("name.x", "not a mapping"),
        ("cache[0].x", "not a list"),
        ("cluster.pools[name].x", "bad selector"),
        ("a..b", "bad override path segment"),
    ],
)
def test_unwalkable_paths_name_the_path(path, message):
    with pytest.raises(InputError, match=message) as err:
        apply_overrides(DOC, {path: 1})
    assert path in str(err.value)
