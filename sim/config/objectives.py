"""`slo:`, `pricing:` and `outputs:` of a scenario: what a run is judged by and what it writes."""

from __future__ import annotations

from pydantic import Field, model_validator

from sim.config.base import StrictModel


class Slo(StrictModel):
    """A request attains the SLO when TTFT <= ttft_s and TPOT <= tpot_s; p99 targets judge the run."""

    ttft_s: float = Field(5.0, gt=0, description="time to first token per request")  # a choice [D]
    tpot_s: float = Field(0.05, gt=0, description="time per output token after the first")  # 20 tok/s [D]
    ttft_p99_s: float | None = Field(None, gt=0, description="run-level target for p99 TTFT")
    tpot_p99_s: float | None = Field(None, gt=0, description="run-level target for p99 TPOT")


class ScenarioPricing(StrictModel):
    """Which price of the hardware profile to use (sim.hardware.pricing documents the formulas)."""

    term: str | None = Field(None, description="a pricing term of the profile; null = its default_term")
    usd_per_gpu_hour: float | None = Field(None, gt=0, description="a price of your own, instead of a term")
    include_energy: bool = Field(True, description="add energy to capex terms (rental prices include it)")
    dram_usd_per_gb: float | None = Field(None, ge=0, description="extra DRAM price; null = the profile's")
    # hardware.md §3.5 [B]: ~$4-19/GB in 2025-26
    ssd_usd_per_tb: float | None = Field(None, ge=0, description="extra SSD price; null = the profile's")
    # hardware.md §3.5 [B]: ~$100-360/TB in 2025-26
    energy_usd_per_kwh: float | None = Field(None, ge=0, description="null = the profile's")
    pue: float | None = Field(None, ge=1, description="power usage effectiveness; null = the profile's")

    @model_validator(mode="after")
    def _one_price(self) -> ScenarioPricing:
        if self.term is not None and self.usd_per_gpu_hour is not None:
            raise ValueError("give either term or usd_per_gpu_hour, not both")
        return self


class Outputs(StrictModel):
    timeseries_interval_s: float = Field(
        60.0, gt=0, description="sampling interval of pool/queue time series"
    )
    write_requests: bool = Field(True, description="write the per-request log (Parquet)")
