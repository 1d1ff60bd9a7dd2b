"""Production kernels (what SGLang / vLLM run on Hopper), checked and timed beside kernels_bench's own.

Third-party packages are never vendored: each adapter imports its package when it is installed and, when
it is not, raises ``MissingPackage`` saying what to install. Packages (kernels.md §9a):

* ``flash_mla`` from ``sgl-flash-mla==1.0.0`` (SGLang's FlashMLA build; its legacy extension holds the SM90
  sparse decode / prefill kernels and the V3.2 and V4 "MODEL1" KV formats);
* ``tile_kernels`` from ``tile-kernels==2.1.0`` on ``tilelang==0.1.15`` (+ apache-tvm-ffi 0.1.12,
  torch-c-dlpack-ext 0.1.5, z3-solver 4.15.4): DeepSeek's TileLang mHC kernels;
* ``deep_gemm``: DeepGEMM built from source (commit 54e2261, ``build_deepgemm.sh``; the prebuilt
  sgl-deep-gemm wheel does not load on torch 2.11, kernels.md §9a): the lightning indexer's MQA logits,
  the FP8 grouped and dense GEMMs and the mHC pre-norm GEMM (``deepgemm.py``).

``python3 -m kernels_bench.production.run --out DIR`` checks every kernel against the project's reference
and times it (tables in ``hwprofiles/h200/production_results.*`` and ``forward_pass_results.csv``).
"""

from __future__ import annotations

import importlib
import importlib.metadata

# import name -> (distribution, pinned version, what to pip install)
PACKAGES: dict[str, tuple[str, str, str]] = {
    "flash_mla": ("sgl-flash-mla", "1.0.0", "pip install --no-deps sgl-flash-mla==1.0.0"),
    "tile_kernels": (
        "tile-kernels",
        "2.1.0",
        "pip install --no-deps tile-kernels==2.1.0 tilelang==0.1.15 apache-tvm-ffi==0.1.12 "
        "torch-c-dlpack-ext==0.1.5 z3-solver==4.15.4",
    ),
    "deep_gemm": (
        "deep-gemm",
        "2.6.1",
        "DG_SRC=.deepgemm/src.tar.gz bash kernels_bench/production/build_deepgemm.sh "
        "(then PYTHONPATH=/tmp/dg/DeepGEMM)",
    ),
}


class MissingPackage(RuntimeError):
    """A production package is not installed (the message says what to install)."""


def require(name: str):
    """Import production package ``name`` or raise ``MissingPackage`` with the install command."""
    dist, version, cmd = PACKAGES[name]
    try:
        return importlib.import_module(name)
    except Exception as e:  # noqa: BLE001 - ImportError or a library that fails to load
        raise MissingPackage(
            f"{name} ({dist}=={version}) is not usable: {type(e).__name__}: {e}. Install it with: {cmd}"
        ) from e


def package_version(name: str) -> str:
    """Installed version of the distribution behind import ``name`` ('' when absent)."""
    dist = PACKAGES[name][0]
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        mod = None
        try:
            mod = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - absent or broken: no version
            return ""
        return str(getattr(mod, "__version__", ""))
