"""Percent of peak on the cpu backend: real profiles of the example tasks, pinned to one core
(and to two), held against this host's peaks for as many cores (measured for real with tiny
sizes, kept in a real store), the peak named wherever the percent is shown."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from accelopt_mcp.backends.cpu import CpuBackend
from accelopt_mcp.backends.cpu_peaks import PeakSource, forget_peaks
from accelopt_mcp.backends.cpu_peaks_records import CpuPeaks, PeakSizes
from accelopt_mcp.comparing import figures_text, roofline_text, shown_counters
from accelopt_mcp.engine.prompts import describe_profile
from accelopt_mcp.models import Evaluation, Roofline, Task
from accelopt_mcp.store.sqlite import SqliteStore
from accelopt_mcp.tasks.kernels import load_solution
from accelopt_mcp.tasks.loader import load_task
from tests.bench import quick_bench

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "cpu" / "nkibench"
RMSNORM = EXAMPLES / "reference" / "rmsnorm_M256_N1024_numpy_0.py"
RMSNORM_KERNEL = EXAMPLES / "kernels" / "rmsnorm_M256_N1024_fast.py"
MATMUL = EXAMPLES / "reference" / "matmul_bias_M128_K256_N256_numpy_0.py"
MATMUL_KERNEL = EXAMPLES / "kernels" / "matmul_bias_M128_K256_N256_0.py"
# The evaluations run on one core: the every-core figures are not needed.
ONE_CORE = PeakSizes.tiny(all_cores=False)
# What is checked is how the figures are reported, not how precisely they are timed.
QUICK = quick_bench(
    seeds=[0], iterations=5, max_timing_seconds=1, target_ci=0.2, timeout_seconds=30
)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqliteStore]:
    with SqliteStore(str(tmp_path_factory.mktemp("roofline") / "kernels.db")) as db:
        yield db


@pytest.fixture(scope="module")
def backend(store: SqliteStore) -> Iterator[CpuBackend]:
    forget_peaks()
    # Pinned to one core, as the engine's pool pins every evaluation.
    core = max(os.sched_getaffinity(0))
    yield CpuBackend(cpus={core}, peaks=PeakSource(store, sizes=ONE_CORE, peaks_file=None))
    forget_peaks()


@pytest.fixture(scope="module")
def rmsnorm() -> Task:
    task = load_task(RMSNORM)
    assert task.roofline is not None and task.roofline.compute_unit == "vector"
    return task


def _profile(backend: CpuBackend, task: Task, kernel: Path) -> Evaluation:
    solution = load_solution(kernel, task, target_hardware=["cpu"])
    evaluation = backend.evaluate(task, solution, QUICK)
    assert evaluation.passed, evaluation.log
    return evaluation


def test_percent_of_peak_is_latency_times_the_stored_peaks(
    backend: CpuBackend, store: SqliteStore, rmsnorm: Task
) -> None:
    evaluation = _profile(backend, rmsnorm, RMSNORM_KERNEL)
    counters = evaluation.hardware_counters
    assert 0 < counters["roofline_pct_of_peak"] < 100
    assert "above_peak" not in evaluation.flags and evaluation.trusted

    # Recomputed from what the store keeps: one core's peaks, the task's work, the latency.
    record = store.get_hardware_peaks(backend.hardware)
    assert record is not None
    peaks = CpuPeaks.model_validate(record.peaks).for_cores(1)
    assert peaks is not None
    roofline = rmsnorm.roofline
    assert roofline is not None and evaluation.performance is not None
    seconds = evaluation.performance.latency_ms / 1e3
    memory_peak, point = peaks.bandwidth_at(roofline.bytes_moved)
    flops_pct = 100 * roofline.flops / seconds / peaks.vector_fp32_flops_per_s
    bytes_pct = 100 * roofline.bytes_moved / seconds / memory_peak
    assert counters["flops_pct_of_peak"] == pytest.approx(flops_pct, rel=1e-9)
    assert counters["bandwidth_pct_of_peak"] == pytest.approx(bytes_pct, rel=1e-9)
    assert counters["roofline_pct_of_peak"] == pytest.approx(max(flops_pct, bytes_pct), rel=1e-9)
    assert counters["memory_bound"] == (1.0 if bytes_pct > flops_pct else 0.0)
    assert counters["gflops"] == pytest.approx(roofline.flops / seconds / 1e9, rel=1e-9)
    assert counters["gbytes_per_s"] == pytest.approx(roofline.bytes_moved / seconds / 1e9)
    assert counters["peak_gflops"] == pytest.approx(peaks.vector_fp32_flops_per_s / 1e9)
    assert counters["peak_gbytes_per_s"] == pytest.approx(memory_peak / 1e9)
    assert counters["peak_cores"] == 1.0 and counters["peak_matmul"] == 0.0
    # A 2 MiB working set: more than the tiny sizes' L2 stand-in holds, so the memory figure.
    assert point is not None and point.level == "memory"

    line = next(x for x in evaluation.log.splitlines() if x.startswith("roofline: "))
    # Each percent names the peak it is against: how many cores', which, and how much.
    assert (
        f"{counters['flops_pct_of_peak']:.1f}% of the 1-core elementwise fp32 peak "
        f"({counters['peak_gflops']:.3g} GFLOP/s)"
    ) in line
    assert f"{counters['bandwidth_pct_of_peak']:.1f}% of the 1-core memory peak for a" in line
    assert f"at {counters['roofline_pct_of_peak']:.1f}% of its roofline" in line
    assert f"measured on core {peaks.cpus[0]} at {peaks.measured_at}" in line

    # What people, agents and the planner are shown: the figures, no harness internals.
    shown = shown_counters(evaluation)
    assert "roofline_pct_of_peak" in shown and "gflops" in shown
    assert not {"max_rss_mb", "measurement_rounds", "latency_ms", "relative_spread"} & set(shown)
    assert evaluation.measurement["max_rss_mb"] > 0
    text = roofline_text(evaluation)
    assert text is not None and text.startswith(f"{counters['roofline_pct_of_peak']:.3g}% of")
    assert f"GB/s of the 1-core memory peak {counters['peak_gbytes_per_s']:.3g} GB/s" in text
    assert f"GFLOP/s of the 1-core elementwise fp32 peak {counters['peak_gflops']:.3g}" in text
    short = roofline_text(evaluation, short=True)
    assert short is not None and short in figures_text(evaluation)
    named = "memory peak" if counters["memory_bound"] else "elementwise fp32 peak"
    assert f", against the 1-core {named} of " in short
    # The planner reads the percent once, in the roofline line with the ideal time in ms.
    block = describe_profile(evaluation, random.Random(0))
    ideal = evaluation.performance.latency_ms * counters["roofline_pct_of_peak"] / 100  # type: ignore[union-attr]
    assert f"roofline: {short}; ideal (roofline) time {ideal:.3g} ms per call" in block
    assert "roofline_pct_of_peak" not in block and "peak_gflops" not in block

    # The second profile finds the figures kept: nothing is measured or stored again.
    _profile(backend, rmsnorm, RMSNORM_KERNEL)
    again = store.get_hardware_peaks(backend.hardware)
    assert again is not None and again.measured_at == record.measured_at


def test_a_roofline_that_overstates_the_work_is_flagged_above_peak(
    backend: CpuBackend, rmsnorm: Task
) -> None:
    declared = rmsnorm.roofline
    assert declared is not None
    overstated = rmsnorm.model_copy(
        update={
            "roofline": Roofline(
                flops=declared.flops * 1e4,
                bytes_moved=declared.bytes_moved,
                compute_unit="vector",
            )
        }
    )
    evaluation = _profile(backend, overstated, RMSNORM_KERNEL)
    assert evaluation.hardware_counters["roofline_pct_of_peak"] > 100
    assert evaluation.hardware_counters["memory_bound"] == 0.0
    assert "above_peak" in evaluation.flags and not evaluation.trusted
    assert "above this host's measured peak" in evaluation.log


def test_accelopt_form_is_held_against_both_measured_compute_peaks(
    backend: CpuBackend, rmsnorm: Task
) -> None:
    """matmul_flops against the measured fp32 matmul peak, vector_flops against the
    elementwise one, bytes against the memory figure: the percent is the longest of the three
    times over the latency, and the line names each peak and the one that binds."""
    declared = rmsnorm.roofline
    assert declared is not None and declared.flops is not None
    # Measured now unless an earlier test did (the evaluation then finds them kept).
    peaks = backend.peaks.peaks(backend.hardware, cores=1, cpus=backend.cpus).for_cores(1)
    assert peaks is not None
    # Enough matmul work that it, not the elementwise work, is the longer compute term.
    matmul_flops = (
        2 * declared.flops * peaks.matmul_fp32_flops_per_s / peaks.vector_fp32_flops_per_s
    )
    split = Roofline(
        matmul_flops=matmul_flops, vector_flops=declared.flops, bytes_moved=declared.bytes_moved
    )
    evaluation = _profile(backend, rmsnorm.model_copy(update={"roofline": split}), RMSNORM_KERNEL)
    counters = evaluation.hardware_counters
    assert evaluation.performance is not None
    seconds = evaluation.performance.latency_ms / 1e3
    memory_peak, _ = peaks.bandwidth_at(declared.bytes_moved)
    matmul_pct = 100 * matmul_flops / seconds / peaks.matmul_fp32_flops_per_s
    vector_pct = 100 * declared.flops / seconds / peaks.vector_fp32_flops_per_s
    bytes_pct = 100 * declared.bytes_moved / seconds / memory_peak
    assert matmul_pct == pytest.approx(2 * vector_pct)
    assert counters["flops_pct_of_peak"] == pytest.approx(matmul_pct, rel=1e-9)
    assert counters["bandwidth_pct_of_peak"] == pytest.approx(bytes_pct, rel=1e-9)
    assert counters["roofline_pct_of_peak"] == pytest.approx(max(matmul_pct, bytes_pct), rel=1e-9)
    assert counters["peak_matmul"] == 1.0
    assert counters["peak_gflops"] == pytest.approx(peaks.matmul_fp32_flops_per_s / 1e9)
    line = next(x for x in evaluation.log.splitlines() if x.startswith("roofline: "))
    assert f"{matmul_pct:.1f}% of the 1-core fp32 matmul peak" in line
    assert f"{vector_pct:.1f}% of the 1-core elementwise fp32 peak" in line
    binds = "memory peak" if bytes_pct > matmul_pct else "fp32 matmul peak"
    assert f"-bound (the 1-core {binds} binds), at" in line


def test_an_accelopt_form_roofline_that_overstates_the_work_is_flagged_above_peak(
    backend: CpuBackend, rmsnorm: Task
) -> None:
    declared = rmsnorm.roofline
    assert declared is not None and declared.flops is not None
    overstated = Roofline(
        matmul_flops=0, vector_flops=declared.flops * 1e4, bytes_moved=declared.bytes_moved
    )
    task = rmsnorm.model_copy(update={"roofline": overstated})
    evaluation = _profile(backend, task, RMSNORM_KERNEL)
    assert evaluation.hardware_counters["roofline_pct_of_peak"] > 100
    assert evaluation.hardware_counters["memory_bound"] == 0.0
    assert evaluation.hardware_counters["peak_matmul"] == 0.0
    assert "above_peak" in evaluation.flags and not evaluation.trusted
    assert "(the 1-core elementwise fp32 peak binds)" in evaluation.log


def test_a_task_without_a_roofline_says_so_and_how_to_declare_one(backend: CpuBackend) -> None:
    task = load_task(MATMUL)
    assert task.roofline is None
    evaluation = _profile(backend, task, MATMUL_KERNEL)
    assert not {"roofline_pct_of_peak", "gflops"} & set(evaluation.hardware_counters)
    assert "above_peak" not in evaluation.flags
    text = roofline_text(evaluation)
    assert text is not None and text.startswith("no roofline declared")
    assert "def roofline()" in text and "bytes_moved" in text
    assert text in evaluation.log
    assert "no roofline declared: add roofline() to the task" in figures_text(evaluation)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable cores")
def test_an_evaluation_on_two_cores_is_held_to_the_peaks_of_two_cores_working(
    store: SqliteStore, rmsnorm: Task
) -> None:
    """Not one core's figures relabelled: the two-core figures are measured (with two cores
    working) the first time an evaluation on two cores needs them, on its cores, and named."""
    cores = set(sorted(os.sched_getaffinity(0))[:2])
    two = CpuBackend(cpus=cores, peaks=PeakSource(store, sizes=ONE_CORE, peaks_file=None))
    evaluation = _profile(two, rmsnorm, RMSNORM_KERNEL)
    counters = evaluation.hardware_counters
    record = store.get_hardware_peaks(two.hardware)
    assert record is not None
    peaks = CpuPeaks.model_validate(record.peaks).for_cores(2)
    assert peaks is not None and peaks.cpus == sorted(cores) and "processes" in peaks.by_method
    assert counters["peak_cores"] == 2.0
    assert counters["peak_gflops"] == pytest.approx(peaks.vector_fp32_flops_per_s / 1e9)
    line = next(x for x in evaluation.log.splitlines() if x.startswith("roofline: "))
    assert "of the 2-core elementwise fp32 peak" in line and "2-core memory peak" in line
    assert f"measured on cores {','.join(map(str, sorted(cores)))}" in line
    text = roofline_text(evaluation)
    assert text is not None and "of the 2-core elementwise fp32 peak" in text
