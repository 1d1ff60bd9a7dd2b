"""Units: the only module that defines unit constants. Decimal prefixes for bytes and rates
(GB = 1e9 B, as vendors quote HBM and links); binary ones only where a name says GiB."""

KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
KiB = 2**10
MiB = 2**20
GiB = 2**30
TiB = 2**40

GFLOP = 1e9
TFLOP = 1e12

US = 1e-6
MS = 1e-3
MINUTE_S = 60.0
HOUR_S = 3600.0
DAY_S = 86400.0


def gbps_to_bytes_per_s(gbit_per_s: float) -> float:
    """Network links are quoted in gigabits per second (Gbps); 8 bits per byte."""
    return gbit_per_s * 1e9 / 8.0


def gBps_to_bytes_per_s(gbyte_per_s: float) -> float:
    """Memory, PCIe and NVLink are quoted in gigabytes per second (GBps)."""
    return gbyte_per_s * 1e9
