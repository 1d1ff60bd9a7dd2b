"""Attention-side kernel micro-benchmarks for DeepSeek-V4-Flash / V4.1-Flash on one H200.

Standalone on the GPU machine: imports only torch, numpy, the standard library and (lazily) Triton.
Every Triton kernel has a PyTorch reference that runs on the CPU; ``python3 -m kernels_bench.run_all``
checks each kernel against its reference and times the grid of kernels.md §8, writing tidy tables with
provenance (see ``kernels_bench.report``).
"""

__all__ = ["have_triton"]


def have_triton() -> bool:
    """True when Triton imports (it does not on the CPU CI machine)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True
