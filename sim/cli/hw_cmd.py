"""`sim hw`: list the hardware profiles, show one with the source of every number, API prices."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sim.hardware import (
    DTYPES,
    HwProfile,
    Sourced,
    api_price_table,
    load_all_hw,
    load_hw,
    node_cost,
)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON only.")]

hw_app = typer.Typer(
    help="Hardware profiles (hwprofiles/*.yaml): specs, sources, prices.", no_args_is_help=True
)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the top-level app."""
    app.add_typer(hw_app, name="hw")


def _console() -> Console:
    """A console that never truncates: piped output gets a wide page instead of 80 columns."""
    console = Console()
    return console if console.is_terminal else Console(width=220)


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return escape(str(value))


def _default_price(hw: HwProfile) -> tuple[str | None, float | None]:
    """(term, $/GPU-hour) on the profile's default term; (None, None) when it lists no price."""
    term = hw.pricing.default_term
    if term is None:
        return None, None
    return term, node_cost(hw, term).total_usd_per_hour / hw.gpus_per_node


def _list_row(hw: HwProfile) -> dict:
    term, usd = _default_price(hw)
    return {
        "id": hw.id,
        "gpu": hw.gpu,
        "gpus_per_node": hw.gpus_per_node,
        "hbm_capacity_gb": hw.accelerator.hbm_capacity_gb.value,
        "hbm_bw_TBps": hw.accelerator.hbm_bw_TBps.value,
        **{f"{d}_tflops": hw.peak_tflops(d) for d in DTYPES},
        "default_term": term,
        "usd_per_gpu_hour": usd,
    }


@hw_app.command("list")
def list_cmd(as_json: JsonFlag = False) -> None:
    """One line per profile: GPU, memory, dense peak TFLOPS and the price on its default term."""
    rows = [_list_row(hw) for hw in load_all_hw()]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table(title="Hardware profiles (dense peak; prices per GPU-hour on the default term)")
    for col in (
        "id",
        "GPU",
        "GPUs/node",
        "HBM GB",
        "HBM TB/s",
        "BF16 TF",
        "FP8 TF",
        "FP4 TF",
        "$/GPU-h",
        "term",
    ):
        table.add_column(col, justify="left" if col in ("id", "GPU", "term") else "right")
    for r in rows:
        usd = "—" if r["usd_per_gpu_hour"] is None else f"{r['usd_per_gpu_hour']:.2f}"
        table.add_row(
            r["id"],
            r["gpu"],
            _fmt(r["gpus_per_node"]),
            _fmt(r["hbm_capacity_gb"]),
            _fmt(r["hbm_bw_TBps"]),
            *(_fmt(r[f"{d}_tflops"]) for d in DTYPES),
            usd,
            r["default_term"] or "—",
        )
    _console().print(table)


def _field_rows(obj: Any, path: str = ""):
    """(path, value, Sourced or None) for every leaf field, in declaration order."""
    if isinstance(obj, Sourced):
        yield path, obj.value, obj
    elif isinstance(obj, BaseModel):
        for name, info in type(obj).model_fields.items():
            if name == "sources":
                continue
            key = info.alias or name
            yield from _field_rows(getattr(obj, name), f"{path}.{key}" if path else key)
    elif isinstance(obj, dict):
        for key, item in obj.items():
            yield from _field_rows(item, f"{path}.{key}")
    elif isinstance(obj, list):
        for i, item in enumerate(obj):
            yield from _field_rows(item, f"{path}[{i}]")
    else:
        yield path, obj, None


def _derived(hw: HwProfile) -> dict[str, float]:
    return {
        "gpus_per_node": hw.gpus_per_node,
        "hbm_capacity_bytes (per GPU)": hw.hbm_capacity_bytes,
        "hbm_bw_bytes_per_s (per GPU, peak)": hw.hbm_bw_bytes_per_s,
        **{f"peak_flops_per_s({d}) (per GPU)": hw.peak_tflops(d) and hw.peak_flops_per_s(d) for d in DTYPES},
        "scale_up_bw_per_gpu_bytes_per_s (one direction)": hw.scale_up_bw_per_gpu_bytes_per_s,
        "scale_out_bw_per_gpu_bytes_per_s (one direction)": hw.scale_out_bw_per_gpu_bytes_per_s,
        "scale_out_bw_per_node_bytes_per_s (one direction)": hw.scale_out_bw_per_node_bytes_per_s,
        "pcie_bw_per_gpu_bytes_per_s (one direction)": hw.pcie_bw_per_gpu_bytes_per_s,
        "host_dram_bytes (per node)": hw.host_dram_bytes,
        "host_dram_usable_for_kv_bytes (per node)": hw.host_dram_usable_for_kv_bytes,
        "dram_bw_bytes_per_s (per node)": hw.dram_bw_bytes_per_s,
        "ssd_capacity_bytes (per node, raw)": hw.ssd_capacity_bytes,
        "ssd_read_bytes_per_s (per node)": hw.ssd_read_bytes_per_s,
        "ssd_write_bytes_per_s (per node)": hw.ssd_write_bytes_per_s,
        "node_power_w (max)": hw.node_power_w,
    }


def _prices(hw: HwProfile) -> list[dict]:
    rows = []
    for term in hw.pricing.term_names():
        cost = node_cost(hw, term)
        rows.append(
            {
                "term": term,
                "kind": cost.kind,
                "usd_per_node_hour": cost.total_usd_per_hour,
                "usd_per_gpu_hour": cost.total_usd_per_hour / hw.gpus_per_node,
                "default": term == hw.pricing.default_term,
            }
        )
    return rows


@hw_app.command("show")
def show_cmd(
    name: Annotated[str, typer.Argument(help="Profile id (see `sim hw list`) or path to a profile YAML.")],
    as_json: JsonFlag = False,
) -> None:
    """Every field of a profile with its source id and estimate flag, derived SI values and prices."""
    hw = load_hw(name)
    if as_json:
        out = {
            "profile": hw.model_dump(mode="json", by_alias=True),
            "derived_si": _derived(hw),
            "prices": _prices(hw),
        }
        typer.echo(json.dumps(out, indent=2))
        return
    console = _console()
    console.print(f"[bold]{hw.display_name}[/]  id={hw.id}  as_of={hw.as_of}  status={hw.status}")
    for note in hw.notes:
        console.print(f"  • {escape(note)}")
    table = Table(title="Fields (units in the names; est = derived [C] or guessed [D])")
    for col in ("field", "value", "src", "est", "tag", "note"):
        table.add_column(col, overflow="fold")
    for path, value, item in _field_rows(hw):
        if path == "notes" or path.startswith("notes["):
            continue
        if item is None:
            table.add_row(path, _fmt(value), "", "", "", "")
        else:
            table.add_row(
                path,
                _fmt(value),
                ",".join(item.src),
                "est" if item.est else "",
                item.tag or "",
                escape(item.note),
            )
    console.print(table)
    derived = Table(title="Derived (SI units) — what the simulator reads")
    derived.add_column("accessor")
    derived.add_column("value", justify="right")
    for key, value in _derived(hw).items():
        derived.add_row(key, "—" if value is None else f"{value:.6g}")
    console.print(derived)
    prices = Table(
        title="Pricing terms (sim.hardware.pricing: rental = $/GPU-h x GPUs; capex = amortisation + "
        "support + energy at PUE)"
    )
    for col in ("term", "kind", "$/node-h", "$/GPU-h", "default"):
        prices.add_column(col)
    for r in _prices(hw):
        prices.add_row(
            r["term"],
            r["kind"],
            f"{r['usd_per_node_hour']:.2f}",
            f"{r['usd_per_gpu_hour']:.3f}",
            "*" if r["default"] else "",
        )
    console.print(prices)
    sources = Table(title="Sources (hardware.md §9)")
    for col in ("id", "url", "date", "note"):
        sources.add_column(col, overflow="fold")
    for sid, src in hw.sources.items():
        sources.add_row(sid, escape(src.url), escape(src.date), escape(src.note))
    console.print(sources)


@hw_app.command("api-prices")
def api_prices_cmd(as_json: JsonFlag = False) -> None:
    """Latest DeepSeek API list prices (USD per 1M tokens) for V4-Flash and V4.1-Flash."""
    rows = api_price_table()
    if as_json:
        typer.echo(json.dumps([r.__dict__ | {"src": list(r.src)} for r in rows], indent=2))
        return
    table = Table(title="DeepSeek API list prices, USD per 1M tokens (hardware.md §4)")
    for col in ("family", "api model", "tier", "from (UTC)", "cache hit", "cache miss", "output", "src"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r.family,
            r.api_model,
            r.tier,
            r.valid_from_utc,
            f"{r.cache_hit_usd_per_mtok:g}",
            f"{r.cache_miss_usd_per_mtok:g}",
            f"{r.output_usd_per_mtok:g}",
            ",".join(r.src),
        )
    _console().print(table)
