"""One figure from a kernel's repeated measurements: what a stored profile shows and ranks by.

A profile (one solution on one workload, benchmark settings and hardware) is measured again
and again: by later runs, by `profile_kernel`, on other days and host states. Each measurement
is kept as it was taken (the stores' `measurements` table); the profile's own evaluation is
`pool_evaluations` of them, so a re-run refines the figure instead of replacing it, and a
ranking does not reshuffle because the last run happened to be lucky or unlucky.

The rules, and why:

- Only PASSED measurements pool: a failed one has no latency to pool. It stays in the history
  (a flaky kernel is visible there) but does not move the figure. When nothing ever passed, the
  newest measurement is the profile's evaluation, as before pooling existed.
- The figure is `accelopt_mcp.stats.pool` of the measurements' intervals: a random-effects
  inverse-variance mean on the log scale. Measurements that agree narrow the interval;
  measurements that disagree more than their intervals allow widen it (the host or the kernel
  is not as steady as one run said).
- A measurement without a confidence interval (older rows, other backends) offers its sample
  range (min_ms, max_ms) instead, a conservative stand-in that weighs little. One with neither
  (a single sample, or min = max) has no interval at all: `stats.pool` would read a zero-width
  interval as near-infinite precision, so such a measurement only counts when none has an
  interval, and then the figure is the median of the estimates and the interval their range.
- Everything else (correctness, counters, comparisons, timestamp) is the newest passed
  measurement's: those describe one run and cannot be averaged.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from accelopt_mcp import stats
from accelopt_mcp.models.evaluation import (
    UNTRUSTED_FLAGS,
    Evaluation,
    LatencyStats,
    Performance,
)
from accelopt_mcp.stats import Interval


def pool_evaluations(evaluations: Sequence[Evaluation]) -> Evaluation:
    """The pooled evaluation of a profile's measurements, given oldest first (see the module
    docstring). A single passed measurement comes back unchanged (its latency_stats say
    measurements=1). Raises ValueError for an empty sequence."""
    if not evaluations:
        raise ValueError("pool_evaluations needs at least one evaluation")
    passed = [e for e in evaluations if e.passed]
    if not passed:
        return evaluations[-1]
    newest = passed[-1]
    pooled = _alone(newest) if len(passed) == 1 else _pooled(passed, newest)
    # Failed measurements add no figure, but what they caught stays: a kernel flagged on a
    # re-measure (constant_output, timed_output_mismatch, ...) is not trusted because another
    # measurement passed, and one that was wrong once is inconsistent (an untrusted flag), so
    # failing on purpose when its timings look bad does not hide them.
    caught = [
        flag for e in evaluations if not e.passed for flag in e.flags if flag in UNTRUSTED_FLAGS
    ]
    if any(e.status.value.startswith("INCORRECT") for e in evaluations):
        caught.append("inconsistent_correctness")
    extra = [flag for flag in dict.fromkeys(caught) if flag not in pooled.flags]
    if extra:
        pooled = pooled.model_copy(update={"flags": [*pooled.flags, *extra]})
    # A breakdown is one call's, not a figure to pool: the newest measurement's that has one
    # (a re-measure taken without asking for it keeps the one taken before).
    breakdown = next((e.breakdown for e in reversed(passed) if e.breakdown), [])
    if breakdown and not pooled.breakdown:
        pooled = pooled.model_copy(update={"breakdown": breakdown})
    return pooled


def _alone(evaluation: Evaluation) -> Evaluation:
    latency = evaluation.latency_stats
    if latency is None or latency.measurements == 1:
        return evaluation
    return evaluation.model_copy(
        update={"latency_stats": latency.model_copy(update={"measurements": 1})}
    )


def _pooled(passed: list[Evaluation], newest: Evaluation) -> Evaluation:
    newest_stats = newest.latency_stats
    confidence = newest_stats.confidence if newest_stats is not None else stats.CONFIDENCE
    latency = _pool(
        [_latency_estimate(e) for e in passed],
        [_latency_interval(e) for e in passed],
        confidence,
    )
    speedup = _pooled_speedup(passed, confidence)
    perf = newest.performance
    assert perf is not None  # a PASSED evaluation has performance (Evaluation validates it)
    update: dict[str, float | None] = {"latency_ms": latency.estimate}
    if speedup is not None:
        # reference / solution = speedup: the pooled reference is what the pooled figures
        # imply, so the three numbers stay consistent with each other.
        update |= {
            "reference_latency_ms": latency.estimate * speedup.estimate,
            "speedup_factor": speedup.estimate,
            "speedup_ci_low": speedup.low,
            "speedup_ci_high": speedup.high if math.isfinite(speedup.high) else None,
        }
    # Without a speedup in any measurement (no reference latency, e.g. nki) the newest's
    # reference fields stay as they are.
    performance = perf.model_copy(update=update)
    # A flag raised by any measurement stays: a kernel that cheated once (above_peak,
    # constant_output, ...) is not made trustworthy by averaging it with honest-looking runs,
    # and an informational flag still describes part of the data the figure rests on.
    flags = list(dict.fromkeys(flag for e in passed for flag in e.flags))
    line = f"pooled over {len(passed)} measurements"
    return newest.model_copy(
        update={
            "performance": performance,
            "latency_stats": _pooled_stats(passed, latency, confidence),
            "flags": flags,
            "log": f"{line}\n{newest.log}" if newest.log else line,
        }
    )


def _latency_estimate(evaluation: Evaluation) -> float:
    if evaluation.latency_stats is not None:
        return evaluation.latency_stats.median_ms
    assert evaluation.performance is not None
    return evaluation.performance.latency_ms


def _usable(estimate: float, low: float | None, high: float | None) -> Interval | None:
    """An interval stats.pool can weigh: positive, finite, of non-zero width."""
    if low is None or high is None:
        return None
    if not (0 < low < high and math.isfinite(high) and estimate > 0):
        return None
    return Interval(estimate, low, high)


def _latency_interval(evaluation: Evaluation) -> Interval | None:
    latency = evaluation.latency_stats
    if latency is None:
        return None
    estimate = latency.median_ms
    return _usable(estimate, latency.ci_low_ms, latency.ci_high_ms) or _usable(
        estimate, latency.min_ms, latency.max_ms
    )


def _pooled_speedup(passed: list[Evaluation], confidence: float) -> Interval | None:
    """The pooled speedup over the reference; None when no measurement has one (speedup 0:
    no reference latency)."""
    perfs = [e.performance for e in passed if e.performance is not None]
    with_speedup = [p for p in perfs if p.speedup_factor > 0 and math.isfinite(p.speedup_factor)]
    if not with_speedup:
        return None
    return _pool(
        [p.speedup_factor for p in with_speedup],
        [_speedup_interval(p) for p in with_speedup],
        confidence,
    )


def _speedup_interval(performance: Performance) -> Interval | None:
    return _usable(
        performance.speedup_factor, performance.speedup_ci_low, performance.speedup_ci_high
    )


def _pool(estimates: list[float], intervals: list[Interval | None], confidence: float) -> Interval:
    """stats.pool of the measurements that have an interval; when none has, the median of the
    estimates with their range as the interval (what stats.pool does without intervals)."""
    usable = [i for i in intervals if i is not None]
    if usable:
        return stats.pool(usable, confidence)
    return Interval(statistics.median(estimates), min(estimates), max(estimates))


def _pooled_stats(
    passed: list[Evaluation], latency: Interval, confidence: float
) -> LatencyStats | None:
    """The newest measurement's LatencyStats with the pooled median and interval, and what
    can be combined exactly over every sample of the pooled measurements (counts, mean,
    standard deviation, extremes). Quartiles and the robust spread cannot be rebuilt from
    summaries, so they stay the newest's."""
    all_stats = [e.latency_stats for e in passed if e.latency_stats is not None]
    if not all_stats:
        return None
    base = passed[-1].latency_stats or all_stats[-1]
    runs = sum(s.runs for s in all_stats)
    mean, stdev = base.mean_ms, base.stdev_ms
    if runs > 0:
        mean = sum(s.runs * s.mean_ms for s in all_stats) / runs
    if runs > 1:
        # Total sum of squares = within each measurement + between their means.
        within = sum(max(s.runs - 1, 0) * s.stdev_ms**2 for s in all_stats)
        between = sum(s.runs * (s.mean_ms - mean) ** 2 for s in all_stats)
        stdev = math.sqrt((within + between) / (runs - 1))
    return base.model_copy(
        update={
            "median_ms": latency.estimate,
            "ci_low_ms": latency.low,
            "ci_high_ms": latency.high,
            "confidence": confidence,
            "mean_ms": mean,
            "stdev_ms": stdev,
            "min_ms": min(s.min_ms for s in all_stats),
            "max_ms": max(s.max_ms for s in all_stats),
            "runs": runs,
            "measurement_rounds": sum(s.measurement_rounds for s in all_stats),
            "contended_samples": sum(s.contended_samples for s in all_stats),
            "contended": any(s.contended for s in all_stats),
            "measurements": len(passed),
        }
    )
