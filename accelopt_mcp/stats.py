"""Statistics for timings: medians and speedups with confidence intervals, verdicts between
kernels, and pooling of repeated measurements. NumPy and the standard library only: the
trusted harness (backends/cpu_session.py) imports it inside every evaluation.

How the intervals are made, and why:

- A *round* times every contestant (the reference, the candidate, its parent, ...) once, back
  to back and in a random order, on the same fresh inputs. Drift and contention that hit a
  round hit all of them, so rounds are *paired*: a bootstrap draws the same round indices for
  every contestant, and what is common cancels in a ratio.
- Rounds come in *blocks*, one per set of fresh processes. Timings inside one process share its
  memory layout, page alignment and core, so more samples there do not make the estimate
  converge to what another process would see. The bootstrap is two-level (blocks drawn with
  replacement, then rounds inside each drawn block), so the spread between processes widens
  the interval as it should, and a single process's luck does not read as precision.
- Estimates are medians (a few preempted samples do not move them) and the speedup of `a` over
  `b` is median(b) / median(a); intervals are bootstrap percentiles.
- Repeated measurements of one kernel (on other days, other host states) are pooled on the log
  scale by inverse-variance weights with a random-effects term (DerSimonian-Laird): when the
  measurements disagree more than their own intervals allow, the pooled interval widens
  instead of pretending the disagreement is not there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 2000
MIN_SAMPLES = 6
"""Below this many samples no interval is given (0 to infinity): a bootstrap of the median
of a handful of values is narrow by accident, not by precision."""
Verdict = Literal["faster", "slower", "indistinguishable"]


def finite_or_none(value: float | None) -> float | None:
    """A bound as JSON can carry it: JSON has no infinity (it would come back as null), so an
    unbounded end is written as None (checkpoints read it back as infinite: see
    engine.selection.interval_of)."""
    return value if value is not None and math.isfinite(value) else None


@dataclass(frozen=True)
class Interval:
    """An estimate with its confidence interval."""

    estimate: float
    low: float
    high: float

    @property
    def relative_half_width(self) -> float:
        """Half the interval's width as a fraction of the estimate (inf when it is 0)."""
        if self.estimate <= 0 or not math.isfinite(self.estimate):
            return math.inf
        return (self.high - self.low) / 2 / self.estimate

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


@dataclass(frozen=True)
class Summary:
    """What one contestant's samples say: the median with its interval, and their spread."""

    median: Interval
    q1: float
    q3: float
    minimum: float
    maximum: float
    mean: float
    stdev: float
    samples: int


@dataclass(frozen=True)
class Analysis:
    """Summaries of every contestant and the speedup interval of every ordered pair."""

    summaries: dict[str, Summary]
    speedups: dict[tuple[str, str], Interval] = field(default_factory=dict)
    """(a, b) -> median(b) / median(a): how many times faster a is than b."""
    blocks: int = 1

    def speedup(self, kernel: str, baseline: str) -> Interval:
        return self.speedups[(kernel, baseline)]

    def widest(self) -> float:
        """The largest relative half-width among every median and every speedup: the figure
        adaptive stopping drives down."""
        widths = [s.median.relative_half_width for s in self.summaries.values()]
        widths += [i.relative_half_width for i in self.speedups.values()]
        return max(widths, default=math.inf)


def robust_spread_of(q1: float, q3: float, median: float) -> float:
    """Interquartile range over the median: what (max - min) / min tried to say, without
    letting one preempted sample decide it."""
    return (q3 - q1) / median if median > 0 else 0.0


def verdict(speedup: Interval) -> Verdict:
    """'faster' when the whole interval of a's speedup over b is above 1, 'slower' when below,
    else 'indistinguishable' (the data cannot tell them apart)."""
    if speedup.low > 1.0:
        return "faster"
    if speedup.high < 1.0:
        return "slower"
    return "indistinguishable"


def _percentiles(values: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(low), float(high)


def _replicate_indices(blocks: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(resamples, n) indices into the rounds: blocks drawn with replacement, then rounds drawn
    with replacement inside each drawn block. Every slot draws as many rounds as the largest
    block has, so blocks cut short weigh a little more than their size; they are rare (a time
    cap hit mid-block)."""
    labels, starts, sizes = np.unique(blocks, return_index=True, return_counts=True)
    # Rounds of one block are contiguous here (analyse sorts them so).
    order = np.argsort(starts)
    starts, sizes = starts[order], sizes[order]
    count = len(labels)
    per_slot = int(sizes.max())
    if count == 1:
        return rng.integers(0, per_slot, size=(resamples, per_slot))
    chosen = rng.integers(0, count, size=(resamples, count))
    offsets = starts[chosen][:, :, None]
    spans = sizes[chosen][:, :, None]
    inside = np.floor(rng.random((resamples, count, per_slot)) * spans).astype(np.int64)
    return (offsets + inside).reshape(resamples, count * per_slot)


def analyse(
    samples: Mapping[str, Sequence[float]],
    blocks: Sequence[int] | None = None,
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int | None = None,
    pairs: Sequence[tuple[str, str]] | None = None,
) -> Analysis:
    """Summaries and pairwise speedups of paired samples: samples[name][i] is round i's time of
    contestant `name` (every contestant has one per round); blocks[i] is the process block round
    i belongs to (all one block when None). `pairs` limits which speedups are computed (default:
    every ordered pair)."""
    names = list(samples)
    if not names:
        return Analysis(summaries={})
    lengths = {len(samples[name]) for name in names}
    if len(lengths) != 1 or 0 in lengths:
        raise ValueError("every contestant needs the same, non-zero number of samples")
    data = np.array([list(samples[name]) for name in names], dtype=np.float64)
    if data.ndim != 2:
        raise ValueError("every contestant needs the same, non-zero number of samples")
    n = data.shape[1]
    block_ids = np.zeros(n, dtype=np.int64) if blocks is None else np.asarray(blocks)
    if block_ids.shape != (n,):
        raise ValueError(f"blocks has {block_ids.shape} entries for {n} rounds")
    # Blocks may interleave in time (rounds go to process sets in turn); the bootstrap wants
    # each block's rounds together. Medians do not depend on the order.
    order = np.argsort(block_ids, kind="stable")
    data, block_ids = data[:, order], block_ids[order]
    rng = np.random.default_rng(seed)
    index = _replicate_indices(block_ids, resamples, rng)
    # (contestants, resamples): the median of each contestant in each replicate.
    medians = np.median(data[:, index], axis=2)
    estimates = np.median(data, axis=1)
    summaries: dict[str, Summary] = {}
    too_few = n < MIN_SAMPLES
    for row, name in enumerate(names):
        values = data[row]
        low, high = (0.0, math.inf) if too_few else _percentiles(medians[row], confidence)
        q1, q3 = np.percentile(values, [25, 75])
        summaries[name] = Summary(
            median=Interval(float(estimates[row]), low, high),
            q1=float(q1),
            q3=float(q3),
            minimum=float(values.min()),
            maximum=float(values.max()),
            mean=float(values.mean()),
            stdev=float(values.std(ddof=1)) if n > 1 else 0.0,
            samples=n,
        )
    wanted = pairs if pairs is not None else [(a, b) for a in names for b in names if a != b]
    speedups: dict[tuple[str, str], Interval] = {}
    row_of = {name: row for row, name in enumerate(names)}
    with np.errstate(divide="ignore", invalid="ignore"):
        for a, b in wanted:
            ra, rb = row_of[a], row_of[b]
            ratios = medians[rb] / medians[ra]
            ratios = ratios[np.isfinite(ratios)]
            estimate = float(estimates[rb] / estimates[ra]) if estimates[ra] > 0 else math.inf
            if ratios.size == 0 or too_few:
                speedups[(a, b)] = Interval(estimate, 0.0, math.inf)
                continue
            low, high = _percentiles(ratios, confidence)
            speedups[(a, b)] = Interval(estimate, low, high)
    return Analysis(summaries=summaries, speedups=speedups, blocks=len(np.unique(block_ids)))


def _log_sigma(interval: Interval, confidence: float) -> float:
    """The standard error on the log scale implied by an interval (normal approximation)."""
    z = _z(confidence)
    if interval.low <= 0 or interval.high <= 0 or not math.isfinite(interval.high):
        return math.inf
    return max(math.log(interval.high / interval.low) / (2 * z), 1e-9)


def _z(confidence: float) -> float:
    # The normal quantile, by bisection on erf: no SciPy in the harness.
    target = 0.5 + confidence / 2
    low, high = 0.0, 10.0
    for _ in range(80):
        mid = (low + high) / 2
        if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < target:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def pool(intervals: Sequence[Interval], confidence: float = CONFIDENCE) -> Interval:
    """One estimate from several measurements of the same quantity (latency or speedup): a
    random-effects inverse-variance mean on the log scale. A measurement without a usable
    interval counts only when none has one (then the median of the estimates, no narrower
    than their range)."""
    usable = [
        (math.log(i.estimate), _log_sigma(i, confidence))
        for i in intervals
        if i.estimate > 0 and math.isfinite(i.estimate)
    ]
    finite = [(m, s) for m, s in usable if math.isfinite(s)]
    if not finite:
        estimates = sorted(i.estimate for i in intervals)
        if not estimates:
            raise ValueError("nothing to pool")
        middle = float(np.median(estimates))
        return Interval(middle, min(i.low for i in intervals), max(i.high for i in intervals))
    if len(finite) == 1:
        mean, sigma = finite[0]
        tau2 = 0.0
    else:
        logs = np.array([m for m, _ in finite])
        variances = np.array([s * s for _, s in finite])
        weights = 1 / variances
        fixed = float((weights * logs).sum() / weights.sum())
        q = float((weights * (logs - fixed) ** 2).sum())
        scale = float(weights.sum() - (weights**2).sum() / weights.sum())
        tau2 = max(0.0, (q - (len(finite) - 1)) / scale) if scale > 0 else 0.0
        weights = 1 / (variances + tau2)
        mean = float((weights * logs).sum() / weights.sum())
        sigma = math.sqrt(1 / float(weights.sum()))
    z = _z(confidence)
    return Interval(math.exp(mean), math.exp(mean - z * sigma), math.exp(mean + z * sigma))


def ratio_of_independent(numerator: Interval, denominator: Interval, confidence: float) -> Interval:
    """numerator / denominator for two quantities measured apart (not in the same rounds):
    their log-scale errors add in quadrature. Wider than a paired interval, as it should be."""
    sigma = math.hypot(_log_sigma(numerator, confidence), _log_sigma(denominator, confidence))
    estimate = numerator.estimate / denominator.estimate if denominator.estimate > 0 else math.inf
    if not math.isfinite(sigma) or not math.isfinite(estimate):
        return Interval(estimate, 0.0, math.inf)
    z = _z(confidence)
    return Interval(estimate, estimate * math.exp(-z * sigma), estimate * math.exp(z * sigma))


def drift(values: Sequence[float]) -> float:
    """Relative change between the median of the first and of the last third of a series (in
    time order): a host that slowed down or sped up during the measurement."""
    n = len(values)
    if n < 6:
        return 0.0
    third = n // 3
    first = float(np.median(values[:third]))
    last = float(np.median(values[-third:]))
    return (last - first) / first if first > 0 else 0.0
