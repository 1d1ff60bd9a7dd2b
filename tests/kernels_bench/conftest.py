"""kernels_bench tests: CPU tests run everywhere; ``@pytest.mark.gpu`` tests need CUDA and Triton."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def _gpu_ready() -> bool:
    if not torch.cuda.is_available():
        return False
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def pytest_collection_modifyitems(config, items):
    if _gpu_ready():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU and Triton (kernels_bench; README, Kernels)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
