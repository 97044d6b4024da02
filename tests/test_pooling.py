"""pool_evaluations: a profile's measurements pooled into the figure it ranks by."""

from __future__ import annotations

import math

import pytest

from accelopt_mcp import stats
from accelopt_mcp.models import (
    Environment,
    Evaluation,
    EvaluationStatus,
    pool_evaluations,
)
from accelopt_mcp.models.evaluation import flags_trusted
from accelopt_mcp.stats import Interval
from tests.store.samples import passed_evaluation


def measured(
    latency: float,
    ci: tuple[float, float] | None = None,
    *,
    when: str = "2026-01-01T00:00:00Z",
    speedup: float = 2.0,
    speedup_ci: tuple[float, float] | None = None,
    spread: tuple[float, float] | None = None,
    runs: int = 10,
    flags: tuple[str, ...] = (),
    log: str = "",
) -> Evaluation:
    """A PASSED evaluation with a median latency, its interval and the samples' range."""
    return passed_evaluation(
        latency,
        ci=ci,
        samples=spread,
        reference_ms=latency * speedup,
        speedup=speedup,
        speedup_ci=speedup_ci,
        runs=runs,
        relative_spread=0.05,
        stats={"stdev_ms": 0.01 * latency},
        timestamp=when,
        log=log,
        flags=list(flags),
    )


def failed(when: str = "2026-01-09T00:00:00Z", status: str = "RUNTIME_ERROR") -> Evaluation:
    return Evaluation(
        status=EvaluationStatus(status),
        environment=Environment(hardware="cpu/x86_64"),
        timestamp=when,
        log="boom",
        flags=["backend_error"],
    )


def width(low: float | None, high: float | None) -> float:
    assert low is not None and high is not None
    return high - low


def test_nothing_to_pool_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one"):
        pool_evaluations([])


def test_one_measurement_pools_to_itself() -> None:
    alone = measured(1.0, (0.9, 1.1), log="ran once")
    assert pool_evaluations([alone]) is alone
    # A figure that said it pooled several (an import of a pooled profile) now pools one.
    claimed = alone.model_copy(
        update={"latency_stats": alone.latency_stats.model_copy(update={"measurements": 4})}
    )
    pooled = pool_evaluations([claimed])
    assert pooled.latency_stats is not None and pooled.latency_stats.measurements == 1
    assert pooled.model_copy(update={"latency_stats": alone.latency_stats}) == alone


def test_without_a_pass_the_newest_is_the_figure() -> None:
    first, newest = failed("2026-01-01T00:00:00Z", "COMPILE_ERROR"), failed()
    assert pool_evaluations([first, newest]) is newest


def test_failures_among_passes_stay_out_of_the_figure() -> None:
    passed = measured(1.0, (0.9, 1.1), when="2026-01-02T00:00:00Z")
    assert pool_evaluations([failed("2026-01-01T00:00:00Z"), passed, failed()]) is passed
    other = measured(1.2, (1.1, 1.3), when="2026-01-03T00:00:00Z")
    with_failure = pool_evaluations([passed, failed(), other])
    assert with_failure == pool_evaluations([passed, other])
    assert with_failure.status == EvaluationStatus.PASSED
    assert "backend_error" not in with_failure.flags
    assert with_failure.timestamp == other.timestamp  # the newest passed one's


def test_agreeing_measurements_narrow_the_interval() -> None:
    a = measured(1.00, (0.95, 1.05), when="2026-01-01T00:00:00Z", runs=10, log="first")
    b = measured(1.02, (0.97, 1.07), when="2026-01-02T00:00:00Z", runs=30, log="second")
    pooled = pool_evaluations([a, b])
    latency = pooled.latency_stats
    assert latency is not None and pooled.performance is not None
    assert 1.00 < latency.median_ms < 1.02
    assert pooled.performance.latency_ms == latency.median_ms
    assert width(latency.ci_low_ms, latency.ci_high_ms) < 0.10  # narrower than each
    expected = stats.pool([Interval(1.00, 0.95, 1.05), Interval(1.02, 0.97, 1.07)])
    assert latency.median_ms == pytest.approx(expected.estimate)
    assert (latency.ci_low_ms, latency.ci_high_ms) == pytest.approx((expected.low, expected.high))
    assert (latency.measurements, latency.runs, latency.measurement_rounds) == (2, 40, 2)
    assert latency.mean_ms == pytest.approx((10 * 1.00 + 30 * 1.02) / 40)
    assert (latency.min_ms, latency.max_ms) == (1.00, 1.02)
    assert pooled.log == "pooled over 2 measurements\nsecond"
    # The inputs are left as they were.
    assert a.latency_stats is not None and a.latency_stats.measurements == 1


def test_disagreeing_measurements_widen_the_interval() -> None:
    a = measured(1.0, (0.95, 1.05), when="2026-01-01T00:00:00Z")
    b = measured(3.0, (2.9, 3.1), when="2026-01-02T00:00:00Z")
    latency = pool_evaluations([a, b]).latency_stats
    assert latency is not None
    assert 1.0 < latency.median_ms < 3.0
    assert width(latency.ci_low_ms, latency.ci_high_ms) > 0.2  # wider than both
    assert latency.ci_low_ms is not None and latency.ci_low_ms < 1.0
    assert latency.ci_high_ms is not None and latency.ci_high_ms > 3.0


def test_speedup_pools_and_the_reference_follows() -> None:
    a = measured(1.0, (0.95, 1.05), speedup=2.0, speedup_ci=(1.8, 2.2))
    b = measured(1.0, (0.95, 1.05), speedup=2.2, speedup_ci=(2.0, 2.4), when="2026-02-01")
    perf = pool_evaluations([a, b]).performance
    assert perf is not None
    assert 2.0 < perf.speedup_factor < 2.2
    assert perf.speedup_ci_low is not None and perf.speedup_ci_high is not None
    assert perf.speedup_ci_low < perf.speedup_factor < perf.speedup_ci_high
    assert perf.reference_latency_ms / perf.latency_ms == pytest.approx(perf.speedup_factor)


def test_no_reference_leaves_the_speedup_alone() -> None:
    a = measured(1.0, (0.95, 1.05), speedup=0.0)
    b = measured(1.1, (1.0, 1.2), speedup=0.0, when="2026-02-01")
    perf = pool_evaluations([a, b]).performance
    assert perf is not None
    assert (perf.speedup_factor, perf.reference_latency_ms) == (0.0, 0.0)
    assert perf.speedup_ci_low is None and perf.speedup_ci_high is None


def test_without_intervals_the_sample_range_stands_in() -> None:
    a = measured(1.0, spread=(0.8, 1.3))
    b = measured(1.1, spread=(0.9, 1.4), when="2026-02-01")
    latency = pool_evaluations([a, b]).latency_stats
    assert latency is not None
    expected = stats.pool([Interval(1.0, 0.8, 1.3), Interval(1.1, 0.9, 1.4)])
    assert latency.median_ms == pytest.approx(expected.estimate)
    assert latency.ci_low_ms == pytest.approx(expected.low)


def test_without_any_interval_the_median_of_the_estimates() -> None:
    # min = max (one sample each): a zero-width "interval" would claim infinite precision.
    runs = [measured(x, when=f"2026-01-0{i}") for i, x in enumerate((3.0, 1.0, 1.5), start=1)]
    latency = pool_evaluations(runs).latency_stats
    assert latency is not None
    assert latency.median_ms == 1.5
    assert (latency.ci_low_ms, latency.ci_high_ms) == (1.0, 3.0)
    assert latency.measurements == 3


def test_a_measurement_without_an_interval_counts_only_when_none_has_one() -> None:
    with_ci = measured(1.0, (0.95, 1.05))
    without = measured(5.0, when="2026-02-01")  # min = max, no CI
    latency = pool_evaluations([with_ci, without]).latency_stats
    assert latency is not None and latency.median_ms == pytest.approx(1.0)
    assert latency.measurements == 2  # it is still one of the measurements pooled


def test_flags_of_every_measurement_stay() -> None:
    honest = measured(1.0, (0.95, 1.05), flags=("noisy_timing",))
    cheat = measured(0.2, (0.19, 0.21), flags=("above_peak",), when="2026-01-02")
    again = measured(1.0, (0.95, 1.05), flags=("not_isolated",), when="2026-01-03")
    pooled = pool_evaluations([honest, cheat, again])
    assert pooled.flags == ["noisy_timing", "above_peak", "not_isolated"]
    assert not pooled.trusted
    trusted = pool_evaluations([honest, again])
    assert trusted.trusted and flags_trusted(trusted.flags)


def test_the_pooled_record_serialises_and_reads_back() -> None:
    pooled = pool_evaluations([measured(1.0, (0.9, 1.1)), measured(1.1, (1.0, 1.2), when="x")])
    again = Evaluation.model_validate_json(pooled.model_dump_json(exclude_unset=True))
    assert again == pooled
    assert again.latency_stats is not None and again.latency_stats.measurements == 2
    assert math.isfinite(again.latency_stats.stdev_ms)


def test_a_failure_that_caught_a_cheat_keeps_the_profile_untrusted() -> None:
    """Failing on purpose when its timings look bad, or being caught on a re-measure, does not
    leave a kernel trusted because another measurement passed."""
    honest = measured(1.0, (0.9, 1.1), when="2026-01-01T00:00:00Z")
    caught = Evaluation(
        status=EvaluationStatus.RUNTIME_ERROR,
        environment=Environment(hardware="cpu/x86_64"),
        timestamp="2026-01-02T00:00:00Z",
        flags=["timed_output_mismatch", "backend_error"],
    )
    pooled = pool_evaluations([honest, caught])
    assert "timed_output_mismatch" in pooled.flags and not pooled.trusted
    assert "backend_error" not in pooled.flags
    wrong = Evaluation(
        status=EvaluationStatus.INCORRECT_SHAPE,
        environment=Environment(hardware="cpu/x86_64"),
        timestamp="2026-01-03T00:00:00Z",
    )
    inconsistent = pool_evaluations([honest, wrong])
    assert "inconsistent_correctness" in inconsistent.flags and not inconsistent.trusted
    assert pool_evaluations([honest, failed()]).trusted  # a crash alone says nothing


def test_a_breakdown_is_kept_from_the_newest_measurement_that_has_one() -> None:
    from accelopt_mcp.models import BreakdownEntry

    older = measured(1.0, (0.9, 1.1)).model_copy(
        update={"breakdown": [BreakdownEntry(what="L3: y = np.exp(x)", ms=0.6, share=0.6)]}
    )
    newer = measured(1.1, (1.0, 1.2), when="2026-01-02")
    pooled = pool_evaluations([older, newer])
    assert [e.what for e in pooled.breakdown] == ["L3: y = np.exp(x)"]
    again = Evaluation.model_validate_json(pooled.model_dump_json(exclude_unset=True))
    assert again.breakdown == pooled.breakdown
    newest = newer.model_copy(update={"breakdown": [BreakdownEntry(what="L4: z", ms=0.1)]})
    assert [e.what for e in pool_evaluations([older, newest]).breakdown] == ["L4: z"]
    assert pool_evaluations([measured(1.0), measured(1.0, when="x")]).breakdown == []
