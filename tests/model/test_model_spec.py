"""Spec files: loading, strict validation, the expanded per-layer tables (model.md §2-§4)."""

import copy

import pydantic
import pytest
import yaml

from sim.errors import InputError
from sim.model import load_model, model_names, parse_model
from sim.model.spec import SPECS_DIR

V4, V41 = "deepseek-v4-flash", "deepseek-v4.1-flash"


def _raw(name: str) -> dict:
    return yaml.safe_load((SPECS_DIR / f"{name}.yaml").read_text())


def test_model_names():
    assert model_names() == [
        "deepseek-llm-67b",
        "deepseek-v3.2",
        "deepseek-v4-flash",
        "deepseek-v4-flash-0731",
        "deepseek-v4-flash-mini",
        "deepseek-v4.1-flash",
        "deepseek-v4.1-flash-mini",
        "qwen3-coder-30b-a3b",
    ]


def test_unknown_model_names_the_allowed_ones():
    with pytest.raises(InputError) as err:
        load_model("deepseek-v5")
    assert str(err.value) == (
        "model: unknown model (got 'deepseek-v5'); allowed: "
        "deepseek-llm-67b, deepseek-v3.2, deepseek-v4-flash, deepseek-v4-flash-0731, deepseek-v4-flash-mini, "
        "deepseek-v4.1-flash, "
        "deepseek-v4.1-flash-mini, qwen3-coder-30b-a3b"
    )


def test_v4_layer_pattern():  # model.md §2, §4.1: [0,0] + [4,128]x20 + [4,0]
    spec = load_model(V4)
    assert [layer.ratio for layer in spec.layers] == [0, 0] + [4, 128] * 20 + [4]
    kinds = [layer.attention for layer in spec.layers]
    assert (kinds.count("swa"), kinds.count("csa"), kinds.count("hca")) == (2, 21, 20)
    assert all(layer.window_tokens == 128 for layer in spec.layers)
    assert [layer.index for layer in spec.layers if layer.mlp == "moe_hash"] == [0, 1, 2]
    assert all(layer.top_k is None for layer in spec.layers if layer.attention == "hca")


def test_v41_layer_pattern():  # model.md §3, §4.2
    spec = load_model(V41)
    assert [layer.ratio for layer in spec.layers] == [0, 0] + [2] * 18 + [1] * 20
    assert [layer.index for layer in spec.layers if layer.owns_kv] == [2, 8, 14, 20]
    assert [layer.index for layer in spec.layers if layer.owns_index_keys] == [2, 8, 14, 20]
    assert [layer.index for layer in spec.layers if layer.has_index_query] == [2, 8, 14, 20, 24, 28, 32, 36]
    assert [layer.index for layer in spec.layers if layer.selection == "reindex"] == [24, 28, 32, 36]
    assert [spec.layers[i].selection_source for i in (3, 19, 21, 25, 39)] == [2, 14, 20, 24, 36]
    assert all(layer.kv_source == 20 for layer in spec.layers[20:])
    assert [spec.layer_half(i) for i in (0, 19, 20, 39)] == ["encoder", "encoder", "decoder", "decoder"]
    assert spec.index.candidates.max_tokens == 16_384
    assert spec.engram.layers == [1, 14]


def test_row_layouts():  # model.md §2, §3: 584 = 448 + 128 + 7 + 1; 288; 528; 68; 132
    v4, v41 = load_model(V4), load_model(V41)
    assert v4.layout(None).main_row_bytes == 584
    assert v4.layout("fp8_index").index_row_bytes == 132
    lay = v41.layout(None)
    assert (lay.main_row_bytes, lay.swa_row_bytes, lay.index_row_bytes) == (288, 528, 68)
    assert v41.layout("sglang").main_row_bytes == 584


def test_specs_are_frozen():
    spec = load_model(V41)
    with pytest.raises(pydantic.ValidationError):
        spec.hidden = 1
    with pytest.raises(pydantic.ValidationError):
        spec.layers[0].ratio = 4


def test_unknown_key_is_rejected_with_its_path():
    raw = _raw(V41)
    raw["attention"]["head_count"] = 64
    with pytest.raises(InputError, match=r"attention\.head_count"):
        parse_model(raw, file="x.yaml")


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda r: r["layer_groups"][2].update(selection_source=4), "reuse needs a selection_source"),
        (lambda r: r["layer_groups"][2].update(kv_source=20), "kv_source"),
        (lambda r: r["layer_groups"].append({"layers": 5, "attention": "swa", "mlp": "moe"}), "exactly once"),
        (lambda r: r.update(default_kv_layout="fp16"), "default_kv_layout"),
        (lambda r: r["moe"].update(expert_dtype="fp6"), "fp6"),
        (lambda r: r.update(prefill_modes=["full"]), "ced"),
    ],
)
def test_inconsistent_specs_are_rejected(edit, message):
    raw = copy.deepcopy(_raw(V41))
    edit(raw)
    with pytest.raises(InputError, match=message):
        parse_model(raw)


def test_yaml_constants_cite_model_md():
    """Every spec file cites model.md sections next to its constants."""
    for name in (V4, V41):
        text = (SPECS_DIR / f"{name}.yaml").read_text()
        assert text.count("§") >= 20, name


V4_0731 = "deepseek-v4-flash-0731"


def test_a_later_checkpoint_takes_its_base_whole_but_for_the_sections_it_gives():
    """0731 is V4-Flash's backbone with a DSpark drafter (model.md §2 "Later variant"): every other section equal."""
    base, later = load_model(V4).model_dump(), load_model(V4_0731).model_dump()
    own = {"name", "display_name", "notes", "drafter", "published"}
    assert {k for k in base if base[k] != later[k]} == own
    d = load_model(V4_0731).drafter
    assert (d.kind, d.blocks, d.draft_tokens, d.target_layers) == ("dspark", 3, 5, [40, 41, 42])
    assert d.extra.linears["main_proj"] == [3 * 4096, 4096]  # the 3 target layers' hidden states -> hidden


def _specs_dir(tmp_path, monkeypatch, files: dict[str, str]):
    import sim.model.spec as spec_module

    for name in (V4,):
        (tmp_path / f"{name}.yaml").write_text((SPECS_DIR / f"{name}.yaml").read_text())
    for name, text in files.items():
        (tmp_path / f"{name}.yaml").write_text(text)
    monkeypatch.setattr(spec_module, "SPECS_DIR", tmp_path)


def test_a_base_that_is_unknown_or_has_a_base_itself_is_refused(tmp_path, monkeypatch):
    _specs_dir(tmp_path, monkeypatch, {
        "a": "base: deepseek-v5\nname: a\n",
        "b": f"base: {V4}\nname: b\n",
        "c": "base: b\nname: c\n",
    })  # fmt: skip
    with pytest.raises(InputError, match=r"a\.yaml: base: unknown base model \(got 'deepseek-v5'\)"):
        load_model("a")
    assert load_model("b").hidden == load_model(V4).hidden
    with pytest.raises(InputError, match=r"c\.yaml: base: a base must be a complete spec"):
        load_model("c")
