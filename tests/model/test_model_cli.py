"""`sim model list | show | compare` through the typer app and the real entry point."""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from sim.cli import app
from sim.errors import InputError

runner = CliRunner()


def _json(args: list[str]):
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize(
    "name, kv", [("deepseek-v4.1-flash", 890), ("deepseek-v4-flash", 3514.25), ("deepseek-llm-67b", 389_120)]
)
def test_show_json_kv_per_token(name, kv):
    data = _json(["model", "show", name, "--json"])
    assert data["global_kv_bytes_per_token"] == kv
    for key in ("swa_bytes_per_sequence", "weights_bytes", "active_params_prefill", "active_params_decode"):
        assert isinstance(data[key], float)


def test_show_json_at_context_and_layers():
    data = _json(["model", "show", "deepseek-v4.1-flash", "--context", "1M", "--json"])
    at = data["at_context"]
    assert at["context_tokens"] == 1 << 20
    assert at["decode"]["total_flops"] == pytest.approx(57.49e9, rel=0.001)
    assert at["decode_reindex_full_range"]["total_flops"] == pytest.approx(91.32e9, rel=0.001)
    assert set(at["prefill"]) == {"ced", "engine", "full40"}
    assert len(data["layers"]) == 40 and data["layers"][20]["main_bytes_per_token"] == 288
    sg = _json(["model", "show", "deepseek-v4.1-flash", "--layout", "sglang", "--json"])
    assert sg["global_kv_bytes_per_token"] == 1630


def test_show_tables_render():
    result = runner.invoke(app, ["model", "show", "deepseek-v4.1-flash", "--context", "128K"])
    assert result.exit_code == 0
    assert "890.00 B" in result.stdout and "reindex" in result.stdout and "37-39" in result.stdout


def test_compare_json_ratios():
    data = _json(
        ["model", "compare", "deepseek-v4-flash", "deepseek-v4.1-flash", "--context", "32K", "--json"]
    )
    assert data["contexts"] == [8192, 32768, 131072, 1 << 20]
    rows = {r["metric"]: r for r in data["rows"]}
    assert rows["global KV per token"]["ratio_b_over_a"] == pytest.approx(890 / 3514.25)
    assert rows["decode FLOP/token @ 1M"]["b"] == pytest.approx(57.49e9, rel=0.001)
    result = runner.invoke(app, ["model", "compare", "deepseek-llm-67b", "deepseek-v4.1-flash"])
    assert result.exit_code == 0 and "beyond" in result.stdout


def test_list_json():
    names = [m["name"] for m in _json(["model", "list", "--json"])]
    assert names == [
        "deepseek-llm-67b",
        "deepseek-v3.2",
        "deepseek-v4-flash",
        "deepseek-v4-flash-0731",
        "deepseek-v4-flash-mini",
        "deepseek-v4.1-flash",
        "deepseek-v4.1-flash-mini",
        "qwen3-coder-30b-a3b",
    ]


def test_bad_input_raises_input_error():
    result = runner.invoke(app, ["model", "show", "gpt-5"])
    assert isinstance(result.exception, InputError)
    result = runner.invoke(app, ["model", "show", "deepseek-v4-flash", "--context", "lots"])
    assert isinstance(result.exception, InputError)


def test_unknown_model_exits_2_with_one_line():
    code = "import sys; from sim.cli import main; sys.argv = ['sim', 'model', 'show', 'nope']; main()"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown model (got 'nope'); allowed: deepseek-llm-67b" in lines[0]
    assert proc.stdout == ""
