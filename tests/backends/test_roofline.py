"""Roofline math: achieved rates, fractions of peak, the binding bound, the above-peak flag."""

import math

import pytest

from accelopt_mcp.backends.roofline import (
    PERCENT_COUNTERS,
    TRN1,
    TRN2,
    HardwarePeak,
    is_above_peak,
    peak_against,
    peak_counters,
    peak_for,
    percent_counters,
    percent_of_peak,
)
from accelopt_mcp.models import Roofline


def test_trn1_figures_are_the_nkibench_ones() -> None:
    assert TRN1.memory_bytes_per_s == 410 * 1024**3
    assert TRN1.matmul_fp32_flops_per_s == 23.75e12
    assert TRN1.vector_flops_per_s == 286.72e9


def test_memory_bound_kernel_at_exactly_peak_bandwidth() -> None:
    moved = 410 * 1024**3 * 1e-3  # what trn1 moves in 1 ms
    report = percent_of_peak(1.0, Roofline(flops=1e6, bytes_moved=moved), "trn1")
    assert report["bound"] == "memory"
    assert math.isclose(float(report["memory_fraction"]), 1.0)
    assert math.isclose(float(report["compute_fraction"]), 1e6 / 1e-3 / 23.75e12)
    assert math.isclose(float(report["roofline_fraction"]), 1.0)
    assert not is_above_peak(report)


def test_compute_bound_kernel_at_half_peak() -> None:
    flops = 23.75e12 * 2e-3 / 2  # half of what trn1 can do in 2 ms
    report = percent_of_peak(2.0, Roofline(flops=flops, bytes_moved=1024), TRN1)
    assert report["bound"] == "compute"
    assert math.isclose(float(report["roofline_fraction"]), 0.5)
    assert math.isclose(float(report["achieved_tflops_per_s"]), 23.75 / 2)


def test_vector_unit_uses_the_vector_peak_and_trn2_has_none() -> None:
    report = percent_of_peak(1.0, Roofline(flops=286.72e6, bytes_moved=0), "trn1", unit="vector")
    assert math.isclose(float(report["compute_fraction"]), 1.0)
    with pytest.raises(ValueError, match="no public vector-engine peak"):
        percent_of_peak(1.0, Roofline(flops=1, bytes_moved=0), TRN2, unit="vector")


def test_above_peak_is_flagged_and_counters_are_numeric() -> None:
    report = percent_of_peak(1e-3, Roofline(flops=1e12, bytes_moved=0), "trn1")
    assert is_above_peak(report)
    counters = peak_counters(report)
    assert counters["peak_roofline_fraction"] == report["roofline_fraction"]
    assert "peak_bound" not in counters and all(isinstance(v, float) for v in counters.values())


def test_every_backend_reports_percent_of_peak_under_the_same_names() -> None:
    moved = 410 * 1024**3 * 1e-3 / 4  # a quarter of what trn1 moves in 1 ms
    report = percent_of_peak(1.0, Roofline(flops=23.75e9 / 10, bytes_moved=moved), "trn1")
    counters = peak_counters(report)
    assert set(PERCENT_COUNTERS) <= set(counters)
    assert counters["bandwidth_pct_of_peak"] == pytest.approx(25.0)
    assert counters["flops_pct_of_peak"] == pytest.approx(10.0)
    assert counters["roofline_pct_of_peak"] == pytest.approx(25.0)
    assert counters["memory_bound"] == 1.0
    compute = percent_counters(percent_of_peak(1.0, Roofline(flops=23.75e9, bytes_moved=0), TRN1))
    assert compute["memory_bound"] == 0.0 and compute["roofline_pct_of_peak"] == pytest.approx(100)


def test_gpu_names_resolve_and_unknown_hardware_is_a_clear_error() -> None:
    assert peak_for("NVIDIA H200").name == "h200"
    assert peak_for("NVIDIA H100 80GB HBM3").name == "h100"
    custom = HardwarePeak(
        name="x",
        memory_bytes_per_s=1,
        matmul_fp32_flops_per_s=1,
        matmul_bf16_flops_per_s=1,
        source="test",
    )
    assert peak_for(custom) is custom
    with pytest.raises(ValueError, match="no peak figures for hardware 'tpu-v5'"):
        peak_for("tpu-v5")
    with pytest.raises(ValueError, match="latency_ms must be positive"):
        percent_of_peak(0.0, Roofline(flops=1, bytes_moved=1), "trn1")


def test_a_percent_of_a_measured_peak_names_whose_peak_it_is() -> None:
    counters = {"peak_cores": 2.0, "peak_matmul": 1.0, "peak_gflops": 182.4}
    counters |= {"peak_gbytes_per_s": 40.0, "memory_bound": 0.0}
    assert peak_against(counters) == "the 2-core fp32 matmul peak of 182 GFLOP/s"
    assert peak_against(counters | {"peak_matmul": 0.0}) == (
        "the 2-core elementwise fp32 peak of 182 GFLOP/s"
    )
    assert peak_against(counters | {"memory_bound": 1.0}) == "the 2-core memory peak of 40 GB/s"
    assert peak_against(counters | {"peak_cores": 1.0, "peak_gflops": 1234.0}) == (
        "the 1-core fp32 matmul peak of 1234 GFLOP/s"
    )
    # Datasheet peaks (no core count among the counters): nothing to name here.
    assert (
        peak_against(peak_counters(percent_of_peak(1.0, Roofline(flops=1, bytes_moved=1), TRN1)))
        is None
    )


# AccelOpt's form: trn1 does 23.75 GFLOP of fp32 matmul, 0.28672 GFLOP of vector work and moves
# 0.44 GB (410 GiB/s) in 1 ms; each case makes one of the three terms take 0.5 ms of a 1 ms
# kernel, the other two less.
_MS_MATMUL = 23.75e9
_MS_VECTOR = 286.72e6
_MS_BYTES = 410 * 1024**3 * 1e-3


@pytest.mark.parametrize(
    ("work", "bound", "unit"),
    [
        (
            Roofline(
                matmul_flops=_MS_MATMUL / 2, vector_flops=_MS_VECTOR / 4, bytes_moved=_MS_BYTES / 8
            ),
            "compute",
            "matmul_fp32",
        ),
        (
            Roofline(
                matmul_flops=_MS_MATMUL / 8, vector_flops=_MS_VECTOR / 2, bytes_moved=_MS_BYTES / 4
            ),
            "compute",
            "vector",
        ),
        (
            Roofline(
                matmul_flops=_MS_MATMUL / 4, vector_flops=_MS_VECTOR / 8, bytes_moved=_MS_BYTES / 2
            ),
            "memory",
            "matmul_fp32",
        ),
    ],
    ids=["matmul-binds", "vector-binds", "memory-binds"],
)
def test_accelopt_form_percent_is_the_longest_term_over_the_latency(
    work: Roofline, bound: str, unit: str
) -> None:
    """AccelOpt's percent of peak: max(matmul / matmul peak, vector / vector peak, bytes /
    bandwidth) over the measured time; the binding term decides bound and unit."""
    report = percent_of_peak(1.0, work, TRN1)
    counters = percent_counters(report)
    assert counters["roofline_pct_of_peak"] == pytest.approx(50.0)
    assert report["bound"] == bound and report["unit"] == unit
    assert counters["memory_bound"] == (1.0 if bound == "memory" else 0.0)
    # Each engine's share apart; flops_pct_of_peak is the one the kernel leans on.
    matmul_flops, vector_flops = work.matmul_flops or 0.0, work.vector_flops or 0.0
    matmul = float(report["matmul_fraction"])
    vector = float(report["vector_fraction"])
    assert matmul == pytest.approx(matmul_flops / _MS_MATMUL)
    assert vector == pytest.approx(vector_flops / _MS_VECTOR)
    assert counters["flops_pct_of_peak"] == pytest.approx(100 * max(matmul, vector))
    assert counters["bandwidth_pct_of_peak"] == pytest.approx(100 * work.bytes_moved / _MS_BYTES)
    binding_flops = vector_flops if unit == "vector" else matmul_flops
    assert float(report["achieved_tflops_per_s"]) == pytest.approx(binding_flops / 1e9)
    # In 0.5 ms it runs at its roofline (100 %, not flagged); in 0.4 ms it would beat it.
    assert not is_above_peak(percent_of_peak(0.5, work, TRN1))
    assert is_above_peak(percent_of_peak(0.4, work, TRN1))


def test_accelopt_form_keys_absent_flops_and_bf16() -> None:
    # Only matmul work: no vector peak is needed (trn2 has none), the absent count is 0.
    only_matmul = Roofline(matmul_flops=79e9, bytes_moved=0, compute_unit="matmul_bf16")
    assert only_matmul.vector_flops == 0.0 and only_matmul.split
    report = percent_of_peak(1.0, only_matmul, TRN2)
    assert report["unit"] == "matmul_bf16" and float(report["roofline_fraction"]) == 1.0
    # The override picks the matmul peak: fp32 on trn2 is 22.6 TFLOP/s, so 79 GFLOP in 1 ms
    # is over 3x it.
    assert is_above_peak(percent_of_peak(1.0, only_matmul, TRN2, unit="matmul_fp32"))
    with pytest.raises(ValueError, match="unit 'vector' cannot hold matmul_flops"):
        percent_of_peak(1.0, only_matmul, TRN2, unit="vector")
    with pytest.raises(ValueError, match="no public vector-engine peak"):
        percent_of_peak(1.0, Roofline(vector_flops=1, bytes_moved=0), TRN2)
    # A kernel that only moves data: both counts 0, memory binds.
    copy = percent_of_peak(
        1.0, Roofline(matmul_flops=0, vector_flops=0, bytes_moved=_MS_BYTES), TRN1
    )
    assert copy["bound"] == "memory" and float(copy["roofline_fraction"]) == pytest.approx(1.0)
    for bad, message in [
        ({"bytes_moved": 1}, "needs matmul_flops and/or vector_flops"),
        ({"flops": 1, "matmul_flops": 1, "bytes_moved": 1}, "not both"),
        ({"vector_flops": 1, "bytes_moved": 1, "compute_unit": "vector"}, "names the matmul"),
        ({"matmul_flops": -1, "bytes_moved": 1}, "greater than or equal to 0"),
    ]:
        with pytest.raises(ValueError, match=message):
            Roofline.model_validate(bad)


def test_both_forms_round_trip_through_the_definition_tag() -> None:
    for declared in [
        Roofline(matmul_flops=2 * 384 * 1152 * 512, vector_flops=0.5, bytes_moved=4e6),
        Roofline(vector_flops=3 * 2048 * 3584, bytes_moved=8 * 2048 * 3584),
        Roofline(matmul_flops=1e9, bytes_moved=1, compute_unit="matmul_bf16"),
        Roofline(flops=2**20, bytes_moved=3 * 2**20 + 7, compute_unit="vector"),
    ]:
        tag = declared.to_tag()
        assert Roofline.from_tags(["format:nkibench", tag]) == declared, tag
        assert Roofline.model_validate(declared.model_dump()) == declared
    tag = Roofline(vector_flops=6, bytes_moved=8).to_tag()
    assert tag == "roofline:matmul_flops=0,vector_flops=6,bytes_moved=8"
