"""accelopt_mcp.stats: the intervals are honest on synthetic timings whose truth is known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from accelopt_mcp.stats import (
    Interval,
    analyse,
    drift,
    pool,
    ratio_of_independent,
    robust_spread_of,
    verdict,
)


def _timings(rng: np.random.Generator, blocks: int, rounds: int, scale: float = 1.0) -> np.ndarray:
    """Log-normal samples with a per-process offset (the memory-layout luck of each process)."""
    parts = [
        scale * math.exp(rng.normal(0, 0.01)) * np.exp(rng.normal(0, 0.03, rounds))
        for _ in range(blocks)
    ]
    return np.concatenate(parts)


def test_identical_kernels_cover_one_in_95_percent_of_trials() -> None:
    rng = np.random.default_rng(7)
    blocks, rounds, trials = 4, 15, 200
    covered = 0
    for trial in range(trials):
        ids = np.repeat(np.arange(blocks), rounds)
        a, b = _timings(rng, blocks, rounds), _timings(rng, blocks, rounds)
        result = analyse({"a": a, "b": b}, ids, seed=trial, pairs=[("a", "b")])
        covered += result.speedup("a", "b").contains(1.0)
    assert covered / trials >= 0.93


def test_one_block_understates_between_process_noise_and_blocks_fix_it() -> None:
    """Pooling all samples as if independent ignores the process offsets; the two-level
    bootstrap widens the interval to account for them."""
    rng = np.random.default_rng(3)
    ids = np.repeat(np.arange(4), 25)
    a = np.concatenate([s * np.exp(rng.normal(0, 0.01, 25)) for s in (1.0, 1.06, 0.95, 1.03)])
    b = np.concatenate([s * np.exp(rng.normal(0, 0.01, 25)) for s in (1.0, 0.97, 1.04, 0.99)])
    flat = analyse({"a": a, "b": b}, None, seed=1).speedup("a", "b")
    nested = analyse({"a": a, "b": b}, ids, seed=1).speedup("a", "b")
    assert nested.relative_half_width > 2 * flat.relative_half_width


def test_a_real_difference_is_found_and_its_size_estimated() -> None:
    rng = np.random.default_rng(11)
    ids = np.repeat(np.arange(3), 20)
    slow, fast = _timings(rng, 3, 20, 1.2), _timings(rng, 3, 20, 1.0)
    result = analyse({"slow": slow, "fast": fast}, ids, seed=0)
    speedup = result.speedup("fast", "slow")
    assert verdict(speedup) == "faster"
    assert speedup.contains(1.2) or abs(speedup.estimate - 1.2) < 0.03
    assert verdict(result.speedup("slow", "fast")) == "slower"
    summary = result.summaries["fast"]
    assert summary.median.low <= summary.median.estimate <= summary.median.high
    assert summary.samples == 60 and result.blocks == 3


def test_pairing_cancels_drift_shared_by_a_round() -> None:
    """A host that slows down over the measurement moves both kernels alike."""
    rng = np.random.default_rng(5)
    trend = np.linspace(1.0, 1.5, 60)
    a = trend * np.exp(rng.normal(0, 0.005, 60))
    b = 1.1 * trend * np.exp(rng.normal(0, 0.005, 60))
    result = analyse({"a": a, "b": b}, seed=2, pairs=[("a", "b")])
    assert result.speedup("a", "b").contains(1.1)
    assert drift(list(a)) > 0.3 and abs(drift([1.0] * 30)) == 0


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="same, non-zero"):
        analyse({"a": [1.0, 2.0], "b": [1.0]})
    with pytest.raises(ValueError, match="blocks has"):
        analyse({"a": [1.0, 2.0]}, [0])


def test_verdicts_and_spread() -> None:
    assert verdict(Interval(1.2, 1.05, 1.3)) == "faster"
    assert verdict(Interval(0.8, 0.7, 0.95)) == "slower"
    assert verdict(Interval(1.2, 0.95, 1.5)) == "indistinguishable"
    assert robust_spread_of(1.0, 1.2, 1.1) == pytest.approx(0.2 / 1.1)
    assert Interval(2.0, 1.9, 2.1).relative_half_width == pytest.approx(0.05)


def test_pooling_agreeing_measurements_narrows_disagreeing_ones_widen() -> None:
    one = Interval(1.00, 0.98, 1.02)
    agree = pool([one, Interval(1.01, 0.99, 1.03), Interval(0.99, 0.97, 1.01)])
    assert agree.relative_half_width < one.relative_half_width
    assert 0.99 < agree.estimate < 1.01
    disagree = pool([one, Interval(1.30, 1.27, 1.33), Interval(0.80, 0.78, 0.82)])
    fixed_width = 1 / math.sqrt(3) * one.relative_half_width
    assert disagree.relative_half_width > 5 * fixed_width
    assert pool([one]).estimate == pytest.approx(1.0)
    with pytest.raises(ValueError):
        pool([])


def test_independent_ratio_is_wider_than_either() -> None:
    a, b = Interval(1.0, 0.98, 1.02), Interval(2.0, 1.96, 2.04)
    ratio = ratio_of_independent(b, a, 0.95)
    assert ratio.estimate == pytest.approx(2.0)
    assert ratio.relative_half_width > a.relative_half_width
    assert ratio_of_independent(b, Interval(1.0, 0.0, math.inf), 0.95).high == math.inf
