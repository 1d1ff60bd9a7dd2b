"""NVIDIA AIConfigurator's measured operator tables, found where the user installed them (an optional
dependency: `pip install ".[aic]"`), for the scripts that extract what sim reads. The extracts are committed,
each with its source and license in its header (`hwprofiles/engine_modules/`): the V4-Flash prefill attention
modules the engine glue is fitted on (`kernels_bench.aic_compare modules`, sim.timing.engine_glue), the engines'
GEMMs, MoE layers and mHC of the `aic` kernel stack (`kernels_bench.aic_operators`, sim.timing.aic) and SGLang's
MoE modules (`kernels_bench.aic_sglang_moe`, sim.timing.engine_moe).

AIConfigurator (Apache-2.0) ships per-operator latencies measured on real GPUs under
`aiconfigurator_core/systems/data/<system>/<op>/<backend>/<version>/*.parquet`
(published_2026-12.md §6). This module only locates that folder and says which package version it
belongs to; the readers that map its tables to sim's operations live with their users
(kernels_bench.aic_compare, sim.timing.aic).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from sim.errors import InputError

ENV_VAR = "SIM_AIC_DATA"
INSTALL_HINT = (
    'install it with pip install ".[aic]" (aiconfigurator 0.12.0 from the package index) or point '
    f"{ENV_VAR} at its aiconfigurator_core/systems/data folder"
)
LICENSE = "Apache-2.0"
# sim's GPU key -> AIConfigurator's system folder
SYSTEMS = {"b200": "b200_sxm", "h200": "h200_sxm", "h100": "h100_sxm", "gb200": "gb200", "b300": "b300_sxm"}


@dataclass(frozen=True)
class AicData:
    """Where AIConfigurator's tables are and which release they came with."""

    root: Path  # .../aiconfigurator_core/systems/data
    version: str
    license: str = LICENSE

    def system(self, gpu_key: str) -> Path | None:
        name = SYSTEMS.get(gpu_key)
        path = self.root / name if name else None
        return path if path is not None and path.is_dir() else None

    def describe(self) -> str:
        return f"aiconfigurator {self.version} ({self.license}), aiconfigurator_core/systems/data"


def _version(root: Path) -> str:
    """The release of the package the data folder sits in (its dist-info beside the package)."""
    site = root.parent.parent.parent  # data -> systems -> aiconfigurator_core -> site-packages
    for info in sorted(site.glob("aiconfigurator_core-*.dist-info")) + sorted(
        site.glob("aiconfigurator-*.dist-info")
    ):
        return info.name.removesuffix(".dist-info").split("-")[1]
    return "unknown"


def find_aic(explicit: str | Path | None = None, *, needed_by: str = "--aic-data") -> AicData:
    """The data folder from `explicit`, else $SIM_AIC_DATA, else the installed aiconfigurator_core; one
    InputError naming how to install it when none is found (`needed_by`: what asked for it)."""
    raw = explicit or os.environ.get(ENV_VAR)
    if raw:
        root = Path(raw).expanduser()
        if not root.is_dir():
            where = "--aic-data" if explicit else ENV_VAR
            raise InputError(
                f"AIConfigurator data folder not found; {INSTALL_HINT}", where=where, value=str(root)
            )
        return AicData(root=root, version=_version(root))
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        raise InputError(f"AIConfigurator is not installed; {INSTALL_HINT}", where=needed_by)
    root = Path(next(iter(spec.submodule_search_locations))) / "systems" / "data"
    if not root.is_dir():
        raise InputError(f"AIConfigurator has no systems/data folder; {INSTALL_HINT}", where="aiconfigurator_core",
                         value=str(root))  # fmt: skip
    return AicData(root=root, version=_version(root))
