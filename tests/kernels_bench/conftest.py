"""kernels_bench tests need torch (the CPU tests run everywhere); the `gpu` marker's skip without CUDA
and Triton is shared by every folder (tests/conftest.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
