"""Roofline timing: a step takes max(compute, HBM traffic) + exposed communication + Engram
gathers + a fixed per-step overhead.

- compute = GEMM FLOPs / (GPUs x FP8 peak x MFU) + attention FLOPs / (GPUs x BF16 peak x MFU)
  (MFU: `mfu_prefill` for prefill rows, `mfu_decode` for decode rows);
- HBM traffic per GPU = dense weights / TP + routed experts touched / GPUs (EP ranks x expert
  TP) + KV read / DP, at `hbm_bw_frac` of the peak (the KV latent is replicated across
  attention-TP ranks, so each DP group's GPUs all read their sequences' KV, model.md §9);
- communication = EP all-to-all for every MoE layer plus TP all-reduces of the activations. The
  all-to-all is the pool's `moe_a2a` (`Parallelism.moe_a2a`): `link`, its bytes (dispatch FP8,
  combine BF16) over NVLink inside the scale-up domain and RDMA beyond it, of which
  `1 - comm_overlap_frac` is exposed; `deepep`, DeepEP's measured per-call times (hardware profile
  `scale_up.deepep`): low-latency kernels in decode steps, normal kernels in steps with prefill rows
  (SGLang's `--deepep-mode auto`), all exposed (two-batch overlap is off unless asked for:
  SGLang `--enable-two-batch-overlap`, default False); `megamoe`, none apart (DeepGEMM's Mega MoE
  fuses dispatch and combine into the expert kernel) [D];
- Engram (V4.1, tables in host DRAM): gathered rows per token over PCIe (model.md §6.3);
- speculative decoding: every decoding sequence verifies `verified_tokens_per_step` rows (its
  query rows: GEMM rows, attention FLOPs and communication scale with them; the KV is read once
  for all of them, kernels.md §3.2) and advances `accepted_tokens_per_step` tokens (scenario
  `spec_decode`); the drafter's FLOPs (its drafting per sequence and its pass over every row the
  target runs, prompt tokens included; model.md §6.3, docs/engines_and_validation.md section 33) run
  at the GEMM rate of the step's kind.

Decode spans have a closed form: within fixed membership the summed terms grow linearly per
step, so compute(k) and memory(k) are linear in k and the span is a sum of max(two lines).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mypy_extensions import mypyc_attr

from sim.timing.batch import DecodeTerms, PrefillChunk
from sim.timing.comm import (
    COMBINE_BYTES_PER_ELEM,
    DEEPEP_DEFAULT_NORMAL_SMS,
    DISPATCH_BYTES_PER_ELEM,
    DISPATCH_SCALE_BYTES_PER_ELEM,
    deepep_destination_ranks,
    deepep_normal_per_token_s,
    moe_alltoall_s,
    tp_allreduce_s,
)
from sim.timing.interp import QuadraticTable, chunk_parts
from sim.timing.sustained import PowerLimit


@dataclass(frozen=True)
class Efficiency:
    """Achievable fractions of the peaks and fixed costs (hardware profile `achievable` block,
    overridden by the scenario's `timing` block)."""

    mfu_prefill: float
    mfu_decode: float
    hbm_bw_frac: float
    scale_up_bw_frac: float
    scale_out_bw_frac: float
    pcie_bw_frac: float
    ssd_bw_frac: float
    step_overhead_s: float
    comm_overlap_frac: float


@dataclass(frozen=True)
class A2aCall:
    """One all-to-all kernel's measured time: `fixed_s` + `per_token_s` x the tokens of one rank."""

    fixed_s: float
    per_token_s: float

    def at(self, tokens_per_rank: float) -> float:
        return self.fixed_s + self.per_token_s * tokens_per_rank


@dataclass(frozen=True)
class DeepEpCosts:
    """DeepEP's dispatch and combine in its low-latency and normal kernels (hardware profile `scale_up.deepep`)."""

    ll_dispatch: A2aCall
    ll_combine: A2aCall
    normal_dispatch: A2aCall  # as measured: at `measured_ep_gpus` ranks, `measured_sms` SMs
    normal_combine: A2aCall
    measured_ep_gpus: int
    measured_sms: int
    dispatch_sm_frac: float  # of the normal per-token times, the share that goes as 1 / SMs
    combine_sm_frac: float

    def normal_at(
        self, *, ep: int, sms: int, hidden: int, experts: int, top_k: int, link_bw_bytes_per_s: float
    ) -> tuple[A2aCall, A2aCall]:
        """The normal dispatch and combine at `ep` ranks and `sms` SMs: the per-token parts scaled by the
        (token, rank) pairs and the SMs, floored by the remote bytes over the link (sim.timing.comm); the fixed
        parts as measured."""
        here = deepep_destination_ranks(ep, experts, top_k)
        ratio = here / deepep_destination_ranks(self.measured_ep_gpus, experts, top_k)
        remote = here * (ep - 1) / ep
        calls = []
        for call, share, bytes_per_token in (
            (self.normal_dispatch, self.dispatch_sm_frac, hidden * (DISPATCH_BYTES_PER_ELEM + DISPATCH_SCALE_BYTES_PER_ELEM)),
            (self.normal_combine, self.combine_sm_frac, hidden * COMBINE_BYTES_PER_ELEM),
        ):  # fmt: skip
            per_token = deepep_normal_per_token_s(
                call.per_token_s,
                sm_frac=share,
                measured_sms=self.measured_sms,
                sms=sms,
                destinations_ratio=ratio,
                link_floor_s=remote * bytes_per_token / link_bw_bytes_per_s,
            )
            calls.append(A2aCall(call.fixed_s, per_token))
        return calls[0], calls[1]


@dataclass(frozen=True)
class HwRates:
    """Peak per-GPU / per-node rates from the hardware profile, SI units."""

    gpus_per_node: int
    scale_up_domain_gpus: int
    fp8_flops_per_s: float  # per GPU
    bf16_flops_per_s: float  # per GPU
    hbm_bw_bytes_per_s: float  # per GPU
    scale_up_bw_bytes_per_s: float  # per GPU, one direction
    scale_up_latency_s: float
    allreduce_latency_s: float  # the TP all-reduce inside the scale-up domain (hardware profile scale_up)
    allreduce_bw_bytes_per_s: float  # measured bus bandwidth, one direction; 0: the link x scale_up_bw_frac
    scale_out_bw_per_gpu_bytes_per_s: float  # one direction
    scale_out_bw_per_node_bytes_per_s: float
    scale_out_latency_s: float
    pcie_bw_per_gpu_bytes_per_s: float  # one direction
    ssd_read_bytes_per_s: float  # per node
    ssd_write_bytes_per_s: float  # per node
    deepep: DeepEpCosts | None = None  # measured DeepEP kernels (None: not measured on this GPU)
    # the TP all-reduce in NCCL, which the engine takes above `allreduce_custom_max_bytes` (0 bw: not measured)
    allreduce_nccl_latency_s: float = 0.0
    allreduce_nccl_bw_bytes_per_s: float = 0.0
    # the largest message the engine's custom all-reduce takes (an engine rule, sim.config.engine_rules); inf:
    # the custom all-reduce's fit at every size
    allreduce_custom_max_bytes: float = math.inf


MOE_A2A = ("link", "deepep", "megamoe")  # how the EP ranks exchange tokens (module doc)


@dataclass(frozen=True)
class Parallelism:
    gpus: int
    tp: int
    ep: int
    dp: int
    moe_a2a: str = "link"  # one of MOE_A2A
    # SMs of DeepEP's normal kernels (SGLang --deepep-config)
    deepep_normal_sms: int = DEEPEP_DEFAULT_NORMAL_SMS


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled (sim/native.py); variants may extend it
class RooflineTiming:
    """`TimingModel` from model arithmetic (`sim.timing.arith.ModelArith`) and peak rates."""

    name = "roofline"

    def __init__(
        self,
        arith: Any,
        hw: HwRates,
        par: Parallelism,
        eff: Efficiency,
        *,
        accepted_tokens_per_step: float = 1.0,
        draft_tokens: int = 0,
        verify_rows: int = 0,
        engram_in_dram: bool = False,
        vision_on_instance: bool = True,
    ) -> None:
        rows = verify_rows if verify_rows else 1 + draft_tokens  # 0: every drafted token is verified
        if not 1 <= rows <= 1 + draft_tokens or not 1.0 <= accepted_tokens_per_step <= rows:
            raise ValueError(
                f"need 1 <= accepted tokens per step ({accepted_tokens_per_step}) <= verified rows ({rows})"
                f" <= 1 + draft tokens ({draft_tokens})"
            )
        self.arith = arith
        # how a step holding prefill chunks runs at the board's power limit (sim.timing.sustained); the
        # calibrated timing sets it where the profile has it measured
        self.power_limit: PowerLimit | None = None
        # the chunk cost tables, typed, for the compiled prefill path (ModelArith.prefill_parts)
        self._prefill_every: QuadraticTable = arith.prefill_every
        self._prefill_tail: QuadraticTable = arith.prefill_tail
        self.hw = hw
        self.par = par
        self.eff = eff
        self.accepted_tokens_per_step = float(accepted_tokens_per_step)
        self.verified_tokens_per_step = rows
        self.engram_in_dram = engram_in_dram
        self.vision_on_instance = vision_on_instance
        g = par.gpus
        # per-instance rates with efficiency applied
        self._dense_rate_decode = g * hw.fp8_flops_per_s * eff.mfu_decode
        self._attn_rate_decode = g * hw.bf16_flops_per_s * eff.mfu_decode
        self._dense_rate_prefill = g * hw.fp8_flops_per_s * eff.mfu_prefill
        self._attn_rate_prefill = g * hw.bf16_flops_per_s * eff.mfu_prefill
        self._hbm_rate = hw.hbm_bw_bytes_per_s * eff.hbm_bw_frac  # per GPU
        within_domain = g <= hw.scale_up_domain_gpus
        if within_domain:
            self._comm_bw = hw.scale_up_bw_bytes_per_s * eff.scale_up_bw_frac
            self._comm_lat = hw.scale_up_latency_s
            self._ar_bw = hw.allreduce_bw_bytes_per_s or self._comm_bw
            self._ar_lat = hw.allreduce_latency_s
            nccl = hw.allreduce_nccl_bw_bytes_per_s > 0.0
            self._ar_max_bytes = hw.allreduce_custom_max_bytes if nccl else math.inf
            self._nccl_bw = hw.allreduce_nccl_bw_bytes_per_s if nccl else self._ar_bw
            self._nccl_lat = hw.allreduce_nccl_latency_s if nccl else self._ar_lat
        else:
            self._comm_bw = hw.scale_out_bw_per_gpu_bytes_per_s * eff.scale_out_bw_frac
            self._comm_lat = hw.scale_out_latency_s
            self._ar_bw, self._ar_lat = self._comm_bw, self._comm_lat
            self._ar_max_bytes, self._nccl_bw, self._nccl_lat = math.inf, self._comm_bw, self._comm_lat
        self._pcie_rate = g * hw.pcie_bw_per_gpu_bytes_per_s * eff.pcie_bw_frac
        self._dense_weight_bytes_per_gpu = arith.dense_weight_bytes / par.tp
        # the drafter: its drafting per sequence and step, and its pass over every row the target runs (prompt
        # tokens and verify rows; docs/engines_and_validation.md section 33)
        self._draft_flops = arith.draft_step_flops(draft_tokens)
        self._draft_row_flops = arith.draft_row_flops if draft_tokens > 0 else 0.0
        self._kv_rate = par.dp * self._hbm_rate  # KV read: each DP group's GPUs read their sequences
        self._k_attn = self.verified_tokens_per_step / self._attn_rate_decode
        if par.moe_a2a not in MOE_A2A or (par.moe_a2a == "deepep" and hw.deepep is None):
            raise ValueError(
                f"moe_a2a {par.moe_a2a!r}: one of {MOE_A2A}; deepep needs the GPU's measured DeepEP"
            )
        # DeepEP's normal kernels at this pool's EP size and SMs (a pool without DeepEP never reads them)
        self._deepep_normal: tuple[A2aCall, A2aCall] = (A2aCall(0.0, 0.0), A2aCall(0.0, 0.0))
        if par.moe_a2a == "deepep" and hw.deepep is not None and par.ep > 1:
            self._deepep_normal = hw.deepep.normal_at(
                ep=par.ep,
                sms=par.deepep_normal_sms,
                hidden=arith.hidden,
                experts=arith.routed_experts,
                top_k=arith.top_k,
                link_bw_bytes_per_s=self._comm_bw,
            )
        self._comm_cache: dict[int, float] = {}
        self._extend_comm_cache: dict[int, float] = {}
        self._expert_cache: dict[int, float] = {}
        self._batch_cache: dict[int, tuple[float, float, float]] = {}

    # --- per-sequence decode terms: (attention+index FLOPs per verified row, KV bytes read) ---

    def decode_seq_terms(self, context_tokens: float, steps: int) -> DecodeTerms:
        table = self.arith.decode_table
        attn0, kv0 = table.at(context_tokens)
        if steps <= 1:
            return DecodeTerms(attn_row_flops=attn0, kv_read_bytes=kv0)
        # secant over the sequence's whole decode: exact where the terms are linear in the context
        n = steps - 1
        attn1, kv1 = table.at(context_tokens + self.accepted_tokens_per_step * n)
        return DecodeTerms(
            attn_row_flops=attn0,
            kv_read_bytes=kv0,
            attn_row_flops_growth=(attn1 - attn0) / n,
            kv_read_bytes_growth=(kv1 - kv0) / n,
        )

    # --- building blocks, memoised by the integer row count / batch size (few distinct values) ---

    def _ep_alltoall_s(self, rows: int, extend: bool) -> float:
        """Exposed EP dispatch + combine of `rows` rows (spread evenly over the GPUs), every MoE layer, by the
        pool's `moe_a2a` (module doc); `extend`: the step carries prefill rows."""
        a, p = self.arith, self.par
        if p.ep <= 1 or rows <= 0:
            return 0.0
        kind = p.moe_a2a
        if kind == "megamoe":
            return 0.0
        deepep = self.hw.deepep
        if kind == "deepep" and deepep is not None:
            # each GPU dispatches its own rows (DP ranks, or its share of a TP group's)
            tokens = rows / p.gpus
            if extend:
                call = self._deepep_normal[0].at(tokens) + self._deepep_normal[1].at(tokens)
            else:
                call = deepep.ll_dispatch.at(tokens) + deepep.ll_combine.at(tokens)
            return a.moe_layers * call
        # the all-to-all overlaps with the other micro-batch (two-batch overlap)
        return (1.0 - self.eff.comm_overlap_frac) * moe_alltoall_s(
            rows,
            gpus=p.gpus,
            ep=p.ep,
            hidden=a.hidden,
            top_k=a.top_k,
            moe_layers=a.moe_layers,
            dispatch_bytes_per_elem=DISPATCH_BYTES_PER_ELEM,
            combine_bytes_per_elem=COMBINE_BYTES_PER_ELEM,
            bw_bytes_per_s=self._comm_bw,
            latency_s=self._comm_lat,
        )

    def comm_s(self, rows: int, extend: bool = False) -> float:
        """`_comm_s`, for callers that take a step apart (sim.timing.forward)."""
        return self._comm_s(rows, extend)

    def _comm_s(self, rows: int, extend: bool = False) -> float:
        """Exposed communication + Engram gathers + fixed overhead of a step of `rows` rows; `extend`: the step
        carries prefill rows (DeepEP runs its normal kernels then)."""
        cache = self._extend_comm_cache if extend else self._comm_cache
        v = cache.get(rows)
        if v is None:
            a, p = self.arith, self.par
            ep_s = self._ep_alltoall_s(rows, extend)
            tp_s = tp_allreduce_s(
                rows,
                dp=p.dp,
                tp=p.tp,
                hidden=a.hidden,
                layers=a.layers,
                allreduces_per_layer=2,  # after attention and after the MoE block
                act_bytes_per_elem=2.0,  # BF16 activations
                bw_bytes_per_s=self._ar_bw,
                latency_s=self._ar_lat,
                custom_max_bytes=self._ar_max_bytes,
                nccl_bw_bytes_per_s=self._nccl_bw,
                nccl_latency_s=self._nccl_lat,
            )
            # the TP all-reduce is not overlapped: the next block needs its sum (vLLM's and SGLang's custom
            # all-reduce run in line)
            v = ep_s + tp_s
            if self.engram_in_dram:
                v += rows * a.engram_bytes_per_token / self._pcie_rate
            v += self.eff.step_overhead_s
            cache[rows] = v
        return v

    def _weights_s(self, rows: int) -> float:
        """Seconds to read the weights a step of `rows` rows touches, per GPU."""
        v = self._expert_cache.get(rows)
        if v is None:
            # EP ranks split the experts, expert TP (GPUs / EP, sim/config/cluster.py) splits each
            # expert: every GPU reads 1/GPUs of the touched experts' bytes
            experts = self.arith.expert_bytes_touched(rows) / self.par.gpus
            v = (self._dense_weight_bytes_per_gpu + experts) / self._hbm_rate
            self._expert_cache[rows] = v
        return v

    def _decode_fixed(self, batch_size: int) -> tuple[float, float, float]:
        """(compute, memory, added) seconds of a decode step of `batch_size` sequences that do not
        depend on their contexts: GEMMs + drafter, weights read, communication + overhead."""
        v = self._batch_cache.get(batch_size)
        if v is None:
            rows = batch_size * self.verified_tokens_per_step
            compute = (
                rows * (self.arith.dense_flops_per_token + self._draft_row_flops)
                + batch_size * self._draft_flops
            ) / self._dense_rate_decode
            v = (compute, self._weights_s(rows), self._comm_s(rows))
            self._batch_cache[batch_size] = v
        return v

    # --- the interface ---

    def step_s(
        self, batch_size: int, terms: DecodeTerms, prefill: Sequence[PrefillChunk], heat_s: float = 0.0
    ) -> float:
        # at the peaks' clocks: the roofline has no power limit (`power_limit` None), so the board's heat is unread
        a = self.arith
        rows = batch_size * self.verified_tokens_per_step
        if batch_size:
            compute, _w, _c = self._decode_fixed(batch_size)
            compute += self.verified_tokens_per_step * terms.attn_row_flops / self._attn_rate_decode
            kv_bytes = terms.kv_read_bytes
        else:
            compute = kv_bytes = 0.0
        for chunk in prefill:
            new = chunk.new_tokens
            dense, attn, kv = chunk_parts(
                self._prefill_every, self._prefill_tail, new, chunk.context_tokens, chunk.last_chunk
            )
            dense += new * self._draft_row_flops
            compute += dense / self._dense_rate_prefill + attn / self._attn_rate_prefill
            if chunk.image_tokens and self.vision_on_instance:
                compute += a.vision_flops(chunk.image_tokens, chunk.image_count) / self._attn_rate_prefill
            kv_bytes += kv
            rows += new
        if rows == 0:
            return 0.0
        memory = self._weights_s(rows) + kv_bytes / self._kv_rate
        return (compute if compute > memory else memory) + self._comm_s(rows, len(prefill) > 0)

    def rank_step_s(
        self, batch_size: int, terms: DecodeTerms, prefill: Sequence[PrefillChunk], heat_s: float = 0.0
    ) -> float:
        # every row is spread over the instance's GPUs whatever its DP rank, so where the decoding
        # sequences sit changes nothing here: only which of them decode, which the engine passes
        return self.step_s(batch_size, terms, prefill)

    def _lines(self, batch_size: int, terms: DecodeTerms):
        """The span's step time as max of two lines + a constant, split at the switch point:
        (first line, second line, switch step, added)."""
        fixed = self._batch_cache.get(batch_size)
        if fixed is None:
            fixed = self._decode_fixed(batch_size)
        c_fixed, m_fixed, added = fixed
        k_attn = self._k_attn
        kv_rate = self._kv_rate
        return _split(
            c_fixed + k_attn * terms.attn_row_flops,
            k_attn * terms.attn_row_flops_growth,
            m_fixed + terms.kv_read_bytes / kv_rate,
            terms.kv_read_bytes_growth / kv_rate,
        ) + (added,)

    def decode_span_s(self, batch_size: int, terms: DecodeTerms, steps: int) -> float:
        if steps <= 0:
            return 0.0
        u0, u1, w0, w1, p, added = self._lines(batch_size, terms)
        return _span(u0, u1, w0, w1, p, added, steps)

    def decode_step_end(self, batch_size: int, terms: DecodeTerms, elapsed_s: float) -> tuple[int, float]:
        u0, u1, w0, w1, p, added = self._lines(batch_size, terms)
        return _step_end(u0, u1, w0, w1, p, added, elapsed_s)

    # --- links ---

    def link_bw_bytes_per_s(self, kind: str, units: int) -> float:
        hw, eff = self.hw, self.eff
        if kind in ("pcie_h2d", "pcie_d2h"):
            return units * hw.pcie_bw_per_gpu_bytes_per_s * eff.pcie_bw_frac
        if kind == "ssd_read":
            return units * hw.ssd_read_bytes_per_s * eff.ssd_bw_frac
        if kind == "ssd_write":
            return units * hw.ssd_write_bytes_per_s * eff.ssd_bw_frac
        if kind == "net":
            return units * hw.scale_out_bw_per_node_bytes_per_s * eff.scale_out_bw_frac
        if kind == "nvlink":
            return units * hw.scale_up_bw_bytes_per_s * eff.scale_up_bw_frac
        raise ValueError(f"unknown link kind {kind!r}")

    def link_latency_s(self, kind: str) -> float:
        if kind == "net":
            return self.hw.scale_out_latency_s
        if kind == "nvlink":
            return self.hw.scale_up_latency_s
        return 0.0

    def transfer_s(self, nbytes: float, kind: str, units: int) -> float:
        return self.link_latency_s(kind) + nbytes / self.link_bw_bytes_per_s(kind, units)


def _split(c0: float, c1: float, m0: float, m1: float) -> tuple[float, float, float, float, float]:
    """max(c0 + c1 k, m0 + m1 k) over k >= 0 as (first line, second line, switch step p): the first
    holds for k < p, the second from p on (p = inf when one line wins throughout)."""
    d0, d1 = c0 - m0, c1 - m1
    if d1 == 0.0:
        return (c0, c1, c0, c1, math.inf) if d0 >= 0.0 else (m0, m1, m0, m1, math.inf)
    p = -d0 / d1
    if p > 1e15:  # the lines cross beyond any span: one line wins throughout
        return (c0, c1, c0, c1, math.inf) if d0 >= 0.0 else (m0, m1, m0, m1, math.inf)
    p = float(math.ceil(p)) if p > 0.0 else 0.0  # a whole step (exact as a float below 1e15)
    if d1 > 0.0:  # compute wins from p on
        return m0, m1, c0, c1, p
    return c0, c1, m0, m1, p


def _span(u0: float, u1: float, w0: float, w1: float, p: float, added: float, steps: int) -> float:
    """Time of `steps` steps: sum_{k<steps} of the first line below p, the second from p, + added."""
    if steps <= p:
        return steps * (u0 + added) + u1 * (steps - 1) * steps / 2.0
    # first line on [0, p), second on [p, steps)
    n = steps - p
    return p * u0 + u1 * (p - 1) * p / 2.0 + n * w0 + w1 * (p + steps - 1) * n / 2.0 + added * steps


def _first_steps(v0: float, v1: float, budget: float) -> float:
    """Largest real k with k v0 + v1 k (k - 1) / 2 <= budget (v0 > 0, v1 >= 0)."""
    if v1 <= 0.0:
        return budget / v0
    b = v0 - v1 / 2.0
    return (-b + math.sqrt(b * b + 2.0 * v1 * budget)) / v1


def _step_end(u0: float, u1: float, w0: float, w1: float, p: float, added: float, elapsed_s: float):
    """(k + 1, _span(k + 1)) for the largest k with _span(k) <= elapsed_s: the end of the step in
    progress at `elapsed_s`."""
    k = _steps_within(u0, u1, w0, w1, p, added, elapsed_s)
    return k + 1, _span(u0, u1, w0, w1, p, added, k + 1)


def _steps_within(
    u0: float, u1: float, w0: float, w1: float, p: float, added: float, elapsed_s: float
) -> int:
    """Largest k with _span(k) <= elapsed_s: the quadratic solved in closed form on each side of
    the switch point, then checked exactly against `_span` (at most a step or two of rounding)."""
    if elapsed_s <= 0.0:
        return 0
    k = _first_steps(u0 + added, u1, elapsed_s)
    if k > p:  # past the switch: continue on the second line from p
        used = p * (u0 + added) + u1 * (p - 1) * p / 2.0
        k = p + _first_steps(w0 + w1 * p + added, w1, elapsed_s - used)
    steps = int(k) if k > 0.0 else 0
    while steps > 0 and _span(u0, u1, w0, w1, p, added, steps) > elapsed_s:
        steps -= 1
    while _span(u0, u1, w0, w1, p, added, steps + 1) <= elapsed_s:
        steps += 1
    return steps


def _sum_max_lines(c0: float, c1: float, m0: float, m1: float, steps: int) -> float:
    """sum over k in [0, steps) of max(c0 + c1 k, m0 + m1 k), exactly."""
    u0, u1, w0, w1, p = _split(c0, c1, m0, m1)
    return _span(u0, u1, w0, w1, p, 0.0, steps)
