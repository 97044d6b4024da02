"""Pure selection rules of the algorithm: which pairs become experience, which kernels form
the next beam. No I/O here, so the rules are tested on their own.

An attempt whose evaluation carries an untrusted flag (models/evaluation.py: e.g. above_peak,
constant_output) passed but cannot be believed: it is kept in the checkpoint with its flags,
but it never represents a plan (no experience pair), never enters the beam and never becomes
the run's best (`AttemptRecord.usable`).

Selection under noise. A timing is an estimate with a confidence interval (accelopt_mcp.stats),
and the rules act only on what the interval supports:

- An attempt's speedup is against its parent. It comes from the 'parent' comparison when the
  backend timed that parent in the same interleaved rounds ("same_rounds": drift cancels, the
  interval is narrow; an attempt reusing a profile the run took beside the same parent gets
  it too); otherwise (a stored profile timed beside who knows what, or a backend that does
  not interleave) from the two medians' intervals combined as independent errors ("apart":
  wider). Where either kernel has no interval (an old checkpoint, a backend that gives none)
  the speedup is a point estimate and every rule below falls back to the old one on it: an
  unknown interval is not read as (0, inf), which would silence such backends altogether.
- A pair is positive only when its whole interval (and its estimate) is at or above
  positive_threshold, negative only when its whole interval is at or below
  negative_threshold: a 1.2x estimate with interval [0.95, 1.5] is neither.
- A plan's best attempt is "better than the parent" only when its interval is above 1
  (verdict 'faster'); an indistinguishable one is not.
- In the next beam, two neighbours whose speedup-over-reference intervals overlap are a tie.
  Where a tie decides something (who is first, i.e. the run's best; who takes the last beam
  slot) `next_beam` reports it, and applies the verdicts of head-to-head re-measures it is
  given (the engine runs them: winner.settle_beam). Without a clear verdict the old rule
  stands: the kernel already in the beam, then the lower median.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal, NamedTuple

from pydantic import BaseModel, Field

from accelopt_mcp.models import Evaluation
from accelopt_mcp.models.evaluation import Comparison, flags_trusted
from accelopt_mcp.stats import Interval, finite_or_none, ratio_of_independent, verdict

PASSED = "PASSED"
NO_CODE = "NO_CODE"
"""The executor's reply held no usable code block."""
LLM_FAILED = "LLM_FAILED"
"""The LLM call (the plan's or the executor's) failed for good (retries exhausted)."""
NO_PLAN = "NO_PLAN"
"""The planner answered, but with no plan for this sample (a reply that held none, or fewer
distinct plans than asked for). Like LLM_FAILED, tried again on resume."""
PARENT_LABEL = "parent"
"""How an attempt's parent is named among its evaluation's comparisons."""

SpeedupMeasured = Literal["same_rounds", "apart"]


def interval_of(estimate: float | None, low: float | None, high: float | None) -> Interval | None:
    """The interval of stored bounds: None without an estimate or a lower end; an upper end of
    None is unbounded."""
    if estimate is None or low is None:
        return None
    return Interval(estimate, low, math.inf if high is None else high)


class Measured(BaseModel):
    """A kernel's figures with their intervals, as its evaluation gave them. Every field is
    optional so that checkpoints written before intervals were kept still load."""

    latency_ms: float | None = None
    latency_ci_low_ms: float | None = None
    """Lower end of the median latency's confidence interval (None: the backend gave none)."""
    latency_ci_high_ms: float | None = None
    """Upper end (None with a lower end: unbounded)."""
    reference_speedup: float | None = None
    """Speedup over the task's reference, timed in the same rounds as the kernel."""
    reference_speedup_ci_low: float | None = None
    reference_speedup_ci_high: float | None = None

    @property
    def latency_interval(self) -> Interval | None:
        return interval_of(self.latency_ms, self.latency_ci_low_ms, self.latency_ci_high_ms)

    @property
    def reference_interval(self) -> Interval | None:
        return interval_of(
            self.reference_speedup, self.reference_speedup_ci_low, self.reference_speedup_ci_high
        )


def measured_fields(evaluation: Evaluation) -> dict[str, float | None]:
    """The interval fields of `Measured` (latency_ms aside) from an evaluation; None where it
    has no such figure."""
    perf, stats = evaluation.performance, evaluation.latency_stats
    has_reference = perf is not None and perf.speedup_factor > 0
    return {
        "latency_ci_low_ms": stats.ci_low_ms if stats else None,
        "latency_ci_high_ms": finite_or_none(stats.ci_high_ms) if stats else None,
        "reference_speedup": perf.speedup_factor if perf and has_reference else None,
        "reference_speedup_ci_low": perf.speedup_ci_low if perf and has_reference else None,
        "reference_speedup_ci_high": (
            finite_or_none(perf.speedup_ci_high) if perf and has_reference else None
        ),
    }


class AttemptRecord(Measured):
    """What became of one executor slot (iteration, beam kernel, plan, attempt)."""

    iteration: int
    beam_index: int
    plan_index: int
    attempt_index: int
    parent_id: str
    parent_latency_ms: float | None
    status: str
    """An EvaluationStatus value, NO_CODE, NO_PLAN or LLM_FAILED."""
    solution_id: str | None = None
    source_hash: str | None = None
    error: str | None = None
    reused_profile: bool = False
    """The source was already profiled (same hash, same settings): its profile was reused."""
    flags: list[str] = Field(default_factory=list)
    """The evaluation's flags. Checkpoints written before flags were kept have none: their
    attempts read as trusted."""
    parent_speedup: float | None = None
    """Parent median / own median with the parent timed in the same rounds (the 'parent'
    comparison); None when they were not, and `speedup` is parent_latency_ms / latency_ms."""
    speedup_ci_low: float | None = None
    """Lower end of the interval of `speedup` (against the parent); None: no interval, the
    rules read the point estimate."""
    speedup_ci_high: float | None = None
    """Upper end (None with a lower end: unbounded)."""
    speedup_measured: SpeedupMeasured | None = None
    """How the interval was had: 'same_rounds' (the parent interleaved with the attempt) or
    'apart' (two separate measurements' intervals combined); None without an interval."""
    repairs: int = 0
    """Repair calls the executor was asked after the attempt failed (the record is the last
    kernel tried; a try whose reply held no new kernel counts too)."""
    repaired_from: list[str] = Field(default_factory=list)
    """The failed kernels before `solution_id`, oldest first; each is the parent (in the
    store's lineage) of the next."""

    @property
    def key(self) -> str:
        return slot_key(self.iteration, self.beam_index, self.plan_index, self.attempt_index)

    @property
    def branch(self) -> str:
        return f"{self.iteration}/{self.beam_index}/{self.plan_index}"

    @property
    def passed(self) -> bool:
        return self.status == PASSED and self.latency_ms is not None and self.latency_ms > 0

    @property
    def trusted(self) -> bool:
        """No flag says its result cannot be believed (models.evaluation.flags_trusted)."""
        return flags_trusted(self.flags)

    @property
    def usable(self) -> bool:
        """Passed with a latency and trusted: it may join the beam, form a pair, be the best."""
        return self.passed and self.trusted

    @property
    def speedup(self) -> float | None:
        """How many times faster than its parent: the same-rounds estimate when there is one,
        else parent latency / own latency; None unless the attempt passed and both are known."""
        if not self.passed:
            return None
        if self.parent_speedup is not None:
            return self.parent_speedup
        if not self.parent_latency_ms:
            return None
        assert self.latency_ms is not None
        return self.parent_latency_ms / self.latency_ms

    @property
    def speedup_interval(self) -> Interval | None:
        """`speedup` with its interval; a point (low = high = estimate) when there is none."""
        estimate = self.speedup
        if estimate is None:
            return None
        interval = interval_of(estimate, self.speedup_ci_low, self.speedup_ci_high)
        return interval or Interval(estimate, estimate, estimate)

    @property
    def beats_parent(self) -> bool:
        """Faster than its parent by its whole interval (by its estimate without one)."""
        interval = self.speedup_interval
        return interval is not None and verdict(interval) == "faster"

    def as_beam_entry(self) -> BeamEntry | None:
        """The attempt as a beam candidate; None unless it is usable and stored."""
        if not (self.usable and self.solution_id and self.source_hash):
            return None
        assert self.latency_ms is not None
        return BeamEntry(
            solution_id=self.solution_id,
            latency_ms=self.latency_ms,
            source_hash=self.source_hash,
            branch=self.branch,
            **{name: getattr(self, name) for name in MEASURED_INTERVAL_FIELDS},
        )


MEASURED_INTERVAL_FIELDS = tuple(name for name in Measured.model_fields if name != "latency_ms")


def parent_speedup_fields(
    evaluation: Evaluation, parent: Measured, comparison: Comparison | None
) -> dict[str, float | str | None]:
    """The AttemptRecord fields of the speedup over the parent and its interval.

    comparison: the evaluation's 'parent' comparison when it is against this very parent (the
    caller knows: a reused profile may have been timed beside another kernel). Without it,
    the two latency intervals are combined as independent measurements; when either is
    missing there is no interval and the rules read the point estimate (module docstring)."""
    if not evaluation.passed or evaluation.performance is None:
        return {}
    if comparison is not None:
        return {
            "parent_speedup": comparison.speedup,
            "speedup_ci_low": comparison.ci_low,
            "speedup_ci_high": finite_or_none(comparison.ci_high),
            "speedup_measured": "same_rounds",
        }
    own = interval_of(
        evaluation.performance.latency_ms,
        evaluation.latency_stats.ci_low_ms if evaluation.latency_stats else None,
        evaluation.latency_stats.ci_high_ms if evaluation.latency_stats else None,
    )
    theirs = parent.latency_interval
    if own is None or theirs is None:
        return {}
    confidence = evaluation.latency_stats.confidence if evaluation.latency_stats else 0.95
    ratio = ratio_of_independent(theirs, own, confidence)
    return {
        "speedup_ci_low": ratio.low,
        "speedup_ci_high": finite_or_none(ratio.high),
        "speedup_measured": "apart",
    }


def slot_key(iteration: int, beam_index: int, plan_index: int, attempt_index: int) -> str:
    return f"{iteration}/{beam_index}/{plan_index}/{attempt_index}"


class Pair(BaseModel):
    """A (parent, attempt) pair chosen for the summarizer."""

    attempt: AttemptRecord
    speedup: float
    positive: bool


def _lower(attempt: AttemptRecord) -> float:
    """The least the interval allows (the estimate too: a percentile interval may, rarely,
    leave its own estimate out)."""
    interval = attempt.speedup_interval
    assert interval is not None
    return min(interval.low, interval.estimate)


def _upper(attempt: AttemptRecord) -> float:
    interval = attempt.speedup_interval
    assert interval is not None
    return max(interval.high, interval.estimate)


def plan_representatives(attempts: list[AttemptRecord]) -> list[AttemptRecord]:
    """Per plan: its best attempt when that beats the parent by its whole interval, else its
    worst. Best is the surest gain (highest lower end), worst the surest loss (lowest upper
    end); with point estimates both are the old rule. Attempts that did not pass have no
    speedup and represent nothing; neither do untrusted (flagged) ones."""
    by_plan: dict[str, list[AttemptRecord]] = {}
    for attempt in attempts:
        if attempt.speedup is not None and attempt.trusted:
            by_plan.setdefault(attempt.branch, []).append(attempt)
    chosen = []
    for group in by_plan.values():
        best = max(group, key=lambda a: (_lower(a), a.speedup or 0.0))
        worst = min(group, key=lambda a: (_upper(a), a.speedup or 0.0))
        chosen.append(best if best.beats_parent else worst)
    return chosen


def select_pairs(
    attempts: list[AttemptRecord],
    *,
    topk: int,
    positive_threshold: float,
    negative_threshold: float,
) -> list[Pair]:
    """Up to topk // 2 positive pairs (the whole speedup interval >= positive_threshold, surest
    first), the rest of the topk slots filled with negative pairs (the whole interval <=
    negative_threshold, surest first). Without an interval the estimate alone decides.
    Plans whose representatives are the same stored kernel of the same parent give one pair."""
    representatives = plan_representatives(attempts)
    positives = _distinct(
        sorted(
            (a for a in representatives if _lower(a) >= positive_threshold),
            key=lambda a: (-_lower(a), -(a.speedup or 0.0), a.key),
        )
    )[: topk // 2]
    # A negative pair is (attempt -> its parent) read slow -> fast: one whose two kernels are
    # a positive pair's, the other way round (B's plan gave back A's source in the next
    # iteration), is the same lesson and is not summarized twice.
    taken = {(a.parent_id, a.solution_id) for a in positives}
    negatives = [
        a
        for a in _distinct(
            sorted(
                (a for a in representatives if _upper(a) <= negative_threshold),
                key=lambda a: (_upper(a), a.speedup or 0.0, a.key),
            )
        )
        if (a.solution_id, a.parent_id) not in taken
    ][: max(0, topk - len(positives))]
    return [Pair(attempt=a, speedup=a.speedup or 0.0, positive=True) for a in positives] + [
        Pair(attempt=a, speedup=a.speedup or 0.0, positive=False) for a in negatives
    ]


def _distinct(attempts: list[AttemptRecord]) -> list[AttemptRecord]:
    """The first attempt of each (parent, kernel) pair, in order."""
    seen: set[tuple[str, str | None]] = set()
    kept = []
    for attempt in attempts:
        pair = (attempt.parent_id, attempt.solution_id)
        if pair not in seen:
            seen.add(pair)
            kept.append(attempt)
    return kept


class BeamEntry(Measured):
    solution_id: str
    latency_ms: float
    source_hash: str
    branch: str
    """The plan branch it came from ("initial" for the starting kernel)."""


# --------------------------------------------------------------------------- ties


TieBasis = Literal["reference_speedup", "latency"]
TiePlace = Literal["first", "last"]
TieReason = Literal["faster head-to-head", "already in the beam", "lower median"]


class HeadToHead(BaseModel):
    """What re-measuring two tied kernels against each other found."""

    verdict: Literal["faster", "indistinguishable"] | None
    """'faster': `faster` wins by its whole interval; None: no verdict (see `note`)."""
    faster: str | None = None
    """The kernel with the lower median in the re-measure."""
    slower: str | None = None
    speedup: float | None = None
    """How many times faster `faster` was (>= 1)."""
    ci_low: float | None = None
    ci_high: float | None = None
    interleaved: bool = True
    """Timed in the same rounds (False: each on its own, intervals combined)."""
    note: str | None = None
    """Why there is no verdict (a kernel failed in the re-measure, the re-measure failed)."""

    @property
    def winner(self) -> str | None:
        return self.faster if self.verdict == "faster" else None


class TieDecision(BaseModel):
    """A beam decision the speedup intervals could not make on their own."""

    iteration: int
    place: TiePlace
    """'first': who leads the beam (the run's best); 'last': who takes the last beam slot."""
    slot: int
    """The beam slot decided, from 1."""
    placed: str
    """The kernel the median order put in the slot."""
    challenger: str
    """The next one in median order."""
    basis: TieBasis = "reference_speedup"
    """Whose intervals overlapped: speedups over the reference, or (without those) latencies."""
    head_to_head: HeadToHead | None = None
    """None: not re-measured (more ties than re-measures allowed in one iteration)."""
    kept: str
    """The kernel that took the slot."""
    reason: TieReason

    @property
    def pair(self) -> frozenset[str]:
        return frozenset((self.placed, self.challenger))

    def describe(self, short: int = 8) -> str:
        """One line for people, e.g. 'iteration 2: beam slot 2 was a tie between X and Y
        (speedup intervals overlap); head-to-head: indistinguishable, kept X (already in the
        beam)'."""
        placed, challenger, kept = (
            self.placed[:short],
            self.challenger[:short],
            self.kept[:short],
        )
        where = (
            "first place (the run's best)" if self.place == "first" else f"beam slot {self.slot}"
        )
        what = "speedup" if self.basis == "reference_speedup" else "latency"
        outcome = self.head_to_head
        if outcome is None:
            measured = "not re-measured (re-measure limit reached)"
        elif outcome.verdict is None:
            measured = f"head-to-head: no verdict ({outcome.note or 'unknown'})"
        else:
            figures = ""
            if outcome.speedup is not None and outcome.ci_low is not None:
                high = "inf" if outcome.ci_high is None else f"{outcome.ci_high:.3f}"
                figures = f" {outcome.speedup:.3f}x [{outcome.ci_low:.3f}, {high}]"
            if outcome.verdict == "faster":
                measured = f"head-to-head: {(outcome.faster or '?')[:short]} faster{figures}"
            else:
                measured = f"head-to-head: indistinguishable{figures}"
        why = "" if self.reason == "faster head-to-head" else f" ({self.reason})"
        return (
            f"iteration {self.iteration}: {where} was a tie between {placed} and {challenger} "
            f"({what} intervals overlap); {measured}, kept {kept}{why}"
        )


class BeamChoice(NamedTuple):
    beam: list[BeamEntry]
    ties: list[TieDecision]
    """The decisions that were ties, in the order they were made (first place, then the
    last slot); those without `head_to_head` still want a re-measure."""


def tie_basis(a: Measured, b: Measured) -> TieBasis | None:
    """Which intervals of the two overlap (None: they do not, or there are none to compare):
    speedups over the reference when both have one (each is normalised by a reference timed
    in its own rounds, so host drift between the two evaluations cancels), else latencies."""
    first, second = a.reference_interval, b.reference_interval
    if first is not None and second is not None:
        return "reference_speedup" if _overlap(first, second) else None
    first, second = a.latency_interval, b.latency_interval
    if first is not None and second is not None:
        return "latency" if _overlap(first, second) else None
    return None


def _overlap(a: Interval, b: Interval) -> bool:
    return a.low <= b.high and b.low <= a.high


def rank_candidates(old: list[BeamEntry], attempts: list[AttemptRecord]) -> list[BeamEntry]:
    """Every correct, trusted kernel among the old beam and the new attempts, fastest first
    (the old beam first on equal ones), one per source hash and one per plan branch. Fastest
    means the highest speedup over the reference when every candidate has one: each is a
    ratio against a reference timed in its own rounds, so it does not move with how fast the
    host happened to be when the kernel was measured, as its raw median does. Otherwise the
    lowest median latency."""
    candidates = list(old) + [e for a in attempts if (e := a.as_beam_entry()) is not None]
    order = {id(entry): index for index, entry in enumerate(candidates)}
    by_reference = bool(candidates) and all(
        e.reference_speedup is not None and e.reference_speedup > 0 for e in candidates
    )
    if by_reference:
        candidates.sort(key=lambda e: (-(e.reference_speedup or 0.0), order[id(e)]))
    else:
        candidates.sort(key=lambda e: (e.latency_ms, order[id(e)]))
    ranked: list[BeamEntry] = []
    hashes: set[str] = set()
    branches: set[str] = set()
    for entry in candidates:
        if entry.source_hash in hashes or entry.branch in branches:
            continue
        ranked.append(entry)
        hashes.add(entry.source_hash)
        branches.add(entry.branch)
    return ranked


def next_beam(
    old: list[BeamEntry],
    attempts: list[AttemptRecord],
    width: int,
    head_to_heads: Mapping[frozenset[str], HeadToHead] | None = None,
    *,
    iteration: int = 0,
) -> BeamChoice:
    """The `width` fastest correct, trusted kernels among the old beam and the new attempts
    (rank_candidates), with the ties that decided who is first and who takes the last slot.

    A tie is two neighbours in rank order whose intervals overlap (tie_basis). It is decided
    by `head_to_heads[{a, b}]` when that has a clear winner, else by the old rule: the kernel
    already in the beam (it is known to be stable), then the lower median. First place is
    decided before the last slot, on the order that decision left."""
    ranked = rank_candidates(old, attempts)
    outcomes = head_to_heads or {}
    in_old = {entry.solution_id for entry in old}
    places: list[tuple[int, TiePlace]] = [(0, "first")]
    if width > 1:
        places.append((width - 1, "last"))
    ties: list[TieDecision] = []
    for index, place in places:
        if index + 1 >= len(ranked):
            continue  # nobody to contend with: every candidate is in
        placed, challenger = ranked[index], ranked[index + 1]
        basis = tie_basis(placed, challenger)
        if basis is None:
            continue
        outcome = outcomes.get(frozenset((placed.solution_id, challenger.solution_id)))
        winner = outcome.winner if outcome is not None else None
        if winner in (placed.solution_id, challenger.solution_id):
            kept = challenger if winner == challenger.solution_id else placed
            reason: TieReason = "faster head-to-head"
        elif challenger.solution_id in in_old and placed.solution_id not in in_old:
            kept, reason = challenger, "already in the beam"
        elif placed.solution_id in in_old and challenger.solution_id not in in_old:
            kept, reason = placed, "already in the beam"
        else:
            kept, reason = placed, "lower median"
        if kept is challenger:
            ranked[index], ranked[index + 1] = challenger, placed
        ties.append(
            TieDecision(
                iteration=iteration,
                place=place,
                slot=index + 1,
                placed=placed.solution_id,
                challenger=challenger.solution_id,
                basis=basis,
                head_to_head=outcome,
                kept=kept.solution_id,
                reason=reason,
            )
        )
    return BeamChoice(beam=ranked[:width], ties=ties)
