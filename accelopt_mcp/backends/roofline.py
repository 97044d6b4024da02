"""Hardware peaks and a roofline: how close a measured latency comes to what the chip can do.

A task states the work it does (`Roofline`: matmul and other FLOPs, and bytes that must cross the
memory bus); at the peaks that is an ideal time, and the ideal over the measured latency says how
much room is left (AccelOpt's percent of peak). A ratio above 1 means the measurement (or the
stated work) cannot be right.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, Field

from accelopt_mcp.models import Roofline

ComputeUnit = Literal["matmul_fp32", "matmul_bf16", "vector"]


class HardwarePeak(BaseModel):
    """Peak rates of one compute unit (a NeuronCore, a GPU), in bytes/s and FLOP/s."""

    name: str
    memory_bytes_per_s: float = Field(gt=0)
    matmul_fp32_flops_per_s: float = Field(gt=0)
    matmul_bf16_flops_per_s: float = Field(gt=0)
    vector_flops_per_s: float | None = Field(default=None, gt=0)
    """Element-wise (non-matmul) peak; None where no public figure exists."""
    source: str

    def flops_per_s(self, unit: ComputeUnit) -> float:
        if unit == "matmul_fp32":
            return self.matmul_fp32_flops_per_s
        if unit == "matmul_bf16":
            return self.matmul_bf16_flops_per_s
        if self.vector_flops_per_s is None:
            raise ValueError(
                f"no public vector-engine peak for {self.name!r}; use unit 'matmul_fp32' or "
                "'matmul_bf16', or pass a HardwarePeak with vector_flops_per_s"
            )
        return self.vector_flops_per_s


_GIB = 1024**3

# Per NeuronCore-v2 (a Trainium1 chip has two). HBM and matmul: half of the chip figures in AWS's
# "Trainium Architecture" page (820 GiB/s, 47.5 FP32 / 190 BF16 TFLOP/s per chip). The vector +
# scalar figure is the one NKIBench uses for element-wise kernels.
TRN1 = HardwarePeak(
    name="trn1",
    memory_bytes_per_s=410 * _GIB,
    matmul_fp32_flops_per_s=23.75e12,
    matmul_bf16_flops_per_s=95e12,
    vector_flops_per_s=286.72e9,
    source="AWS Neuron docs, Trainium Architecture (per chip / 2); NKIBench (vector+scalar)",
)

# Per NeuronCore-v3 (a Trainium2 chip has eight). AWS's "Trainium2 Architecture" page: 2.9 TB/s
# HBM and 181 FP32 TFLOP/s per chip; "NeuronCore-v3 Architecture": 79 BF16 TFLOP/s per core. AWS
# publishes no vector-engine FLOP/s for NeuronCore-v3, so element-wise percent-of-peak is left out.
TRN2 = HardwarePeak(
    name="trn2",
    memory_bytes_per_s=2.9e12 / 8,
    matmul_fp32_flops_per_s=181e12 / 8,
    matmul_bf16_flops_per_s=79e12,
    vector_flops_per_s=None,
    source="AWS Neuron docs, Trainium2 Architecture (per chip / 8), NeuronCore-v3 Architecture",
)

# NVIDIA datasheets (SXM, dense): FP32 on CUDA cores, BF16 on tensor cores; H200 differs in memory.
H100 = HardwarePeak(
    name="h100",
    memory_bytes_per_s=3.35e12,
    matmul_fp32_flops_per_s=67e12,
    matmul_bf16_flops_per_s=989.5e12,
    vector_flops_per_s=67e12,
    source="NVIDIA H100 SXM datasheet (dense)",
)
H200 = HardwarePeak(
    name="h200",
    memory_bytes_per_s=4.8e12,
    matmul_fp32_flops_per_s=67e12,
    matmul_bf16_flops_per_s=989.5e12,
    vector_flops_per_s=67e12,
    source="NVIDIA H200 SXM datasheet (dense)",
)

PEAKS: dict[str, HardwarePeak] = {p.name: p for p in (TRN1, TRN2, H100, H200)}


def peak_for(hardware: str | HardwarePeak) -> HardwarePeak:
    """The peak table for a hardware name such as 'trn1' or 'NVIDIA H200' (case-insensitive)."""
    if isinstance(hardware, HardwarePeak):
        return hardware
    key = hardware.lower()
    for name, peak in PEAKS.items():
        if name in key.replace(" ", "").replace("-", ""):
            return peak
    raise ValueError(f"no peak figures for hardware {hardware!r}; known: {sorted(PEAKS)}")


def percent_of_peak(
    latency_ms: float,
    roofline: Roofline,
    hardware: str | HardwarePeak,
    *,
    unit: ComputeUnit | None = None,
) -> dict[str, float | str]:
    """Achieved rates and their fractions of the peak for a kernel that took `latency_ms`.

    The ideal time is the longest of each engine's work at its peak and the bytes at the
    memory peak: AccelOpt's theoretical latency, max(matmul_flops / matmul peak, vector_flops /
    vector peak, bytes / bandwidth), for a roofline in its form; the single-engine form has one
    compute term. `roofline_fraction` is that ideal time over the measured one: 1.0 means the
    kernel runs at the bound that binds it (`bound`: 'compute' or 'memory'). `unit` is the
    compute engine whose term is the longer (the binding one), `compute_fraction` its share of
    its peak (its FLOPs over the latency, over its peak: so with both engines busy it is the
    engine the kernel leans on, not their sum) and `achieved_tflops_per_s` its FLOP/s. In
    AccelOpt's form `matmul_fraction` and `vector_fraction` give each engine's share too.

    `unit` given overrides the roofline's compute_unit (in AccelOpt's form: which matmul peak,
    fp32 or bf16, the matmul FLOPs are held against).
    """
    if latency_ms <= 0:
        raise ValueError(f"latency_ms must be positive to compare against a peak, got {latency_ms}")
    if unit is not None and unit != roofline.compute_unit:
        if roofline.split and unit == "vector":
            raise ValueError("unit 'vector' cannot hold matmul_flops: give a matmul unit, or none")
        roofline = roofline.model_copy(update={"compute_unit": unit})
    peak = peak_for(hardware)
    seconds = latency_ms / 1e3
    terms = roofline.compute_terms()
    fractions = {
        engine: flops / seconds / peak.flops_per_s(engine) for engine, flops in terms.items()
    }
    binding = max(fractions, key=fractions.__getitem__)
    compute_fraction = fractions[binding]
    bytes_per_s = roofline.bytes_moved / seconds
    memory_fraction = bytes_per_s / peak.memory_bytes_per_s
    report: dict[str, float | str] = {
        "hardware": peak.name,
        "unit": binding,
        "achieved_tflops_per_s": terms[binding] / seconds / 1e12,
        "achieved_gbytes_per_s": bytes_per_s / 1e9,
        "compute_fraction": compute_fraction,
        "memory_fraction": memory_fraction,
        "roofline_fraction": max(compute_fraction, memory_fraction),
        "bound": "compute" if compute_fraction >= memory_fraction else "memory",
    }
    if roofline.split:
        report["matmul_fraction"] = fractions[roofline.compute_unit]
        report["vector_fraction"] = fractions.get("vector", 0.0)
    return report


def is_above_peak(report: dict[str, float | str], *, slack: float = 1.05) -> bool:
    """True when a figure claims more than the hardware can do; `slack` absorbs rounding in the
    stated work and clock boost, so only clearly impossible results are flagged."""
    return float(report["roofline_fraction"]) > slack


PERCENT_COUNTERS = (
    "flops_pct_of_peak",
    "bandwidth_pct_of_peak",
    "roofline_pct_of_peak",
    "memory_bound",
)
"""Evaluation.hardware_counters names every backend gives its percent of peak under (what the
planner, the job results and the agent's stopping rule read): achieved FLOP/s of the binding
compute engine (the one whose work takes longer at its peak: matmul or vector in AccelOpt's
form) and bytes/s as a percentage of their peaks, the larger of the two (the ideal time over the
measured one, AccelOpt's percent of peak: 100 means the kernel runs at its roofline), and 1.0
when memory binds, 0.0 when compute does."""


def percent_counters(report: dict[str, float | str]) -> dict[str, float]:
    """The PERCENT_COUNTERS of a percent_of_peak report."""
    return {
        "flops_pct_of_peak": 100.0 * float(report["compute_fraction"]),
        "bandwidth_pct_of_peak": 100.0 * float(report["memory_fraction"]),
        "roofline_pct_of_peak": 100.0 * float(report["roofline_fraction"]),
        "memory_bound": 1.0 if report["bound"] == "memory" else 0.0,
    }


def peak_counters(report: dict[str, float | str]) -> dict[str, float]:
    """The numeric part of a percent_of_peak report, named for Evaluation.hardware_counters,
    and the same figures in percent under the names every backend shares (PERCENT_COUNTERS)."""
    counters = {f"peak_{k}": float(v) for k, v in report.items() if isinstance(v, int | float)}
    return counters | percent_counters(report)


PEAK_NAME_COUNTERS = ("peak_cores", "peak_matmul", "peak_gflops", "peak_gbytes_per_s")
"""The counters that name the peak a percent is against, where a backend measures its peaks
per core count (cpu): how many cores' peak, 1.0 when the compute peak is the fp32 matmul one
and 0.0 when it is the elementwise one, and the two peaks themselves."""


def compute_peak_name(cores: float, matmul: bool | None) -> str:
    """'1-core fp32 matmul peak', '2-core elementwise fp32 peak' ('1-core compute peak' when
    the unit is not known)."""
    unit = {True: "fp32 matmul ", False: "elementwise fp32 ", None: "compute "}[matmul]
    return f"{cores:g}-core {unit}peak"


def memory_peak_name(cores: float) -> str:
    return f"{cores:g}-core memory peak"


def peak_against(counters: Mapping[str, float]) -> str | None:
    """The peak a percent of peak (roofline_pct_of_peak) is taken against, from the counters
    (PEAK_NAME_COUNTERS): 'the 1-core fp32 matmul peak of 96.8 GFLOP/s' when compute binds,
    'the 1-core memory peak of 20.1 GB/s' when memory does; None when the counters do not
    say how many cores' peak it is (a backend with datasheet peaks, an older profile)."""
    cores = counters.get("peak_cores")
    if cores is None:
        return None
    if counters.get("memory_bound", 0.0) >= 0.5 and "peak_gbytes_per_s" in counters:
        return f"the {memory_peak_name(cores)} of {_rate(counters['peak_gbytes_per_s'])} GB/s"
    if "peak_gflops" not in counters:
        return None
    matmul = counters.get("peak_matmul")
    name = compute_peak_name(cores, None if matmul is None else matmul >= 0.5)
    return f"the {name} of {_rate(counters['peak_gflops'])} GFLOP/s"


def _rate(value: float) -> str:
    """Three significant digits, whole numbers from 1000 up."""
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


NO_ROOFLINE = "no roofline declared"
"""How a log line starts when a task states no work to put its latency against."""
HOW_TO_DECLARE = (
    "add `def roofline(): return {'matmul_flops': ..., 'vector_flops': ..., 'bytes_moved': ...}` "
    "to the NKIBench task module, or a `roofline:matmul_flops=...,vector_flops=...,"
    "bytes_moved=...` tag to the definition (FlashInfer-Trace): AccelOpt's count of the work one "
    "call must do, matmul FLOPs apart from all other FLOPs (either may be 0), and the bytes it "
    "must read plus write (the older {'flops', 'bytes_moved', 'compute_unit'} form still works)"
)
NO_ROOFLINE_LINE = f"{NO_ROOFLINE}, so no percent of peak: {HOW_TO_DECLARE}"
ROOFLINE_LINE = "roofline: "
"""How the log line with the percent of peak starts."""
