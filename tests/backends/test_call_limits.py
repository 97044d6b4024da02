"""How long a cpu evaluation may take: every call is held to timeout_seconds until its first
one is timed, then to a limit scaled from that call; the whole evaluation to a backstop that
fits a slow kernel's untimed calls. Real jailed kernels."""

from __future__ import annotations

import time

import pytest

from accelopt_mcp.backends.cpu import CpuBackend
from accelopt_mcp.backends.cpu_job import evaluation_backstop_s
from accelopt_mcp.backends.cpu_outcomes import MAX_STRESS_SETS
from accelopt_mcp.backends.cpu_result import EVALUATION_CAP_S
from accelopt_mcp.models import BenchmarkConfig, EvaluationStatus
from tests.backends.test_cpu_backend import evaluate

# Fast for its first three calls in each process, then stuck.
HANGS_LATER = """
import numpy as np

calls = 0

def run(x, scale):
    global calls
    calls += 1
    while calls > 3:
        pass
    return x * np.float32(scale) + np.float32(1.0)
"""
# 0.6 s of work per call: slow, not stuck.
SLOW = """
import time
import numpy as np

def run(x, scale):
    started = time.perf_counter()
    while time.perf_counter() - started < 0.6:
        pass
    return x * np.float32(scale) + np.float32(1.0)
"""


@pytest.fixture(scope="module")
def backend() -> CpuBackend:
    return CpuBackend()


def test_a_kernel_that_hangs_later_is_given_up_on_at_the_scaled_limit(
    backend: CpuBackend,
) -> None:
    config = BenchmarkConfig(
        seeds=[0, 21, 42, 63], warmup_runs=0, min_processes=1, max_processes=1, timeout_seconds=60
    )
    started = time.monotonic()
    evaluation = evaluate(backend, HANGS_LATER, config)
    took = time.monotonic() - started
    assert evaluation.status == EvaluationStatus.TIMEOUT, evaluation.log
    # Its first call took well under a millisecond: the floor (5 s) applies, not the minute.
    assert "did not answer within 5 s" in evaluation.log
    assert "20x its first call" in evaluation.log
    assert took < 30


def test_a_slow_kernel_fits_and_skips_its_warm_up(backend: CpuBackend) -> None:
    # One second per call allowed, 0.6 s taken: under the old whole-evaluation limit
    # (timeout_seconds + the sampling cap, 3 s here) its checking calls alone ran past it.
    config = BenchmarkConfig(
        seeds=[0, 21, 42],
        warmup_runs=2,
        iterations=2,
        min_processes=2,
        max_processes=2,
        max_timing_seconds=1,
        timeout_seconds=1,
    )
    started = time.monotonic()
    evaluation = evaluate(backend, SLOW, config)
    took = time.monotonic() - started
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    assert evaluation.latency_stats is not None
    # A spin on the wall clock: on a busy core, the time it waited for the CPU is taken out.
    assert evaluation.latency_stats.median_ms > 300
    # 3 seeds + 2 fresh sets, 1 fresh set in the second process set, at least 8 timed rounds:
    # 14 calls of 0.6 s; the four warm-up calls would add 2.4 s more.
    assert took < 14 * 0.6 + 2.4 + 4, took


def test_the_backstop_fits_every_untimed_call_and_is_capped() -> None:
    config = BenchmarkConfig(
        timeout_seconds=10, seeds=[0], warmup_runs=1, min_processes=1, max_processes=2
    )
    # Two contestants (kernel and reference), 1 seed + 2 fresh + 1 warm-up + 2 sets each.
    assert evaluation_backstop_s(config, 1) == 10 * 2 * 6 + 2 * config.max_timing_seconds
    assert evaluation_backstop_s(BenchmarkConfig(timeout_seconds=3600), 4) == EVALUATION_CAP_S
    # A task's stress sets and the breakdown's traced call are untimed calls too.
    traced = config.model_copy(update={"breakdown": True})
    assert evaluation_backstop_s(traced, 1, 2) == 10 * 2 * 9 + 2 * config.max_timing_seconds


def test_the_stress_allowance_is_read_from_the_source() -> None:
    from accelopt_mcp.backends.cpu_job import stress_allowance

    assert stress_allowance("def run(x):\n    return x\n") == 0
    assert stress_allowance("STRESS_SCALES = (6.0, 100.0)\ndef run(x):\n    return x\n") == 2
    assert stress_allowance("def stress_inputs():\n    return {}\n") == MAX_STRESS_SETS
