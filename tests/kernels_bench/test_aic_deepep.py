"""kernels_bench.aic_deepep: the relative least-squares fit behind the profiles' scale_up.deepep block, and the
block it prints from AIConfigurator-shaped tables (written here, so no AIConfigurator install is needed)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from kernels_bench.aic_deepep import block, fit_relative, fits, normal_sm_fracs, sm_frac
from sim.hardware import load_hw


def test_a_line_is_recovered_exactly_and_noise_is_weighed_relatively():
    tokens = [1, 2, 4, 64, 1024]
    exact = fit_relative(tokens, [10.0 + 0.2 * t for t in tokens])
    assert exact.fixed_us == pytest.approx(10.0) and exact.per_token_us == pytest.approx(0.2)
    assert exact.worst_rel == pytest.approx(0.0, abs=1e-12) and exact.rows == 5
    # one small call 20 % high pulls the fixed part up, not the slope the large calls set
    noisy = fit_relative(tokens, [12.0] + [10.0 + 0.2 * t for t in tokens[1:]])
    assert noisy.fixed_us > 10.0 and noisy.per_token_us == pytest.approx(0.2, rel=0.05)
    with pytest.raises(ValueError, match="two distinct"):
        fit_relative([8, 8], [1.0, 1.1])


def _tables(root, fixed: float, slope: float):
    folder = root / "h200_sxm" / "comm" / "sglang" / "0.5.12"
    folder.mkdir(parents=True)
    shape = {"hidden_size": 4096, "num_topk": 6, "num_experts": 256}
    ll = [{**shape, "num_token": t, "dispatch_avg_t_us": fixed + slope * t, "combine_avg_t_us": 2 * (fixed + slope * t)}
          for t in (1, 8, 64, 1024)]  # fmt: skip
    ll.append(
        {**shape, "hidden_size": 7168, "num_token": 1, "dispatch_avg_t_us": 999.0, "combine_avg_t_us": 999.0}
    )
    normal = [{**shape, "num_token": t, "dispatch_sms": sms, "combine_sms": sms,
               "dispatch_transmit_us": 3 * fixed + slope * t * 20 / sms, "combine_transmit_us": 4 * fixed + slope * t}
              for t in (1, 512, 16384, 65536) for sms in (8, 20)]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(ll), folder / "wideep_deepep_ll_perf.parquet")
    pq.write_table(pa.Table.from_pylist(normal), folder / "wideep_deepep_normal_perf.parquet")


def test_the_block_reads_v4_flash_shapes_at_20_sms_and_parses_as_the_profile_schema(tmp_path):
    _tables(tmp_path, fixed=10.0, slope=0.1)
    f = fits(tmp_path, "h200_sxm")
    assert f["low_latency"]["dispatch"].fixed_us == pytest.approx(10.0)  # the 7168-hidden row is not read
    assert f["low_latency"]["combine"].per_token_us == pytest.approx(0.2)
    assert f["normal"]["dispatch"].fixed_us == pytest.approx(30.0)  # 20 SMs, up to 16,384 tokens
    assert f["normal"]["dispatch"].per_token_us == pytest.approx(0.1) and f["normal"]["dispatch"].rows == 3
    fracs = normal_sm_fracs(tmp_path, "h200_sxm")
    # the tables' dispatch goes wholly as 1 / SMs, their combine not at all
    assert fracs["dispatch"] == pytest.approx(1.0) and fracs["combine"] == pytest.approx(0.0, abs=1e-9)
    text = block("h200_sxm", f, fracs)
    parsed = yaml.safe_load("scale_up:\n" + text)["scale_up"]["deepep"]
    from sim.hardware.schema import DeepEp

    deepep = DeepEp.model_validate(parsed)
    assert deepep.normal.combine_us.value == pytest.approx(40.0)
    assert deepep.measured_ep_gpus.value == 8 and deepep.normal_sms.measured_sms.value == 20
    assert deepep.normal_sms.dispatch_sm_frac.value == pytest.approx(1.0)
    # the shipped profile holds a block of the same shape
    assert load_hw("nvidia-h200-hgx8").scale_up.deepep.low_latency.dispatch_us.src == ["EP1"]


def test_the_sm_share_is_the_part_that_goes_as_one_over_the_sms():
    # per-token = 2 + 60 / SMs: at 20 SMs, 3 of its 5 go as 1 / SMs
    sweep = {sms: 2.0 + 60.0 / sms for sms in (4, 8, 12, 16, 20, 24)}
    assert sm_frac(sweep, 20) == pytest.approx(0.6)
    assert sm_frac({4: 1.0, 24: 1.0}, 20) == pytest.approx(0.0)  # flat: the link, not the SMs
    with pytest.raises(ValueError, match="two SM counts"):
        sm_frac({20: 1.0}, 20)
