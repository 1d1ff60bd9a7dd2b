"""Burst against sustained kernel timing on the device (docs/carry/sustained/README.md).

    python3 -m kernels_bench.sustained --out DIR [--seconds 25] [--tail 10] [--commit SHA] [--only NAME ...]

sim's kernel tables time a kernel in a burst (kernels_bench.timing: two warm-ups, 25 samples of at least 300 us,
tens of milliseconds for a large GEMM); serving keeps the GPU busy for minutes, and a GPU over its power limit
lowers its clocks. For each workload (FP8 and BF16 GEMMs, BF16 attention through torch's cuDNN and
FlashAttention-2 backends, a copy), on random data:

1. **burst**: after `--idle` seconds idle, the kernels_bench timing itself (`time_calls`, its defaults);
2. **sustained**: the same CUDA graph replayed back to back for `--seconds`, timed in samples of about 50 ms
   (replays between two events), the host waiting only at each sample's end.

A background `nvidia-smi -lms 100` reads the SM clock, the board power, the temperature and the clock-event
reasons throughout; each phase takes the median of the readings inside its window. Writes `samples.csv`
(every sustained sample), `smi.csv` (every reading), `summary.csv` and `provenance.json`, and prints the summary
table: burst median, sustained median over the last `--tail` seconds, their ratio, the FLOP rate, the clocks and
power of each. A workload whose backend the GPU or the build lacks is skipped and named in `provenance.json`.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

SMI_FIELDS = ("timestamp", "clocks.sm", "power.draw", "temperature.gpu", "clocks_event_reasons.active")


@dataclass(frozen=True)
class SmiReading:
    t_s: float  # wall clock, seconds since the epoch
    sm_MHz: float
    power_W: float
    temp_C: float
    reasons: str  # the active clock-event reasons bitmask, as nvidia-smi prints it


@dataclass(frozen=True)
class Phase:
    """One workload's phase: its window on the wall clock and its per-call times (us)."""

    workload: str
    phase: str  # "burst" or "sustained"
    start_s: float
    end_s: float
    per_call_us: tuple[float, ...]
    sample_end_s: tuple[float, ...]  # wall clock at each sample's end (sustained), for the tail


def parse_smi(line: str) -> SmiReading | None:
    """One `nvidia-smi --format=csv,noheader,nounits` line of SMI_FIELDS, or None when it does not parse."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != len(SMI_FIELDS):
        return None
    try:
        t = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        return SmiReading(t, float(parts[1]), float(parts[2]), float(parts[3]), parts[4])
    except ValueError:
        return None


def _median_in(readings: list[SmiReading], start_s: float, end_s: float, field: str) -> float | None:
    values = [getattr(r, field) for r in readings if start_s <= r.t_s <= end_s]
    return statistics.median(values) if values else None


def summarise(
    phases: list[Phase], readings: list[SmiReading], tail_s: float, flop: dict[str, float] | None = None
) -> list[dict]:
    """Per workload: the burst median and the sustained median over its last `tail_s`, their ratio, the FLOP
    rate of each where `flop` counts the workload's FLOPs a call, and the median SM clock, power and temperature
    in each window (the sustained one: its tail)."""
    out = []
    for name in dict.fromkeys(p.workload for p in phases):
        burst = next(p for p in phases if p.workload == name and p.phase == "burst")
        sus = next(p for p in phases if p.workload == name and p.phase == "sustained")
        tail_start = sus.end_s - tail_s
        tail = [us for us, end in zip(sus.per_call_us, sus.sample_end_s, strict=True) if end >= tail_start]
        b, s = statistics.median(burst.per_call_us), statistics.median(tail or sus.per_call_us)
        row = {"workload": name, "burst_us": b, "sustained_us": s, "ratio": s / b, "tail_samples": len(tail)}
        flop_call = (flop or {}).get(name, 0.0)
        row["burst_TFLOPs"] = flop_call / b / 1e6 if flop_call else None
        row["sustained_TFLOPs"] = flop_call / s / 1e6 if flop_call else None
        for field in ("sm_MHz", "power_W", "temp_C"):
            row[f"burst_{field}"] = _median_in(readings, burst.start_s, burst.end_s, field)
            row[f"sustained_{field}"] = _median_in(readings, tail_start, sus.end_s, field)
        out.append(row)
    return out


def table(rows: list[dict]) -> str:
    def f(x, fmt):
        return "-" if x is None else format(x, fmt)

    lines = [
        "| workload | burst us | sustained us (tail) | sustained / burst | TFLOP/s burst -> sustained | SM MHz burst "
        "-> sustained | W burst -> sustained | C burst -> sustained |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['workload']} | {r['burst_us']:.1f} | {r['sustained_us']:.1f} | {r['ratio']:.3f} | "
            f"{f(r.get('burst_TFLOPs'), '.0f')} -> {f(r.get('sustained_TFLOPs'), '.0f')} | "
            f"{f(r['burst_sm_MHz'], '.0f')} -> {f(r['sustained_sm_MHz'], '.0f')} | "
            f"{f(r['burst_power_W'], '.0f')} -> {f(r['sustained_power_W'], '.0f')} | "
            f"{f(r['burst_temp_C'], '.0f')} -> {f(r['sustained_temp_C'], '.0f')} |"
        )
    return "\n".join(lines)


def attention_flop(batch: int, heads: int, seq: int, head_dim: int, causal: bool) -> float:
    """FLOPs of one attention forward (QK^T and PV, 2 FLOPs a multiply-add), half of them under a causal mask, as
    flashinfer's and FlashAttention's benchmarks count them."""
    flop = 4.0 * batch * heads * seq * seq * head_dim
    return flop / 2 if causal else flop


# flashinfer PR #2899's B200 attention shape (hardware profile source FI1): b 4, s 8,192, 16 heads, d 128, BF16
ATTENTION_SHAPE = (4, 16, 8192, 128)


@dataclass(frozen=True)
class Workload:
    """A zero-argument call on random data, and its FLOPs a call (0: not counted, a copy)."""

    call: Callable[[], object]
    flop: float


def workloads() -> dict[str, Workload]:
    """The kernels, each a call on random data (built on the GPU): GEMMs, attention, a copy."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)

    def fp8(m: int, n: int, k: int) -> Workload:
        a = torch.randn(m, k, device=dev, generator=g).to(torch.float8_e4m3fn)
        b = (
            torch.randn(n, k, device=dev, generator=g).to(torch.float8_e4m3fn).t()
        )  # column-major, as cuBLASLt wants
        one = torch.ones((), device=dev)
        return Workload(
            lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
            2.0 * m * n * k,
        )

    batch, heads, seq, head_dim = ATTENTION_SHAPE
    q, k, v = (torch.randn(batch, heads, seq, head_dim, device=dev, generator=g, dtype=torch.bfloat16)
               for _ in range(3))  # fmt: skip

    def attention(backend, causal: bool) -> Workload:
        # the backend is chosen inside the call, so the graph captured in `sustained` holds that backend's kernel
        def call():
            with sdpa_kernel([backend]):
                return scaled_dot_product_attention(q, k, v, is_causal=causal)

        return Workload(call, attention_flop(batch, heads, seq, head_dim, causal))

    x = torch.randn(8192, 8192, device=dev, generator=g, dtype=torch.bfloat16)
    y = torch.randn(8192, 8192, device=dev, generator=g, dtype=torch.bfloat16)
    src = torch.randn(256 * 2**20, device=dev, generator=g)  # 1 GiB of FP32, read and written: 2 GiB a copy
    dst = torch.empty_like(src)
    return {
        "fp8_gemm_8192x8192x8192": fp8(8192, 8192, 8192),
        "fp8_gemm_8192x4096x4096": fp8(8192, 4096, 4096),
        "bf16_gemm_8192x8192x8192": Workload(lambda: torch.mm(x, y), 2.0 * 8192**3),
        "copy_1GiB": Workload(lambda: dst.copy_(src), 0.0),
        # Hopper's fastest BF16 attention in torch (cuDNN's), and FlashAttention-2 (torch's flash backend)
        "attention_cudnn_causal": attention(SDPBackend.CUDNN_ATTENTION, True),
        "attention_cudnn_full": attention(SDPBackend.CUDNN_ATTENTION, False),
        "attention_fa2_full": attention(SDPBackend.FLASH_ATTENTION, False),
    }


def sustained(
    call: Callable[[], object], seconds: float, sample_s: float = 0.05
) -> tuple[list[float], list[float]]:
    """(per-call us, wall-clock end) of back-to-back samples of CUDA-graph replays for `seconds`."""
    import torch

    for _ in range(2):
        call()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    k = max(1, int(sample_s * 1e3 / max(start.elapsed_time(end), 1e-3)))
    per_call, ends = [], []
    stop = time.time() + seconds
    while time.time() < stop:
        start.record()
        for _ in range(k):
            graph.replay()
        end.record()
        end.synchronize()
        per_call.append(start.elapsed_time(end) * 1e3 / k)
        ends.append(time.time())
    return per_call, ends


# (compute ms, rest ms, rest kind): serving-like alternations of a prefill step's compute with decode (a copy: memory
# bound) or nothing (idle); the effective slowdown of each pattern's compute blocks (docs/carry/sustained). The
# first six are the first run's; the rest sample block length and rest length apart, to fit the throttle's dynamics.
DUTY_PATTERNS = ((300, 30, "copy"), (100, 10, "copy"), (100, 100, "copy"), (80, 200, "copy"),
                 (150, 2000, "idle"), (20, 20, "copy"), (50, 50, "copy"), (200, 200, "copy"), (100, 30, "copy"),
                 (40, 10, "copy"), (100, 10, "idle"), (100, 100, "idle"), (500, 500, "copy"),
                 (1000, 30, "copy"))  # fmt: skip
SUB_BLOCK_MS = 10.0  # each compute block is timed in pieces of about this length, to see the throttle act


@dataclass(frozen=True)
class DutyBlock:
    """One timed piece of a compute block: the pattern, the block's index, the piece's start within the block."""

    compute_ms: int
    rest_ms: int
    rest: str
    block: int
    offset_ms: float  # the piece's start within its block, at burst speed
    ratio: float  # the piece's per-call time / the burst per call


def duty_cycles(
    compute: Callable[[], object], rest: Callable[[], object], seconds: float, burst_call_ms: float
) -> list[DutyBlock]:
    """Per DUTY_PATTERNS entry, after the GPU idles 3 s: compute blocks of `compute` replays lasting the pattern's
    compute ms at burst speed (`burst_call_ms` a call: the kernels_bench timing of `compute`, as sim's tables
    are timed), each followed by its rest (`rest` replays, or the host sleeping), for `seconds`; each block
    timed in pieces of SUB_BLOCK_MS (events between them) against the burst."""
    import torch

    def graph_of(call):
        for _ in range(2):
            call()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            call()
        return g

    gc, gr = graph_of(compute), graph_of(rest)
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):  # the rest's call time, warm (its replays only set the rest's length)
        a.record()
        gr.replay()
        b.record()
        b.synchronize()
    rest_call_ms = a.elapsed_time(b)
    out: list[DutyBlock] = []
    per_piece = max(1, round(SUB_BLOCK_MS / burst_call_ms))
    for c_ms, r_ms, kind in DUTY_PATTERNS:
        pieces = max(1, round(c_ms / (per_piece * burst_call_ms)))
        kr = max(1, round(r_ms / rest_call_ms))
        torch.cuda.synchronize()
        time.sleep(3.0)
        blocks: list[list] = []
        stop = time.time() + seconds
        while time.time() < stop:
            events = [torch.cuda.Event(enable_timing=True) for _ in range(pieces + 1)]
            events[0].record()
            for e in events[1:]:
                for _ in range(per_piece):
                    gc.replay()
                e.record()
            blocks.append(events)
            if kind == "idle":
                events[-1].synchronize()
                time.sleep(r_ms / 1e3)
            else:
                for _ in range(kr):
                    gr.replay()
                if len(blocks) % 4 == 0:
                    events[-1].synchronize()  # keep the host within a few blocks of the GPU
        torch.cuda.synchronize()
        for i, events in enumerate(blocks):
            for j in range(pieces):
                ms = events[j].elapsed_time(events[j + 1])
                out.append(DutyBlock(c_ms, r_ms, kind, i, j * per_piece * burst_call_ms,
                                     ms / per_piece / burst_call_ms))  # fmt: skip
    return out


def duty_summary(pieces: list[DutyBlock]) -> list[dict]:
    """Per pattern: the blocks' mean slowdown, the first block's and the median over the second half of blocks."""
    out = []
    for key in dict.fromkeys((p.compute_ms, p.rest_ms, p.rest) for p in pieces):
        mine = [p for p in pieces if (p.compute_ms, p.rest_ms, p.rest) == key]
        blocks = sorted({p.block for p in mine})
        means = [statistics.fmean(p.ratio for p in mine if p.block == b) for b in blocks]
        out.append({"compute_ms": key[0], "rest_ms": key[1], "rest": key[2], "blocks": len(blocks),
                    "first": means[0], "steady": statistics.median(means[len(means) // 2 :])})  # fmt: skip
    return out


def _smi_fields() -> tuple[str, ...]:
    """SMI_FIELDS, with the clock-event reasons under their older name where the driver lacks the new one."""
    probe = ["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader"]
    if subprocess.run(probe, capture_output=True).returncode == 0:
        return SMI_FIELDS
    return (*SMI_FIELDS[:-1], "clocks_throttle_reasons.active")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="kernels_bench.sustained", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=25.0, help="each sustained phase")
    ap.add_argument(
        "--tail", type=float, default=10.0, help="the sustained median is over the last this many s"
    )
    ap.add_argument("--idle", type=float, default=3.0, help="idle before each burst")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument(
        "--only", nargs="+", help="run these workloads (names as the summary prints them), not all"
    )
    ap.add_argument(
        "--duty", type=float, default=0.0, help="instead: the duty-cycle patterns, this many s each"
    )
    args = ap.parse_args(argv)
    if args.duty:
        return _duty_main(args)

    from kernels_bench.timing import time_calls

    args.out.mkdir(parents=True, exist_ok=True)
    smi_path = args.out / "smi.csv"
    query = [
        "nvidia-smi",
        f"--query-gpu={','.join(_smi_fields())}",
        "--format=csv,noheader,nounits",
        "-lms",
        "100",
    ]
    with smi_path.open("w") as smi_file:
        poller = subprocess.Popen(query, stdout=smi_file, stderr=subprocess.DEVNULL)
        phases: list[Phase] = []
        skipped: dict[str, str] = {}
        chosen = workloads()
        if args.only:
            chosen = {k: v for k, v in chosen.items() if k in args.only}
        try:
            for name, work in chosen.items():
                time.sleep(args.idle)
                t0 = time.time()
                try:
                    burst = time_calls([work.call])
                    t1 = time.time()
                    per_call, ends = sustained(work.call, args.seconds)
                except RuntimeError as e:  # a backend this GPU or build lacks: said, and the others still run
                    skipped[name] = str(e).splitlines()[0] if str(e) else type(e).__name__
                    print(f"{name}: skipped ({skipped[name]})", flush=True)
                    continue
                # the burst's samples are not kept one by one: its median stands for all of them
                phases.append(Phase(name, "burst", t0, t1, (burst.median_us,), (t1,)))
                phases.append(Phase(name, "sustained", t1, time.time(), tuple(per_call), tuple(ends)))
                print(
                    f"{name}: burst {burst.median_us:.1f} us, sustained last {per_call[-1]:.1f} us",
                    flush=True,
                )
        finally:
            time.sleep(0.3)
            poller.terminate()
            poller.wait()
    readings = [r for line in smi_path.read_text().splitlines() if (r := parse_smi(line)) is not None]
    rows = summarise(phases, readings, args.tail, {k: v.flop for k, v in chosen.items()})
    with (args.out / "samples.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["workload", "phase", "t_s", "per_call_us"])
        for p in phases:
            for us, end in zip(p.per_call_us, p.sample_end_s, strict=True):
                w.writerow([p.workload, p.phase, f"{end - p.start_s:.3f}", f"{us:.3f}"])
    _write_rows(args.out / "summary.csv", rows)
    provenance = _provenance(args, smi_readings=len(readings), skipped=skipped,
                             phases=[asdict(p) | {"per_call_us": len(p.per_call_us), "sample_end_s": None}
                                     for p in phases])  # fmt: skip
    (args.out / "provenance.json").write_text(json.dumps(provenance, indent=1))
    print(table(rows))
    return 0


def _write_rows(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _provenance(args, **extra) -> dict:
    """The GPU, its driver and limits, torch and CUDA, the commit and the date, the arguments, and `extra`."""
    import torch

    props = torch.cuda.get_device_properties(0)
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,power.limit,clocks.max.sm",
                          "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()  # fmt: skip
    return {"gpu": props.name, "nvidia_smi": smi, "torch": torch.__version__, "cuda": torch.version.cuda,
            "commit": args.commit, "date_utc": datetime.now(UTC).isoformat(timespec="seconds"),
            "args": {k: str(v) for k, v in vars(args).items()}, **extra}  # fmt: skip


def _duty_main(args) -> int:
    from kernels_bench.timing import time_calls

    args.out.mkdir(parents=True, exist_ok=True)
    w = workloads()
    time.sleep(args.idle)
    gemm, copy = w["fp8_gemm_8192x4096x4096"].call, w["copy_1GiB"].call
    burst = time_calls([gemm])
    pieces = duty_cycles(gemm, copy, args.duty, burst.median_us / 1e3)
    _write_rows(args.out / "duty_pieces.csv", [asdict(p) for p in pieces])
    rows = duty_summary(pieces)
    _write_rows(args.out / "duty.csv", rows)
    provenance = _provenance(args, burst_us=burst.median_us)
    (args.out / "duty_provenance.json").write_text(json.dumps(provenance, indent=1))
    print(f"burst {burst.median_us:.1f} us a call (kernels_bench timing)")
    for r in rows:
        print(f"compute {r['compute_ms']} ms / {r['rest']} {r['rest_ms']} ms: {r['blocks']} blocks, first "
              f"{r['first']:.3f}, steady {r['steady']:.3f} x burst")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
