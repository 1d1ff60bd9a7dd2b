"""`sim model list | show | compare`: the model specs and their arithmetic (sim.model, model.md)."""

from __future__ import annotations

import json
import re

import typer
from rich.console import Console
from rich.table import Table

from sim.config.families import model_family
from sim.errors import InputError

model_app = typer.Typer(
    help="Model specs and arithmetic: KV bytes, weights, FLOPs (numbers from shared/reference/model.md).",
    no_args_is_help=True,
)

_CONTEXT_HELP = "context length in tokens; K / M suffixes are powers of two (128K = 131072, 1M = 1048576)"


def register(app: typer.Typer) -> None:
    """Add the `sim model` group to the top-level app."""
    app.add_typer(model_app, name="model")


def parse_tokens(text: str) -> int:
    """'131072', '128K' or '1M' -> tokens (K = 1024, M = 1024^2, as model.md counts contexts)."""
    m = re.fullmatch(r"\s*(\d+)\s*([kKmM]?)\s*", text)
    if not m:
        raise InputError(
            "not a token count", where="--context", value=text, allowed="an integer, or with K / M"
        )
    scale = {"": 1, "k": 1024, "m": 1024 * 1024}[m.group(2).lower()]
    return int(m.group(1)) * scale


def _console() -> Console:
    """Tables need ~110 columns; a narrower (or piped, 80-column) terminal gets 110 rather than truncated cells."""
    width = Console().width
    return Console(highlight=False, width=max(width, 110))


def _bytes(x: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:,.2f} {unit}"
    return f"{x:,.2f} B"


def _flops(x: float) -> str:
    return f"{x / 1e12:,.1f} TFLOP" if abs(x) >= 1e13 else f"{x / 1e9:,.2f} GFLOP"


def _params(x: float) -> str:
    return f"{x / 1e9:,.2f} B"


_FORMAT = {"B": _bytes, "B/token": lambda x: f"{x:,.2f} B", "FLOP": _flops, "params": _params}


@model_app.command("list")
def list_models(json_output: bool = typer.Option(False, "--json", help="print only JSON on stdout")) -> None:
    """List the models with a spec."""
    from sim.model import global_kv_bytes_per_token, load_model, model_names

    specs = [load_model(n) for n in model_names()]
    rows = [
        {
            "name": s.name,
            "display_name": s.display_name,
            "reference_only": s.reference_only,
            "layers": s.n_layers,
            "global_kv_bytes_per_token": global_kv_bytes_per_token(s),
            "prefill_modes": list(s.prefill_modes),
        }
        for s in specs
    ]
    if json_output:
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table("name", "model", "layers", "KV B/token", "prefill modes", title="models")
    for r in rows:
        ref = " (reference)" if r["reference_only"] and "reference" not in r["display_name"] else ""
        table.add_row(
            r["name"],
            r["display_name"] + ref,
            str(r["layers"]),
            f"{r['global_kv_bytes_per_token']:,.2f}",
            ", ".join(r["prefill_modes"]),
        )
    _console().print(table)


@model_app.command("show")
def show(
    name: str = typer.Argument(..., help="model name (see `sim model list`)"),
    context: str = typer.Option("128K", "--context", help=_CONTEXT_HELP),
    layout: str | None = typer.Option(
        None, "--layout", help="KV byte layout (default: the model's native one)"
    ),
    json_output: bool = typer.Option(False, "--json", help="print only JSON on stdout"),
) -> None:
    """Per-layer table and totals of one model: KV, SWA, weights, active params, decode and prefill cost."""
    from sim.model import load_model
    from sim.model.summary import model_summary

    tokens = parse_tokens(context)
    spec = load_model(name)
    summary = {**model_summary(spec, tokens, layout), "acceptance": _acceptance(spec)}
    if json_output:
        typer.echo(json.dumps(summary, indent=2))
        return
    console = _console()
    console.print(f"[bold]{summary['display_name']}[/] ({summary['model']}): {summary['notes']}")
    console.print(_layer_table(summary))
    console.print(_totals_table(summary))
    console.print(_context_table(summary))
    if summary["acceptance"]:
        console.print(_acceptance_table(summary))


def _acceptance(spec) -> list[dict]:
    """The measured acceptance curve of the model's drafter (sim.model.acceptance), for every workload kind."""
    from dataclasses import asdict

    from sim.config.families import servable_models
    from sim.model.acceptance import curve

    if spec.drafter is None or spec.name not in servable_models():
        return []
    return [asdict(p) for p in curve(model_family(spec.name), spec.drafter.kind)]


def _acceptance_table(s: dict) -> Table:
    t = Table(
        title="speculative decoding: measured accepted tokens per verify step (sim/model/acceptance.yaml)"
    )
    for col in ("drafter", "workload", "draft tokens", "accepted", "measured on", "source"):
        t.add_column(col, justify="right" if col in ("draft tokens", "accepted") else "left", overflow="fold")
    for p in s["acceptance"]:
        t.add_row(p["drafter"], p["workload"], str(p["draft_tokens"]), f"{p['accepted']:.2f}", p["measured_on"],
                  f"[{p['tag']}] {p['source']}")  # fmt: skip
    return t


_SOURCES = (("kv", "kv_source"), ("idx", "index_source"), ("sel", "selection_source"))


def _layer_runs(layers: list[dict]) -> list[tuple[str, dict]]:
    """Consecutive layers alike apart from their index (a source equal to the layer itself reads "self")
    collapse into one row ("3-7")."""
    runs: list[tuple[list[int], dict]] = []
    for row in layers:
        key = {k: ("self" if k.endswith("_source") and v == row["index"] else v) for k, v in row.items()}
        del key["index"]
        if runs and runs[-1][1] == key and runs[-1][0][-1] == row["index"] - 1:
            runs[-1][0].append(row["index"])
        else:
            runs.append(([row["index"]], key))
    return [(str(i[0]) if len(i) == 1 else f"{i[0]}-{i[-1]}", r) for i, r in runs]


def _layer_table(s: dict) -> Table:
    ctx = s["at_context"]["context_tokens"]
    t = Table(title=f"layers (KV layout {s['layout']}; keys attended at L = {ctx:,})")
    for col in ("layer", "half", "attention", "win", "top-k", "select", "reads from", "MLP"):
        t.add_column(col)
    for col in ("B/tok", "keys@L"):
        t.add_column(col, justify="right")
    for layers, r in _layer_runs(s["layers"]):
        sources = [f"{k} L{r[f]}" for k, f in _SOURCES if r[f] not in (None, "self")]
        t.add_row(
            layers,
            r["half"][:3] or "-",
            r["attention"] + (f"/{r['ratio']}" if r["ratio"] else ""),
            str(r["window_tokens"] or "-"),
            str(r["top_k"] or ("all" if r["ratio"] else "-")),
            r["selection"] if r["selection"] != "none" else "-",
            ", ".join(sources) or "-",
            r["mlp"] + ("+engram" if r["engram"] else ""),
            f"{r['main_bytes_per_token'] + r['index_bytes_per_token']:g}",
            f"{r['keys_attended']:,}",
        )
    return t


def _totals_table(s: dict) -> Table:
    t = Table("quantity", "value", "note", title="totals")
    kv = s["global_kv_bytes_per_token_by_component"]
    pub = s["published"]
    t.add_row(
        "global KV per token",
        f"{s['global_kv_bytes_per_token']:,.2f} B",
        f"main {kv['main']:,.2f} + index {kv['index']:,.2f}; "
        + ", ".join(f"{n} {v:,.2f}" for n, v in s["global_kv_bytes_per_token_by_layout"].items()),
    )
    t.add_row("SWA rings per sequence", _bytes(s["swa_bytes_per_sequence"]), "fixed per sequence")
    t.add_row(
        "compressor state per sequence",
        _bytes(s["compressor_state_bytes_per_sequence"]),
        "FP32 partial groups",
    )
    note = f"published {_bytes(pub['weights_bytes'])}" if "weights_bytes" in pub else "no published figure"
    t.add_row("weights on disk", _bytes(s["weights_bytes"]), note)
    for group, v in s["weights_bytes_by_group"].items():
        t.add_row(f"  {group}", _bytes(v), "")
    t.add_row("  by dtype", "", ", ".join(f"{d} {_bytes(v)}" for d, v in s["weights_bytes_by_dtype"].items()))
    t.add_row("total params", _params(s["total_params"]), "drafter, Engram tables and vision included")
    t.add_row("active params, decode", _params(s["active_params_decode"]), "LM head included")
    t.add_row(
        "active params, prefill",
        _params(s["active_params_prefill"]),
        ", ".join(f"{m} {_params(v)}" for m, v in s["active_params_prefill_by_mode"].items())
        + "; no LM head",
    )
    t.add_row(
        "decode weight bytes, batch 1", _bytes(s["decode_weight_bytes_batch_1"]), "routed: top-k experts"
    )
    side = s["side"]
    if side["engram_gather_bytes_per_token"]:
        t.add_row(
            "Engram gather per token", _bytes(side["engram_gather_bytes_per_token"]), "random row reads"
        )
    if side["draft_step_flops"]:
        t.add_row("draft step", _flops(side["draft_step_flops"]), "drafting a block; verify is a decode")
        t.add_row("draft row", _flops(side["draft_row_flops"]), "per row the target runs: prompt, verify")
    if side["vision_flops_per_max_image"]:
        t.add_row(
            "vision, max-size image", _flops(side["vision_flops_per_max_image"]), "plus its backbone tokens"
        )
    return t


def _context_table(s: dict) -> Table:
    c = s["at_context"]
    beyond = " (beyond the model's context)" if c["beyond_max_context"] else ""
    t = Table("quantity", "value", "note", title=f"at context {c['context_tokens']:,} tokens{beyond}")
    d = c["decode"]
    t.add_row(
        "decode FLOP per token",
        _flops(d["total_flops"]),
        f"dense {_flops(d['dense_flops'])}, attention {_flops(d['attention_flops'])}, index {_flops(d['index_flops'])}",
    )
    if "decode_reindex_full_range" in c:
        t.add_row(
            "  if Reindex scores the full range", _flops(c["decode_reindex_full_range"]["total_flops"]), ""
        )
    t.add_row(
        "decode KV read per step",
        _bytes(d["kv_read_bytes"]),
        f"SWA {_bytes(d['swa_read_bytes'])}, compressed {_bytes(d['compressed_read_bytes'])}, "
        f"index {_bytes(d['index_read_bytes'])}",
    )
    for mode, p in c["prefill"].items():
        per_token = p["total_flops"] / max(c["context_tokens"], 1)
        t.add_row(
            f"prefill ({mode}), cold prompt",
            _flops(p["total_flops"]),
            f"{_flops(per_token)} per prompt token",
        )
    for policy, v in c["session_bytes"].items():
        t.add_row(f"session bytes, {policy}", _bytes(v), "")
    return t


@model_app.command("compare")
def compare(
    a: str = typer.Argument(..., help="first model"),
    b: str = typer.Argument(..., help="second model; ratios are B / A"),
    context: str | None = typer.Option(None, "--context", help=_CONTEXT_HELP + "; added to 8K / 128K / 1M"),
    json_output: bool = typer.Option(False, "--json", help="print only JSON on stdout"),
) -> None:
    """Two models side by side with ratios: KV, SWA, weights, active params, decode and prefill cost."""
    from sim.model import load_model
    from sim.model.summary import COMPARE_CONTEXTS, compare_rows

    contexts = COMPARE_CONTEXTS
    if context is not None and parse_tokens(context) not in contexts:
        contexts = tuple(sorted((*contexts, parse_tokens(context))))
    spec_a, spec_b = load_model(a), load_model(b)
    rows = compare_rows(spec_a, spec_b, contexts)
    if json_output:
        typer.echo(json.dumps({"a": a, "b": b, "contexts": list(contexts), "rows": rows}, indent=2))
        return
    t = Table("metric", spec_a.display_name, spec_b.display_name, "B / A", title=f"{a} vs {b}")
    for r in rows:
        fmt = _FORMAT[r["unit"]]
        ratio = "-" if r["ratio_b_over_a"] is None else f"{r['ratio_b_over_a']:.3g}x"
        t.add_row(r["metric"], fmt(r["a"]), fmt(r["b"]), ratio)
    console = _console()
    console.print(t)
    beyond = [s.display_name for s in (spec_a, spec_b) if max(contexts) > s.max_context_tokens]
    if beyond:
        console.print(f"note: contexts beyond {', '.join(beyond)}'s own limit are arithmetic only")
