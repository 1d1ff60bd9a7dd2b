"""Isolate the eager path's ``CUDA error: misaligned address`` (GPU; device call 10 hit it on the first eager
step of the served model's check, reported at a later ``scatter_add``).

    CUDA_LAUNCH_BLOCKING=1 python3 -m kernels_bench.serve.eager_probe --variant exact|widths [--steps N]

Runs the first ``--steps`` steps of ``bench.check_schedule`` (real shapes, 8 routed experts, production
kernels) without CUDA graphs, one process per variant (a CUDA fault poisons the context):

- ``exact``: the eager layout as ``ServedModel.step`` builds it (indexer keys and HCA entries sized to the
  step's largest visible count);
- ``widths``: the same rows, but with the widths a graph uses (keys and HCA entries of the step's 8K context
  bucket, block tables as wide), no padding rows: passes if the eager fault is in those widths.

``--compare-graph`` then runs the same steps graphed and prints the relative difference of the logits.
Found (engine14 call 5, H200): the fault was the Triton indexer (``index_logits_paged``) at step 5, the first
step whose key count (650) was not a multiple of 64; the ``widths`` layout passed all 6 steps, and
compute-sanitizer's memcheck found nothing in step 0. ``ServeGpu.index_logits_paged`` now scores a multiple
of 64 keys.

Every kernel-backend call is synchronised and named, so the first one that faults is printed with its
argument shapes (``FAULT <op> ...``); ``OK`` when every step ran. Exit status 0 either way (a finding, not
a test); 2 when CUDA is missing.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from dataclasses import replace

import torch

OPS = ("quant", "gemm", "grouped", "quant_rows", "index_logits_paged", "attend_decode")


def _describe(args) -> str:
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(f"{tuple(a.shape)}:{a.dtype}:stride{tuple(a.stride())}:ptr%16={a.data_ptr() % 16}")
        elif isinstance(a, tuple) and a and isinstance(a[0], torch.Tensor):
            out.append("(" + ", ".join(_describe([t]) for t in a) + ")")
        else:
            out.append(type(a).__name__)
    return " ".join(out)


def instrument(kernels) -> None:
    """Wrap each backend op: synchronise after it, so a fault is raised by the op that caused it."""
    for name in OPS:
        fn = getattr(kernels, name)

        def wrapped(*args, _fn=fn, _name=name, **kw):
            try:
                out = _fn(*args, **kw)
                torch.cuda.synchronize()
            except Exception as e:
                print(f"FAULT {_name}: {type(e).__name__}: {str(e).splitlines()[0]}", flush=True)
                print(f"  args {_describe(args)}", flush=True)
                raise
            return out

        setattr(kernels, name, wrapped)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="kernels_bench.serve.eager_probe", description=__doc__.splitlines()[0])
    ap.add_argument("--variant", choices=("exact", "widths"), default="exact")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument(
        "--compare-graph",
        action="store_true",
        help="also run the steps graphed; print the logits' difference",
    )
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: CUDA is not available", file=sys.stderr)
        return 2
    from kernels_bench.production import forward as fw
    from kernels_bench.serve import bench
    from kernels_bench.serve import model as sm
    from kernels_bench.serve.kernels import ServeGpu
    from kernels_bench.serve.step_api import StepPlan

    cfg = replace(sm.ServeConfig(), dims=replace(fw.Dims(), experts=8))
    steps, _ = bench.check_schedule(cfg.vocab)
    k = ServeGpu()
    instrument(k)
    model = sm.ServedModel(cfg, k, 80, "cuda", graphs=False)
    eager_logits = []
    for i, (dec, pre) in enumerate(steps[: args.steps]):
        works = list(dec) + list(pre)
        n = sum(w.new_tokens for w in works)
        try:
            if args.variant == "exact":
                st = model._rows(works)
            else:
                ctx = max(w.end_tokens for w in works)
                cb = -(-ctx // sm.CONTEXT_BUCKET_TOKENS) * sm.CONTEXT_BUCKET_TOKENS
                st = model._rows(works, n_pad=n, nb_pad=cb // cfg.block_tokens, seq_pad=len(works))
            print(f"step {i}: rows {n}, n_keys {st.n_keys}, hca_width {st.hca_width}, bt {tuple(st.bt.shape)}",
                  flush=True)  # fmt: skip
            eager_logits.append(model.forward(st).float())
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 - the finding is printed
            print(f"step {i} of {StepPlan.__name__}s failed:", flush=True)
            traceback.print_exc(limit=-6, file=sys.stdout)
            return 0
    print(f"OK: {len(eager_logits)} eager steps ({args.variant})", flush=True)
    if args.compare_graph:
        graphed = sm.ServedModel(cfg, ServeGpu(), 80, "cuda", graphs=True)
        for i, (dec, pre) in enumerate(steps[: args.steps]):
            g = graphed.step(StepPlan(tuple(dec), tuple(pre))).float()
            e = eager_logits[i]
            rel = ((g - e).norm() / e.norm()).item()
            print(f"step {i}: eager vs graph logits rel {rel:.4f}, argmax equal "
                  f"{(g.argmax(-1) == e.argmax(-1)).float().mean().item():.2f}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
