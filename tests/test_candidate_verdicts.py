"""How a round of candidates reads a comparison's pairs against the parent
(profiling.versus_baseline): a pair lists the faster median first, so a candidate slower than
its parent is the pair turned around, interval and verdict included."""

from __future__ import annotations

import math

import pytest

from accelopt_mcp.models import (
    Correctness,
    Environment,
    Evaluation,
    EvaluationStatus,
    KernelComparison,
    PairVerdict,
    Performance,
)
from accelopt_mcp.profiling import versus_baseline


def _parent(latency_ms: float) -> Evaluation:
    return Evaluation(
        status=EvaluationStatus.PASSED,
        environment=Environment(hardware="cpu/test"),
        timestamp="2026-01-01T00:00:00Z",
        correctness=Correctness(),
        performance=Performance(
            latency_ms=latency_ms, reference_latency_ms=1.0, speedup_factor=1.0 / latency_ms
        ),
    )


def _pair(
    kernel: str, baseline: str, speedup: float, low: float, high: float, verdict: str
) -> PairVerdict:
    return PairVerdict(
        kernel=kernel,
        baseline=baseline,
        baseline_latency_ms=1.0,
        speedup=speedup,
        ci_low=low,
        ci_high=high,
        verdict=verdict,  # type: ignore[arg-type]
    )


def test_a_faster_candidate_reads_as_the_pair_does() -> None:
    found = KernelComparison(pairs=[_pair("fast", "parent", 2.0, 1.8, 2.2, "faster")])
    beside = versus_baseline(found, "fast", "parent", _parent(2.0))
    assert beside is not None
    assert (beside.speedup, beside.ci_low, beside.ci_high) == (2.0, 1.8, 2.2)
    assert beside.verdict == "faster" and beside.baseline_latency_ms == 2.0


def test_a_slower_candidate_is_the_pair_turned_around() -> None:
    # The parent is the faster of the two: 1.25x [1.1, 1.6] over the candidate.
    found = KernelComparison(pairs=[_pair("parent", "slow", 1.25, 1.1, 1.6, "faster")])
    beside = versus_baseline(found, "slow", "parent", _parent(1.0))
    assert beside is not None
    assert beside.speedup == pytest.approx(0.8)
    assert (beside.ci_low, beside.ci_high) == pytest.approx((1 / 1.6, 1 / 1.1))
    assert beside.verdict == "slower"
    # A tie stays a tie, and an unbounded upper end becomes a lower end of 0.
    tie = KernelComparison(
        pairs=[_pair("parent", "same", 1.01, 0.97, math.inf, "indistinguishable")]
    )
    turned = versus_baseline(tie, "same", "parent", _parent(1.0))
    assert turned is not None and turned.verdict == "indistinguishable"
    assert turned.ci_low == 0.0 and turned.ci_high == pytest.approx(1 / 0.97)


def test_no_pair_no_figure() -> None:
    # The candidate did not pass: the comparison holds no pair with it.
    found = KernelComparison(pairs=[_pair("a", "parent", 2.0, 1.8, 2.2, "faster")])
    assert versus_baseline(found, "b", "parent", _parent(1.0)) is None
