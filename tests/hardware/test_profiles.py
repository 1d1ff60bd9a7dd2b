"""Hardware profiles: every file loads, numbers match hardware.md, units and sources are enforced."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from sim.config.suffixes import unit_of
from sim.errors import InputError
from sim.hardware import DTYPES, HwProfile, hw_names, load_hw, sourced_numbers
from sim.hardware import schema as hw_schema
from sim.paths import hwprofiles_dir

EXPECTED = {
    "nvidia-h100-hgx8", "nvidia-h200-hgx8", "nvidia-b200-hgx8", "nvidia-gb200-nvl72",
    "nvidia-b300-hgx8", "amd-mi300x-ubb8", "amd-mi355x-ubb8",
}  # fmt: skip


def test_every_profile_loads_and_ids_match_files():
    names = hw_names()
    assert EXPECTED <= set(names)
    for name in names:
        hw = load_hw(name)
        assert hw.id == name
        assert hw.gpus_per_node in (4, 8)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_number_has_a_known_source_and_estimates_are_flagged(name):
    hw = load_hw(name)
    items = list(sourced_numbers(hw))
    assert len(items) > 30
    for path, item in items:
        assert item.src and all(s in hw.sources for s in item.src), path
        if item.tag in ("C", "D"):
            assert item.est, path


def test_h200_matches_hardware_md():
    hw = load_hw("nvidia-h200-hgx8")
    # hardware.md §1 / §8, but HBM as nvidia-smi reports it: 143,771 MiB, NVIDIA's "141 GB" being binary
    assert hw.accelerator.hbm_capacity_gb.value == 150.76
    assert hw.hbm_capacity_bytes == 150.76e9 == pytest.approx(143771 * 2**20, rel=1e-4)
    assert hw.hbm_bw_bytes_per_s == 4.8e12
    assert hw.peak_tflops("bf16") == 989
    assert hw.peak_flops_per_s("fp8") == 1979e12
    assert hw.peak_tflops("fp4") is None
    assert not hw.supports_dtype("fp4")
    assert hw.scale_up_bw_per_gpu_bytes_per_s == 450e9  # 900 GB/s bidir / 2
    assert hw.scale_out_bw_per_gpu_bytes_per_s == 50e9  # 400 Gb/s / 8
    assert hw.scale_out_bw_per_node_bytes_per_s == 400e9
    assert hw.pcie_bw_per_gpu_bytes_per_s == 64e9
    assert hw.host_dram_bytes == 2048e9
    assert hw.ssd_capacity_bytes == pytest.approx(8 * 3.84e12)
    assert hw.ssd_read_bytes_per_s == pytest.approx(52e9)
    assert hw.node_power_w == 10200
    assert hw.scale_up_latency_s == pytest.approx(3e-6)  # hardware.md §6 example, est
    assert hw.scale_out_latency_s == pytest.approx(5e-6)  # a guess, est
    assert hw.scale_out.latency_us.est
    # kernels.md §1 measured ceilings, kept apart from the peaks
    assert hw.measured.hbm_copy_TBps.value == 4.23
    assert hw.measured.bf16_gemm_tflops.value == 790
    assert hw.measured.fp8_gemm_tflops.value == 1443
    assert hw.measured.hbm_copy_TBps.tag == "M"


def test_fp4_on_hopper_is_an_input_error_naming_supported_dtypes():
    with pytest.raises(InputError) as err:
        load_hw("nvidia-h100-hgx8").peak_flops_per_s("fp4")
    assert "no native fp4" in str(err.value)
    assert "allowed: bf16, fp8" in str(err.value)


@pytest.mark.parametrize(
    ("name", "hbm_gb", "bw_tbps", "fp8", "fp4", "domain"),
    [
        ("nvidia-h100-hgx8", 85.52, 3.35, 1979, None, 8),  # nvidia-smi's 81,559 MiB (hardware.md: "80 GB")
        ("nvidia-b200-hgx8", 192.27, 8.0, 4500, 9000, 8),  # nvidia-smi's 183,359 MiB (hardware.md: "180 GB usable")
        ("nvidia-gb200-nvl72", 186, 8.0, 5000, 10000, 72),
        ("nvidia-b300-hgx8", 270, 8.0, 4500, 13100, 8),
        ("amd-mi300x-ubb8", 192, 5.3, 2615, None, 8),
        ("amd-mi355x-ubb8", 288, 8.0, 5000, 10000, 8),
    ],
)
def test_quick_reference_rows(name, hbm_gb, bw_tbps, fp8, fp4, domain):
    """hardware.md §8 quick-reference rows."""
    hw = load_hw(name)
    assert hw.accelerator.hbm_capacity_gb.value == hbm_gb
    assert hw.accelerator.hbm_bw_TBps.value == bw_tbps
    assert hw.peak_tflops("fp8") == fp8
    assert hw.peak_tflops("fp4") == fp4
    assert hw.scale_up_domain_gpus == domain


def test_gb200_tray_is_a_node_and_rack_is_the_domain():
    hw = load_hw("nvidia-gb200-nvl72")
    assert hw.gpus_per_node == 4
    assert hw.rack.gpus.value == 72
    # NVLink-C2C 900 GB/s bidir per superchip shared by 2 GPUs -> 225 GB/s per GPU per direction
    assert hw.pcie_bw_per_gpu_bytes_per_s == 225e9


def _write_variant(tmp_path: Path, old: str, new: str) -> Path:
    text = (hwprofiles_dir() / "nvidia-h200-hgx8.yaml").read_text()
    assert old in text
    path = tmp_path / "variant.yaml"
    path.write_text(text.replace(old, new, 1))
    return path


def test_wrong_unit_suffix_is_rejected_with_the_expected_name(tmp_path):
    path = _write_variant(tmp_path, "hbm_bw_TBps:", "hbm_bw_Gbps:")
    with pytest.raises(InputError) as err:
        load_hw(path)
    assert err.value.lines == [
        f"{path}: accelerator.hbm_bw_Gbps: wrong unit suffix '_Gbps' = gigabits/s (1e9 bits/s); "
        "this field is 'hbm_bw_TBps', in terabytes/s (1e12 bytes/s); allowed: model, count_per_node, "
        "hbm_capacity_gb, hbm_capacity_nominal_gb, hbm_bw_TBps, dense_tflops, tdp_w, sm_count, sm_clock_max_MHz, "
        "compute_capability, gemm_fp8_peak_frac, sustained_compute_slowdown_x, sustained_compute_onset_s, "
        "sustained_compute_delay_s, sustained_recovery_x"
    ]


def test_gigabytes_for_a_nic_line_rate_is_rejected(tmp_path):
    path = _write_variant(tmp_path, "nic_line_rate_Gbps_each:", "nic_line_rate_GBps_each:")
    with pytest.raises(InputError, match=r"scale_out\.nic_line_rate_GBps_each: wrong unit suffix '_GBps'"):
        load_hw(path)


def test_unknown_unit_suffix_is_rejected(tmp_path):
    path = _write_variant(tmp_path, "tdp_w:", "tdp_kW:")
    with pytest.raises(InputError, match=r"accelerator\.tdp_kW: wrong unit suffix '_kW' = not a unit sim knows; "
                       r"this field is 'tdp_w'"):  # fmt: skip
        load_hw(path)


def test_number_without_source_and_unknown_source_id(tmp_path):
    path = _write_variant(tmp_path, "tdp_w: {value: 700, src: [S3]}", "tdp_w: 700")
    with pytest.raises(InputError, match=r"accelerator\.tdp_w: every number needs its source"):
        load_hw(path)
    path = _write_variant(
        tmp_path, "cpu_cores: {value: 112, src: [S30]}", "cpu_cores: {value: 112, src: [S999]}"
    )
    with pytest.raises(InputError, match=r"host\.cpu_cores\.src: unknown source id \(got 'S999'\)"):
        load_hw(path)


def test_derived_value_without_est_flag_is_rejected(tmp_path):
    path = _write_variant(tmp_path, 'est: true, tag: D, note: "16 channels', 'tag: D, note: "16 channels')
    with pytest.raises(InputError, match=r"host\.dram_bw_GBps: a \[D\] value must carry est: true"):
        load_hw(path)


def test_unknown_profile_lists_known_ids():
    with pytest.raises(InputError) as err:
        load_hw("nvidia-h300")
    assert "allowed: amd-mi300x-ubb8" in str(err.value)


# Count fields carry no unit suffix by design; every other numeric field must have one.
_COUNTS = {"count_per_node", "sm_count", "gpus_per_link", "cpu_cores", "nvme_drives", "nics", "gpus", "trays",
           "commitment_years", "value", "pue", "measured_sms"}  # fmt: skip
_DTYPE_KEYS = set(DTYPES)


def _numeric(annotation) -> bool:
    text = str(annotation)
    if "Sourced[str]" in text:  # a sourced label (compute_capability), not a quantity
        return False
    return any(t in text for t in ("int", "float", "Sourced"))


def test_every_numeric_schema_field_names_its_unit():
    models = [
        m for m in vars(hw_schema).values() if isinstance(m, type) and issubclass(m, hw_schema.StrictModel)
    ]
    bad = []
    for model in models:
        for name, info in model.model_fields.items():
            if not _numeric(info.annotation) or name in _COUNTS or name in _DTYPE_KEYS:
                continue
            if model is hw_schema.Achievable or name.startswith("mfu_"):
                continue  # fractions of a peak: unitless by definition
            if unit_of(name) is None:
                bad.append(f"{model.__name__}.{name}")
    assert bad == []
    assert typing.get_args(HwProfile.model_fields["vendor"].annotation) == ("nvidia", "amd")
