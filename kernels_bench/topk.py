"""Top-k selection (k = 512 for the indexer, 2,048 for V4.1's block selection) by radix select.

The algorithm, written here in PyTorch so that it runs on the CPU at small shapes, is the one the Triton
kernels in ``topk_triton`` implement pass for pass:

1. map each fp32 score to an order-preserving 32-bit key;
2. histogram the top 8 bits (256 bins) and find the bin ``t1`` that holds the k-th largest key;
3. histogram the next 8 bits among keys whose top byte is ``t1`` and find ``t2``;
4. keys above the 16-bit prefix (t1, t2) are selected outright; keys equal to it become candidates;
5. two more 8-bit levels over the (few) candidates give the exact k-th key ``T``; every candidate above
   ``T`` is selected, then the first ones equal to ``T`` fill the remaining slots.

The output is the set of k indices, unsorted (``torch.topk(..., sorted=False)`` semantics; ties broken
arbitrarily). Correctness is checked by comparing the selected values with ``torch.topk``'s values.
"""

from __future__ import annotations

import torch

RADIX_BITS = 8
RADIX_BINS = 1 << RADIX_BITS


def float_to_ordered_key(x: torch.Tensor) -> torch.Tensor:
    """fp32 -> int64 holding an unsigned 32-bit key with the same order as the floats."""
    u = x.float().contiguous().view(torch.int32).long() & 0xFFFFFFFF
    neg = (u >> 31) != 0
    return torch.where(neg, (~u) & 0xFFFFFFFF, u | 0x80000000)


def _threshold_bin(hist: torch.Tensor, k: torch.Tensor):
    """Per row: the bin t holding the k-th largest key, and how many keys lie in bins above t.

    hist [R, 256] int64, k [R] int64 (1 <= k <= hist.sum(1)).
    """
    ge = hist.flip(1).cumsum(1).flip(1)  # keys in bins >= b
    bins = torch.arange(hist.shape[1], device=hist.device)
    t = torch.where(ge >= k[:, None], bins, -1).amax(dim=1)
    above = ge.gather(1, t[:, None]).squeeze(1) - hist.gather(1, t[:, None]).squeeze(1)
    return t, above


def _level_hist(digits: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
    r = digits.shape[0]
    flat = (digits + torch.arange(r, device=digits.device)[:, None] * RADIX_BINS)[active]
    return torch.bincount(flat, minlength=r * RADIX_BINS).reshape(r, RADIX_BINS)


def radix_topk(x: torch.Tensor, k: int) -> torch.Tensor:
    """Indices [R, k] (int64, unsorted) of the k largest values of each row of x [R, N]."""
    r, n = x.shape
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= N, got k={k}, N={n}")
    key = float_to_ordered_key(x)
    need = torch.full((r,), k, dtype=torch.int64, device=x.device)
    selected = torch.zeros_like(key, dtype=torch.bool)
    active = torch.ones_like(selected)  # keys still matching the prefix found so far
    for shift in (24, 16, 8, 0):
        digit = (key >> shift) & (RADIX_BINS - 1)
        t, above = _threshold_bin(_level_hist(digit, active), need)
        selected |= active & (digit > t[:, None])
        active &= digit == t[:, None]
        need = need - above
    # ``active`` now marks keys equal to the k-th key; take the first ``need`` of them in index order.
    rank = active.long().cumsum(dim=1)
    selected |= active & (rank <= need[:, None])
    return selected.nonzero()[:, 1].reshape(r, k)


def topk_values_match(x: torch.Tensor, idx: torch.Tensor, k: int) -> bool:
    """True when ``idx`` holds k distinct positions whose values are exactly torch.topk's values."""
    if idx.shape != (x.shape[0], k):
        return False
    srt = idx.long().sort(dim=1).values
    if (srt[:, 1:] == srt[:, :-1]).any() or (srt < 0).any() or (srt >= x.shape[1]).any():
        return False
    got = x.gather(1, idx.long()).sort(dim=1).values
    ref = torch.topk(x, k, dim=1, sorted=True).values.flip(1)
    return bool(torch.equal(got, ref))
