"""The engine's host time around a step (`timing.host`, sim.timing.host), the served model's unfused glue and
in-step host time fitted on its kernel profile (sim.timing.served), and its time between steps measured on
other runs (sim.validate.real_gaps): each would fail if its mechanism broke."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sim.errors import InputError
from sim.timing.batch import PrefillChunk
from sim.timing.calibrated import build_calibrated
from sim.timing.host import NO_HOST, HostCosts
from sim.timing.served import TIMES_REQUIRED, fit_engine, load_profiled, served_engine, served_paths
from sim.validate.real_gaps import BUSY_GAP_S, fit_gaps, held_out_gaps

MINI = "deepseek-v4-flash-mini"
BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 128, 256, 512, 1024, 2048, 2112)
HOST = HostCosts(step_s=900e-6, per_sequence_s=12e-6, per_row_s=0.2e-6, gap_s=30e-6, gap_per_sequence_s=7e-6,
                 gap_per_chunk_s=300e-6)  # fmt: skip


@pytest.fixture(scope="module")
def one_gpu(context, h200_tables):
    def make(**fields):
        return context(MINI, tp=1, ep=1, dp=1, **{"forward_term": "none", "row_buckets": BUCKETS, **fields})

    return make


def test_host_time_is_added_per_step_sequence_row_and_chunk(one_gpu):
    plain = build_calibrated(one_gpu())
    tm = build_calibrated(one_gpu(host=HOST))
    terms = plain.decode_seq_terms(8192, 1).scaled(33)
    # decode: 33 sequences run the graph of 48 rows; the scheduler's gap before it counts every decode
    want = 900e-6 + 33 * 12e-6 + 48 * 0.2e-6 + 30e-6 + 33 * 7e-6
    assert tm.step_s(33, terms, ()) == pytest.approx(plain.step_s(33, terms, ()) + want)
    assert HOST.step_total_s(33, 0, 48) == pytest.approx(want)
    # a decode span is the sum of its steps, host included
    span = tm.decode_span_s(33, terms, 10)
    steps = sum(tm.step_s(33, terms.after(k), ()) for k in range(10))
    assert span == pytest.approx(steps, rel=1e-9)
    # mixed: 16 decodes and two chunks (2,048 + 64 rows -> bucket 2,112)
    chunks = [PrefillChunk(2000, 0, last_chunk=True), PrefillChunk(48, 4096, last_chunk=True)]
    t16 = plain.decode_seq_terms(8192, 1).scaled(16)
    want = 900e-6 + 18 * 12e-6 + 2112 * 0.2e-6 + 30e-6 + 16 * 7e-6 + 2 * 300e-6
    assert tm.step_s(16, t16, chunks) == pytest.approx(plain.step_s(16, t16, chunks) + want)


def test_no_host_time_leaves_steps_bit_identical(one_gpu, context):
    """Production default (hidden by overlap scheduling): the same floats as without the setting."""
    for ctx in (one_gpu(), context("deepseek-v4-flash", tp=1, ep=8, dp=8)):
        a, b = build_calibrated(ctx), build_calibrated(replace(ctx, host=NO_HOST))
        assert b._host_on is False
        terms = a.decode_seq_terms(30000, 1).scaled(64)
        chunk = [PrefillChunk(4096, 1000, last_chunk=True)]
        assert a.step_s(64, terms, ()) == b.step_s(64, terms, ())
        assert a.step_s(64, terms, chunk) == b.step_s(64, terms, chunk)


def test_an_eager_step_lasts_at_least_its_host_issue_time(one_gpu, context):
    """A step holding chunks lasts max(its kernels, the eager floor) (docs/carry/eager: the eager pass
    measured as max(graph, host issue)); decode steps (graphs) keep their time; on a DP instance the floor
    holds for a step whether its ranks decode beside the chunk or not."""
    plain = build_calibrated(one_gpu())
    layers = plain.arith.layers
    terms = plain.decode_seq_terms(8192, 1).scaled(16)
    small = [PrefillChunk(64, 0, last_chunk=True)]
    big = [PrefillChunk(2000, 0, last_chunk=True)]
    low = plain.step_s(16, terms, small)  # the cheap step, below the floor
    floor = HostCosts(eager_step_s=1e-3, eager_per_layer_s=(4 * low) / layers)
    assert floor.eager_floor_s(layers) == pytest.approx(1e-3 + 4 * low)
    tm = build_calibrated(one_gpu(host=floor))
    assert tm.step_s(16, terms, small) == pytest.approx(1e-3 + 4 * low)  # host-bound: the floor
    assert tm.step_s(16, terms, ()) == plain.step_s(16, terms, ())  # decode: no floor
    tiny = HostCosts(eager_per_layer_s=1e-9)  # a floor under the GPU's time is hidden
    assert build_calibrated(one_gpu(host=tiny)).step_s(16, terms, big) == plain.step_s(16, terms, big)
    dp_ctx = context("deepseek-v4-flash", tp=1, ep=8, dp=8)
    dp_plain = build_calibrated(dp_ctx)
    dp_terms = dp_plain.decode_seq_terms(8192, 1).scaled(64)
    chunk = [PrefillChunk(128, 0, last_chunk=True, rank=3)]
    top = 10 * max(dp_plain.step_s(64, dp_terms, chunk), dp_plain.rank_step_s(64, dp_terms, chunk))
    dp = build_calibrated(replace(dp_ctx, host=HostCosts(eager_step_s=top)))
    assert dp.step_s(64, dp_terms, chunk) == top and dp.rank_step_s(64, dp_terms, chunk) == top
    assert dp.step_s(64, dp_terms, ()) == dp_plain.step_s(64, dp_terms, ())
    # V4's MTP block extends the prompt in the same step; V4.1's DSpark only injects the rows into its blocks' KV
    per_layer = HostCosts(eager_per_layer_s=1.0)  # a floor far above any step: the step is the floor
    for model, draft, blocks in (("deepseek-v4-flash", 1, 1), ("deepseek-v4.1-flash", 5, 0)):
        ctx = context(
            model, tp=1, ep=8, dp=1, accepted_tokens_per_step=1.5, draft_tokens=draft, host=per_layer
        )
        t = build_calibrated(ctx)
        one = [PrefillChunk(128, 0, last_chunk=True)]
        assert t.step_s(0, t.decode_seq_terms(0, 1).scaled(0), one) == t.arith.layers + blocks


def test_host_setting_is_validated():
    from pydantic import ValidationError

    from sim.config.timing import Timing

    assert Timing().host.step_s == 0.0 and not HostCosts(**Timing().host.model_dump()).enabled
    with pytest.raises(ValidationError, match="host.gap_s"):
        Timing(host={"gap_s": -1e-6})
    with pytest.raises(ValidationError, match="host.bogus"):
        Timing(host={"bogus": 1.0})


# --- the served engine's fits on a profiled bench table ---------------------------------------------------

FLOOR_S, PER_ROW_S, LAUNCHES = 1.6e-6, 8e-6, 1650
A_S, B_S, C_S = 880e-6, 13e-6, 0.2e-6
PROFILED = [("decode", b, 8192, 0, 0, b) for b in (1, 8, 32)] + [("decode", 33, 8192, 0, 0, 48),
            ("decode", 64, 32768, 0, 0, 64), ("prefill", 0, 0, 512, 0, 512), ("prefill", 0, 0, 2048, 0, 2048),
            ("mixed", 16, 4096, 2048, 0, 2112)]  # fmt: skip


def _profile(folder: Path, extra_host_s: float = 0.0) -> tuple[Path, Path]:
    times, kernels = folder / "times.csv", folder / "kernels.csv"
    with times.open("w", newline="") as f, kernels.open("w", newline="") as k:
        f.write("# gpu_name: fixture (tests)\n")
        w = csv.DictWriter(f, fieldnames=list(TIMES_REQUIRED), restval="fixture")
        w.writeheader()
        kw = csv.DictWriter(k, fieldnames=["point", "category", "name", "calls", "us"])
        kw.writeheader()
        w.writerow(dict(mode="decode", batch=2, context_tokens=8192, chunk_tokens=0, prefill_context_tokens=0,
                        graph_bucket=2, wall_us_p50=5000, gpu_busy_us="", glue_us=""))  # fmt: skip
        for i, (mode, b, ctx, chunk, cctx, rows) in enumerate(PROFILED):
            launches = LAUNCHES + 10 * i
            glue = launches * FLOOR_S + rows * PER_ROW_S
            busy = glue + 1e-3 + rows * 2e-6
            host = A_S + B_S * (b + (1 if chunk else 0)) + C_S * rows + (extra_host_s if ctx > 8192 else 0.0)
            w.writerow(dict(mode=mode, batch=b, context_tokens=ctx, chunk_tokens=chunk, prefill_context_tokens=cctx,
                            graph_bucket=rows, wall_us_p50=(busy + host) * 1e6, gpu_busy_us=busy * 1e6,
                            glue_us=glue * 1e6))  # fmt: skip
            point = f"{mode}_B{b}_L{ctx}_T{chunk}_C{cctx}"
            kw.writerow(dict(point=point, category="glue", name="copy", calls=launches - 100, us=1.0))
            kw.writerow(dict(point=point, category="glue", name="fill", calls=100, us=1.0))
            kw.writerow(dict(point=point, category="mhc", name="mhc_post", calls=11, us=30.0))
    return times, kernels


def test_glue_and_host_constants_are_recovered_with_leave_one_out(tmp_path):
    times, kernels = _profile(tmp_path, extra_host_s=500e-6)
    points = load_profiled(times, kernels)
    assert len(points) == len(PROFILED)  # the unprofiled row is skipped
    assert [p.glue_launches for p in points] == [LAUNCHES + 10 * i for i in range(len(PROFILED))]
    eng = fit_engine(points, "fixture")
    assert eng.launch_floor_s == pytest.approx(FLOOR_S, rel=1e-6)
    assert eng.glue_per_row_s == pytest.approx(PER_ROW_S, rel=1e-6)
    assert max(map(abs, eng.glue.loo_error)) < 1e-9
    # the host fit reads the first context bucket only; the long-context point's extra host work is a miss
    assert (eng.host.step_s, eng.host.per_sequence_s, eng.host.per_row_s) == pytest.approx(
        (A_S, B_S, C_S), rel=1e-6
    )
    assert eng.host.gap_s == 0.0 and len(eng.host_fit.points) == len(PROFILED) - 1
    (miss,) = eng.host_misses.values()
    assert miss == pytest.approx(-500e-6 / next(p.wall_s for p in points if p.context_tokens > 8192))


def test_profile_problems_name_the_file(tmp_path):
    times, kernels = _profile(tmp_path)
    text = kernels.read_text().replace("decode_B1_L8192", "decode_B7_L8192")
    kernels.write_text(text)
    with pytest.raises(InputError, match="profiled point without kernels") as e:
        load_profiled(times, kernels)
    assert "kernels.csv" in str(e.value)


def test_the_committed_profile_gives_the_launch_floor_kernels_md_states(one_gpu):
    """hwprofiles/h200/serve: the fitted floor per glue launch lands at kernels.md §1's ~1.5 µs per kernel in a
    graph (a figure the fit never saw), and the unfused_glue term carries it per layer."""
    eng = served_engine("h200")
    assert served_paths("h200", MINI) == served_paths("h200")  # the V4 mini has the unsuffixed files
    assert served_paths("h200", "deepseek-v4.1-flash-mini")[0].name in (
        "serve_step_times.csv",
        "serve_step_times_deepseek-v4.1-flash-mini.csv",  # its own, where its bench table is committed
    )
    assert 1.3e-6 < eng.launch_floor_s < 2.0e-6
    assert 1500 < eng.launches_per_step < 1900 and 5e-6 < eng.glue_per_row_s < 12e-6
    assert eng.glue.summary()["loo_max_abs_error"] < 0.05
    tm = build_calibrated(one_gpu(forward_term="unfused_glue"))
    assert tm.layer_overhead_s * 5 == pytest.approx(eng.launches_per_step * eng.launch_floor_s)
    assert tm.layer_row_overhead_s * 5 == pytest.approx(eng.glue_per_row_s)


def test_the_served_engine_is_carried_part_by_part_to_a_gpu_without_its_bench(context, h200_tables):
    """Issue 28: a GPU without a profiled served bench takes the H200's engine, each part by what bounds it: the
    glue launches, their floor and the host time as they are, the glue per row by the SMs' issue rate (the
    B200's 148 SMs at 1965 MHz against the H200's 132 at 1980). The unfused_glue and served terms follow it."""
    from sim.timing.forward import forward_term_of

    ref, b200, h100 = served_engine("h200"), served_engine("b200"), served_engine("h100")
    ratio = 148 / 132  # hwprofiles: 148 SMs against 132, both at 1980 MHz
    assert b200.sm_ratio == pytest.approx(ratio, rel=1e-3) and h100.sm_ratio == pytest.approx(1.0)
    assert (b200.launches_per_step, b200.launch_floor_s, b200.host) == (
        ref.launches_per_step,
        ref.launch_floor_s,
        ref.host,
    )
    assert b200.glue_per_row_s == pytest.approx(ref.glue_per_row_s / ratio)
    assert "carried to b200" in b200.source
    b = context(MINI, "nvidia-b200-hgx8", tp=1, ep=1, dp=1, forward_term="unfused_glue")
    tm = build_calibrated(b)
    assert tm.layer_overhead_s * 5 == pytest.approx(ref.launches_per_step * ref.launch_floor_s)
    assert tm.layer_row_overhead_s * 5 == pytest.approx(ref.glue_per_row_s / ratio)
    # the served term: the launches x floor as they are, the rest of the per-layer part and the per-row part by
    # the SM rate; on the H100 (same SMs and clock) the H200's term itself
    h200_term = forward_term_of(context(MINI, tp=1, ep=1, dp=1, forward_term="served", row_buckets=BUCKETS))
    h100_term = forward_term_of(context(MINI, "nvidia-h100-hgx8", tp=1, ep=1, dp=1, forward_term="served",
                                        row_buckets=BUCKETS))  # fmt: skip
    assert (h100_term.per_layer_s, h100_term.per_layer_row_s) == pytest.approx(
        (h200_term.per_layer_s, h200_term.per_layer_row_s)
    )
    b200_term = forward_term_of(replace(b, forward_term="served", row_buckets=BUCKETS))
    launch_s = ref.launches_per_step * ref.launch_floor_s / 5
    assert b200_term.per_layer_s == pytest.approx(launch_s + (h200_term.per_layer_s - launch_s) / ratio)
    assert b200_term.per_layer_row_s == pytest.approx(h200_term.per_layer_row_s / ratio)
    assert "carried from h200" in b200_term.source


# --- the time between steps, measured on the other runs ---------------------------------------------------


def _steps(folder: Path, a: float, b: float, c: float, n: int = 400) -> Path:
    rng = np.random.default_rng(len(folder.name))
    folder.mkdir()
    dec = rng.integers(0, 40, n)
    chunks = rng.integers(0, 3, n)
    gap = a + b * dec + c * chunks
    gap[::50] = 0.5  # idle waits for arrivals: not scheduling
    pq.write_table(pa.table({
        "gap_s": gap,
        "decode_context_tokens": pa.array([[1000] * int(d) for d in dec], pa.list_(pa.int32())),
        "prefill_new_tokens": pa.array([[64] * int(k) for k in chunks], pa.list_(pa.int32())),
    }), folder / "steps.parquet")  # fmt: skip
    return folder


def test_gaps_are_fitted_on_the_other_runs_only(tmp_path):
    one = _steps(tmp_path / "run_a", 30e-6, 7e-6, 300e-6)
    _steps(tmp_path / "run_b", 30e-6, 7e-6, 300e-6)
    (tmp_path / "not_a_run").mkdir()
    fit = fit_gaps([one])
    assert (fit.gap_s, fit.gap_per_sequence_s, fit.gap_per_chunk_s) == pytest.approx((30e-6, 7e-6, 300e-6))
    assert fit.steps == 400 - 8 and fit.mean_gap_s < BUSY_GAP_S
    held = held_out_gaps(one)
    assert held.runs == ("run_b",) and held.gap_per_chunk_s == pytest.approx(300e-6)
    assert held_out_gaps(tmp_path / "not_a_run").runs == ("run_a", "run_b")
    assert fit_gaps([tmp_path / "not_a_run"]).steps == 0


def test_step_predictions_leave_the_gap_out(one_gpu):
    """The engine's step records time the step function alone: the twin's prediction of a recorded step is
    its step time less the scheduler's gap before it."""
    from sim.validate.real import predict_steps

    tm = build_calibrated(one_gpu(host=HOST))
    bare = build_calibrated(
        one_gpu(host=replace(HOST, gap_s=0.0, gap_per_sequence_s=0.0, gap_per_chunk_s=0.0))
    )
    steps = pa.table({
        "decode_context_tokens": pa.array([[8000, 9000], [], [100]], pa.list_(pa.int32())),
        "prefill_context_tokens": pa.array([[], [0], [256]], pa.list_(pa.int32())),
        "prefill_new_tokens": pa.array([[], [2048], [300]], pa.list_(pa.int32())),
        "prefill_last_chunk": pa.array([[], [True], [False]], pa.list_(pa.bool_())),
    })  # fmt: skip
    assert predict_steps(steps, tm) == pytest.approx(predict_steps(steps, bare), rel=1e-12)
    assert tm.step_s(2, tm.decode_seq_terms(8001, 1).scaled(2), ()) > predict_steps(steps, tm)[0]


def _case_scenario(name: str) -> dict:
    """The scenario of a validation case, as a mapping to change."""
    import yaml

    from sim.paths import project_root

    return yaml.safe_load((project_root() / f"scenarios/validation/{name}.yaml").read_text())["scenario"]


def _first_timing(doc: dict):
    """The timing model of the first instance a scenario mapping builds for its first model."""
    from sim.cluster.build import build_simulation
    from sim.config.errors import validate_or_raise
    from sim.config.scenario import Scenario
    from sim.timing.arith import build_arith

    scn = validate_or_raise(Scenario, doc, file="case")
    ref = scn.models[0]
    one = scn.for_model(ref.name)
    arith = build_arith(ref.name, kv_layout=ref.kv_layout, prefill_mode=ref.prefill_mode)
    return build_simulation(one, one.models[0], arith, out_dir=None).instances[0].timing


def test_an_sglang_v4_pool_takes_its_engines_eager_floor_unless_the_scenario_sets_one():
    """SGLang runs V4's prefill eagerly (sim.config.engine_rules): a pool's floor is its step's launches at the
    measured host time a launch; an explicit `timing.host.eager_*` wins; vLLM (graphed prefill) has none."""
    from sim.timing.host import HOST_S_PER_LAUNCH

    base = _case_scenario("sglang-v4-flash-4xb200-high-throughput-c1024")

    def floor(**changes) -> float:
        return _first_timing({**base, **changes})._eager_floor_s

    # V4-Flash, DP attention (attention TP 1), Mega MoE: 120 a step + 1,855 over the 43 layers, no drafter
    assert floor() == pytest.approx((120 + 1855) * HOST_S_PER_LAUNCH)
    assert floor(timing={"host": {"eager_step_s": 0, "eager_per_layer_s": 0}}) == 0.0
    assert floor(timing={"host": {"eager_step_s": 0.01}}) == pytest.approx(0.01 + 1855 * HOST_S_PER_LAUNCH)
    assert floor(engine={"name": "vllm"}) == 0.0
    # a drafter's block counts where it runs over the prompt (EAGLE's MTP extend), not DSpark's KV injection
    on = {"enabled": True, "workload_kind": "repeated_text"}
    mtp, dspark = ({**on, "v4": {"method": m, "draft_tokens": k}} for m, k in (("mtp", 1), ("dspark", 5)))
    per_layer = 1855 * HOST_S_PER_LAUNCH / 43
    assert floor(spec_decode=mtp) == pytest.approx(floor() + per_layer)
    assert floor(spec_decode=dspark, models=["deepseek-v4-flash-0731"]) == pytest.approx(floor())


def test_a_decode_step_lasts_at_least_the_engines_host_chain(one_gpu):
    """A decode step (no chunk) lasts max(its GPU time, the decode floor): the floor binds a small step, a step
    longer than it keeps its own time, a span is the sum of its steps across the crossover, and the step that
    ends a span is found with the floor too (sim.timing.host, docs/engines_and_validation.md section 18)."""
    plain = build_calibrated(one_gpu())
    # one sequence whose context grows 2,000 tokens a step: a floor between its first and last step is crossed
    grow = plain.decode_seq_terms(1000, 1)
    grow = type(grow)(context_tokens=1000.0, context_tokens_growth=2000.0)
    first, last = plain.step_s(1, grow, ()), plain.step_s(1, grow.after(199), ())
    assert last > first
    floor = (first + last) / 2
    tm = build_calibrated(one_gpu(host=HostCosts(decode_floor_s=floor)))
    assert tm.step_s(1, grow, ()) == floor  # the floor binds the small step
    assert tm.step_s(1, grow.after(199), ()) == last  # a longer step keeps its own time
    chunk = [PrefillChunk(64, 0, last_chunk=True)]  # a step with chunks: the eager floor's business, not this
    assert tm.step_s(1, grow, chunk) == plain.step_s(1, grow, chunk)
    steps = [tm.step_s(1, grow.after(k), ()) for k in range(200)]
    assert steps[0] == floor and steps[-1] > floor  # the crossover is inside the span
    for n in (1, 7, 64, 65, 200):
        assert tm.decode_span_s(1, grow, n) == pytest.approx(sum(steps[:n]), rel=1e-9)
    elapsed = sum(steps[:37]) + steps[37] / 2  # half way through the 38th step
    assert tm.decode_step_end(1, grow, elapsed) == (38, pytest.approx(sum(steps[:38]), rel=1e-9))


def test_decode_steps_without_the_terms_per_layer_part(context, h200_tables):
    """`decode_layer_term` off sheds the forward term's per-layer part from decode steps only: by exactly the
    layers times the part (the drafter's passes too), prefill chunks keep it (sim.timing.calibrated)."""
    ctx = context("deepseek-v4-flash", tp=4, ep=1, dp=1, accepted_tokens_per_step=3.51, draft_tokens=3)
    on, off = build_calibrated(ctx), build_calibrated(replace(ctx, decode_layer_term=False))
    assert on.layer_overhead_s > 0
    terms = on.decode_seq_terms(4400, 1).scaled(16)
    cut = (on.mt.every.layers + on.mt.tail.layers) * on.layer_overhead_s * (1 + on._draft_share)
    assert on.step_s(16, terms, ()) - off.step_s(16, terms, ()) == pytest.approx(cut, rel=1e-9)
    assert on.decode_breakdown(16, 4400)["forward_term_s"] - off.decode_breakdown(16, 4400)[
        "forward_term_s"
    ] == pytest.approx(cut, rel=1e-9)
    chunk = [PrefillChunk(4096, 0, last_chunk=True)]
    assert on.step_s(0, terms.scaled(0), chunk) == off.step_s(0, terms.scaled(0), chunk)


def test_sglang_v4_mtp_pools_take_the_engines_decode_rules_unless_the_scenario_sets_them():
    """SGLang (sim.config.engine_rules): a V4 pool with MTP decodes at least its host chain and without the
    term's per-layer part; `timing.host.decode_floor_s` and `timing.decode_layer_term` override; vLLM keeps
    both as before; without speculative decoding or on V4.1's DSpark there is no floor."""
    from sim.config.engine_rules import SGLANG_V4_EAGLE_HOST_CHAIN_S

    base = _case_scenario("sglang-v4-flash-4xb200-low-latency-c16")

    def timing(model: str = "deepseek-v4-flash", **changes):
        return _first_timing({**base, **changes, "models": [model]})

    t = timing()
    assert t._decode_floor_s == SGLANG_V4_EAGLE_HOST_CHAIN_S and t._decode_cut_s > 0
    terms = t.decode_seq_terms(4400, 1)
    assert t.step_s(1, terms, ()) == SGLANG_V4_EAGLE_HOST_CHAIN_S  # one request: the host chain binds
    assert timing(timing={"host": {"decode_floor_s": 0}})._decode_floor_s == 0.0
    assert timing(timing={"decode_layer_term": "on"})._decode_cut_s == 0.0
    vllm = timing(engine={"name": "vllm"})
    assert vllm._decode_floor_s == 0.0 and vllm._decode_cut_s == 0.0
    assert timing(engine={"name": "vllm"}, timing={"decode_layer_term": "off"})._decode_cut_s > 0
    assert timing(spec_decode={"enabled": False})._decode_floor_s == 0.0
    dspark = {**base["spec_decode"], "v41": {"method": "dspark", "draft_tokens": 5}}
    assert timing("deepseek-v4.1-flash", spec_decode=dspark)._decode_floor_s == 0.0
    # V4's own backbone with DSpark (0731): the chain is EAGLE's on the MTP block, not the family's; the engine
    # verifies the whole block (6 rows) and the step carries the drafter's 3 blocks
    v4_dspark = {**base["spec_decode"], "v4": {"method": "dspark", "draft_tokens": 5}}
    ds = timing("deepseek-v4-flash-0731", spec_decode=v4_dspark)
    assert ds._decode_floor_s == 0.0 and ds._decode_cut_s > 0
    # the whole block verified; the acceptance measured on SGLang's random text (PR #33083)
    assert ds.verified_tokens_per_step == 6 and ds.accepted_tokens_per_step == 5.45
    assert ds._draft_share > t._draft_share > 0


def test_the_host_time_a_launch_is_the_committed_measurements_mean():
    """sim.timing.host.HOST_S_PER_LAUNCH is the eager production pass's host issue time over its launches, the
    mean of the machines docs/carry/eager/host_issue/ recorded (the 5-layer stack, each machine's first run; a
    machine's `repeat/` is its second run in the same call, not a further machine)."""
    import json

    from sim.paths import project_root
    from sim.timing.host import HOST_S_PER_LAUNCH

    base = project_root() / "docs/carry/eager/host_issue"
    per_launch = []
    paths = [base / "host_issue.json", *sorted(base.glob("machine*/host_issue.json"))]
    assert len(paths) == 5
    for path in paths:
        reduced = next(p for p in json.loads(path.read_text())["passes"] if p["stack"] == "reduced")
        per_launch.append(reduced["pass_host_us_p50"] * 1e-6 / reduced["launches_per_pass"])
    assert HOST_S_PER_LAUNCH == pytest.approx(sum(per_launch) / len(per_launch))
    assert 20e-6 < min(per_launch) < max(per_launch) < 50e-6
