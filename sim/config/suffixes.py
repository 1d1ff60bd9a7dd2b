"""Unit suffixes of field names: what each one means, and how to split a name into stem + suffix.

The suffix carries the unit and its case matters (hardware.md §6 field notes): `_GBps` is
gigabytes/s, `_Gbps` gigabits/s, an 8x difference. Conversions live in `sim.units`; this module
only names the units so that error messages can say what a field expects.
"""

from __future__ import annotations

# Suffix -> unit in words. Longer suffixes first so that `_usd_per_gb` wins over `_gb`.
UNIT_SUFFIXES: dict[str, str] = {
    "_usd_per_gpu_hour": "US dollars per GPU-hour",
    "_usd_per_kwh": "US dollars per kWh",
    "_usd_per_gb": "US dollars per GB",
    "_usd_per_tb": "US dollars per TB",
    "_usd_per_mtok": "US dollars per million tokens",
    "_usd": "US dollars",
    "_GiBps": "gibibytes/s (2^30 bytes/s)",
    "_GBps": "gigabytes/s (1e9 bytes/s)",
    "_TBps": "terabytes/s (1e12 bytes/s)",
    "_Gbps": "gigabits/s (1e9 bits/s)",
    "_tflops": "TFLOP/s (1e12 FLOP/s)",
    "_bytes": "bytes",
    "_gb": "gigabytes (1e9 bytes)",
    "_tb": "terabytes (1e12 bytes)",
    "_MHz": "megahertz (1e6 cycles/s)",
    "_kw": "kilowatts",
    "_w": "watts",
    "_ms": "milliseconds",
    "_us": "microseconds",
    "_s": "seconds",
    "_years": "years",
    "_frac": "a fraction",
    "_x": "a multiple (times)",
    "_tokens": "tokens",
    "_gpus": "GPUs",
    "_nodes": "nodes",
}

# Suffix-like endings that are easy typos of a real one; recognised so that the error says
# "wrong unit" rather than just "unknown key".
_LOOKALIKES = (
    "_gbps",
    "_tbps",
    "_Tbps",
    "_GBs",
    "_TBs",
    "_GB",
    "_TB",
    "_Gb",
    "_Tb",
    "_MBps",
    "_Mbps",
    "_KB",
    "_kb",
    "_mb",
    "_MB",
    "_GiB",
    "_TiB",
    "_gib",
    "_tib",
    "_sec",
    "_secs",
    "_seconds",
    "_min",
    "_h",
    "_hours",
    "_pct",
    "_percent",
    "_tflop",
    "_TFLOPS",
    "_flops",
    "_W",
    "_kW",
    "_KW",
    "_bps",
    "_Bps",
)


def split_suffix(name: str) -> tuple[str, str | None]:
    """(pattern, suffix): the name with its unit token replaced by `*`, and that token.

    The unit is usually last (`hbm_bw_TBps`) but may sit before a qualifier (`nvme_read_GBps_each`),
    so a token is searched from the end; (name, None) when no known or look-alike unit is found.
    """
    for suffix in (*UNIT_SUFFIXES, *sorted(_LOOKALIKES, key=len, reverse=True)):
        if f"_{name}".endswith(suffix):  # the unit may be the whole name (`usd_per_kwh`)
            return name[: -len(suffix)] + "_*", suffix
    tokens = name.split("_")
    for i in range(len(tokens) - 1, 0, -1):
        token = "_" + tokens[i]
        if token in UNIT_SUFFIXES or token in _LOOKALIKES:
            return "_".join([*tokens[:i], "*", *tokens[i + 1 :]]), token
    return name, None


def unit_of(name: str) -> str | None:
    """The unit a field name promises, in words, or None when the name has no known unit suffix."""
    _, suffix = split_suffix(name)
    return UNIT_SUFFIXES.get(suffix) if suffix else None
