"""When the cpu backend stops sampling: once the question the caller asked is answered (every
speedup it reads clears each ratio in `decide_at`, at a stricter level than the reported one),
at ±target_ci, or at the caps. Real jailed kernels; the kernels differ by a factor of ten or
more, so which side of 1.0 they fall on does not depend on the host's mood."""

from __future__ import annotations

import os

import pytest

from accelopt_mcp.backends.cpu import CpuBackend
from accelopt_mcp.engine.config import OptimizeConfig
from accelopt_mcp.models import BenchmarkConfig, EvaluationStatus
from tests.backends.test_cpu_backend import VECTORIZED, python_solution, scale_task
from tests.bench import quick_bench

pytestmark = pytest.mark.serial

BASE = quick_bench(
    seeds=[0], iterations=8, processes=(2, 4), max_timing_seconds=20, timeout_seconds=30
)


@pytest.fixture(scope="module")
def backend() -> CpuBackend:
    return CpuBackend(cpus={min(os.sched_getaffinity(0))})


def test_a_clear_answer_stops_after_the_minimum(backend: CpuBackend) -> None:
    # The vectorized kernel against a per-row Python reference: many times faster.
    evaluation = backend.evaluate(scale_task(), python_solution(VECTORIZED), BASE)
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    stats, performance = evaluation.latency_stats, evaluation.performance
    assert stats is not None and performance is not None
    assert performance.speedup_ci_low is not None and performance.speedup_ci_low > 1.0
    assert stats.measurement_rounds == BASE.min_processes, evaluation.log
    assert evaluation.measurement is not None
    # The minimum pass only (iterations per set), not the quarter-second per set it used to buy.
    assert evaluation.measurement["rounds"] < 2 * BASE.iterations * BASE.min_processes
    assert f"answered after {BASE.min_processes} sets" in evaluation.log
    assert "noisy_timing" not in evaluation.flags


def test_without_a_question_it_samples_to_the_target(backend: CpuBackend) -> None:
    # The same clear case, asked for a width no host reaches: every set is opened.
    config = BASE.model_copy(update={"decide_at": [], "target_ci": 0.0001})
    evaluation = backend.evaluate(scale_task(), python_solution(VECTORIZED), config)
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    assert evaluation.latency_stats is not None
    assert evaluation.latency_stats.measurement_rounds == config.max_processes, evaluation.log
    assert "answered" not in evaluation.log


def test_bad_thresholds_are_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"decide_at holds \[0.0\].*positive number"):
        BenchmarkConfig(decide_at=[0.0])
    with pytest.raises(ValueError, match="decide_at holds"):
        BenchmarkConfig(decide_at=[float("inf")])


def test_a_run_decides_on_its_own_thresholds() -> None:
    config = OptimizeConfig(positive_threshold=1.1, negative_threshold=0.8)
    assert config.benchmark.decide_at == [0.8, 1.1]
    # What the user set is kept.
    chosen = OptimizeConfig(benchmark=BenchmarkConfig(decide_at=[1.0]))
    assert chosen.benchmark.decide_at == [1.0]
