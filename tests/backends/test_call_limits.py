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
from accelopt_mcp.backends.cpu_session import SLOW_CALL_NS
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
# 0.6 s of CPU work per call: slow, not stuck. It spins on its own thread's CPU clock, not on
# the wall clock: a call's measured time is its wall time less what it waited for a core, so a
# wall-clock spin measures only the share of a core it got (under 300 ms on a busy host), while
# this one measures 0.6 s however busy the host is, and only its wall time stretches. Each call
# says so on stderr (which the evaluation's log carries), so the test counts the calls made.
SLOW = """
import sys
import time
import numpy as np

def run(x, scale):
    end = time.thread_time() + 0.6
    while time.thread_time() < end:
        pass
    print("slow call", file=sys.stderr, flush=True)
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
    # Four seconds per call allowed, 0.6 s of CPU taken: a wall-clock stretch of more than 6x
    # (a busy host) still fits each call. Under the old whole-evaluation limit (timeout_seconds
    # + the sampling cap, 5 s here) its checking calls alone (6 seeds + 3 fresh sets, 5.4 s)
    # ran past it; now each call is held to its own limit and the evaluation to the backstop.
    config = BenchmarkConfig(
        seeds=[0, 21, 42, 63, 84, 105],
        warmup_runs=2,
        iterations=2,
        min_processes=2,
        max_processes=2,
        max_timing_seconds=1,
        timeout_seconds=4,
    )
    started = time.monotonic()
    evaluation = evaluate(backend, SLOW, config)
    took = time.monotonic() - started
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    assert evaluation.latency_stats is not None
    # Slow by the harness's own measure (over SLOW_CALL_NS), whatever the host's load.
    assert evaluation.latency_stats.median_ms > SLOW_CALL_NS / 1e6
    # It did outlast the old whole-evaluation limit (a bound that load can only help).
    assert took > config.timeout_seconds + config.max_timing_seconds, took
    # No warm-up calls: 6 seeds + 2 fresh sets in the first process set, 1 fresh set in the
    # second, then the timed calls. The two sets' two warm-up calls each would add 4.
    calls = evaluation.log.count("slow call")
    timed = evaluation.measurement["timed_calls"]
    assert calls == len(config.seeds) + 3 + timed, (calls, timed, evaluation.log)


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
