"""Tidy result rows, provenance, and the JSON / CSV / markdown writers (standard library only).

One row per kernel × shape (the columns of ``COLUMNS``) so that a timing model can interpolate over batch,
context and chunk size. Fractions use the reference ceilings of kernels.md §1; the ceilings re-measured in
the same run are recorded in the provenance.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import os
import platform
import subprocess
from collections.abc import Iterable
from pathlib import Path

from kernels_bench.columns import KERNEL_COLUMNS, names, row
from kernels_bench.shapes import BF16_TFLOPS, FP8_TFLOPS, HBM_GBPS

COLUMNS = list(names(KERNEL_COLUMNS))  # kernels_bench.columns: shared with the reader


def make_row(**kw) -> dict:
    """A row with every column present; derived rates and fractions filled from time, FLOPs and bytes."""
    out = row(KERNEL_COLUMNS, **kw)
    med = out["median_us"]
    if isinstance(med, (int, float)) and med > 0:
        flops = float(out["flops"] or 0.0)
        nbytes = float(out["bytes"] or 0.0)
        peak = float(out["compute_ceiling_TFLOPs"] or BF16_TFLOPS)
        out["compute_ceiling_TFLOPs"] = peak
        out["achieved_TFLOPs"] = flops / med / 1e6
        out["achieved_GBps"] = nbytes / med / 1e3
        out["frac_hbm"] = out["achieved_GBps"] / HBM_GBPS
        out["frac_compute"] = out["achieved_TFLOPs"] / peak
        floor = out["floor_us"] or max(nbytes / (HBM_GBPS * 1e3), flops / (peak * 1e6))
        out["floor_us"] = floor
        out["frac_of_ceiling"] = floor / med
    return out


def _cmd(args: list[str]) -> str:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def git_commit(explicit: str | None = None) -> str:
    """Commit passed in (the device copy may lack .git), else $KB_COMMIT, else git rev-parse, else 'unknown'."""
    if explicit:
        return explicit
    env = os.environ.get("KB_COMMIT", "")
    if env:
        return env
    here = Path(__file__).resolve().parent
    out = _cmd(["git", "-C", str(here), "rev-parse", "HEAD"])
    if out:
        dirty = _cmd(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"])
        return out + ("+dirty" if dirty else "")
    return "unknown"


def provenance(commit: str | None = None) -> dict:
    """GPU, driver, CUDA, torch, Triton, commit, date (UTC) and host facts of this run."""
    import torch

    prov = {
        "date_utc": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": git_commit(commit),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda or "",
        "hostname": platform.node(),
        "reference_ceilings": {"hbm_GBps": HBM_GBPS, "bf16_TFLOPs": BF16_TFLOPS, "fp8_TFLOPs": FP8_TFLOPS},
    }
    try:
        import triton

        prov["triton"] = triton.__version__
    except ImportError:
        prov["triton"] = ""
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        prov.update(
            gpu_name=torch.cuda.get_device_name(0),
            compute_capability=f"{p.major}.{p.minor}",
            sm_count=p.multi_processor_count,
            gpu_memory_bytes=p.total_memory,
            l2_cache_bytes=getattr(p, "L2_cache_size", 0),
        )
        smi = _cmd(
            ["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,clocks.max.mem", "--format=csv,noheader"]
        )
        prov["nvidia_smi"] = smi
        prov["driver"] = smi.split(",")[0].strip() if smi else ""
    return prov


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def write_csv(path: Path, rows: Iterable[dict], prov: dict, columns: list[str] | None = None) -> None:
    """``# key: value`` provenance lines, then the rows (``columns`` defaults to ``COLUMNS``)."""
    cols = columns or COLUMNS
    buf = io.StringIO()
    for key, val in prov.items():
        buf.write(f"# {key}: {json.dumps(val) if isinstance(val, dict) else val}\n")
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({c: _fmt(r.get(c, "")) for c in cols})
    atomic_write(path, buf.getvalue())


def write_json(path: Path, rows: list[dict], prov: dict, extra: dict | None = None) -> None:
    doc = {"provenance": prov, "columns": COLUMNS, "rows": rows}
    if extra:
        doc.update(extra)
    atomic_write(path, json.dumps(doc, indent=1, default=str) + "\n")


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def markdown_table(headers: list[str], rows: list[list]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for r in rows:
        out.append("| " + " | ".join(_fmt(v) if not isinstance(v, float) else f"{v:.4g}" for v in r) + " |")
    return "\n".join(out)


def rows_markdown(rows: list[dict]) -> str:
    cols = [
        "family",
        "kernel",
        "model",
        "layer_kind",
        "fmt",
        "batch",
        "context_tokens",
        "chunk_tokens",
        "rows",
        "n",
        "median_us",
        "achieved_TFLOPs",
        "achieved_GBps",
        "frac_of_ceiling",
        "check_passed",
    ]
    return markdown_table(cols, [[r.get(c, "") for c in cols] for r in rows])


def results_markdown(rows: list[dict], provs: list[dict], title: str = "kernels_bench") -> str:
    """results.md: the provenance of each run that contributed rows, the target table, all rows."""
    from kernels_bench.targets import targets_markdown

    md = [f"# {title} results", ""]
    for i, prov in enumerate(provs):
        title = "## Provenance" if len(provs) == 1 else f"## Provenance of run {i + 1} (`{run_tag(prov)}`)"
        table = [[k, json.dumps(v) if isinstance(v, (dict, list)) else v] for k, v in prov.items()]
        md += [title, "", markdown_table(["key", "value"], table), ""]
    md += [
        "## Targets and anchors",
        "",
        targets_markdown(rows),
        "",
        "## All rows",
        "",
        rows_markdown(rows),
        "",
    ]
    return "\n".join(md)


def run_tag(prov: dict) -> str:
    """Short identity of a run: its UTC date and commit."""
    return f"{prov.get('date_utc', '?')} {prov.get('commit', '?')}"
