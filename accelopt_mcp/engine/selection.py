"""Pure selection rules of the algorithm: which pairs become experience, which kernels form
the next beam. No I/O here, so the rules are tested on their own.

An attempt whose evaluation carries an untrusted flag (models/evaluation.py: e.g. above_peak,
constant_output) passed but cannot be believed: it is kept in the checkpoint with its flags,
but it never represents a plan (no experience pair), never enters the beam and never becomes
the run's best (`AttemptRecord.usable`)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from accelopt_mcp.models.evaluation import flags_trusted

PASSED = "PASSED"
NO_CODE = "NO_CODE"
"""The executor's reply held no usable code block."""
LLM_FAILED = "LLM_FAILED"
"""The executor call failed for good (retries exhausted)."""


class AttemptRecord(BaseModel):
    """What became of one executor slot (iteration, beam kernel, plan, attempt)."""

    iteration: int
    beam_index: int
    plan_index: int
    attempt_index: int
    parent_id: str
    parent_latency_ms: float | None
    status: str
    """An EvaluationStatus value, NO_CODE or LLM_FAILED."""
    solution_id: str | None = None
    source_hash: str | None = None
    latency_ms: float | None = None
    error: str | None = None
    reused_profile: bool = False
    """The source was already profiled (same hash, same settings): its profile was reused."""
    flags: list[str] = Field(default_factory=list)
    """The evaluation's flags. Checkpoints written before flags were kept have none: their
    attempts read as trusted."""

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
        """Parent latency / own latency; None unless both are known and the attempt passed."""
        if not self.passed or not self.parent_latency_ms:
            return None
        assert self.latency_ms is not None
        return self.parent_latency_ms / self.latency_ms


def slot_key(iteration: int, beam_index: int, plan_index: int, attempt_index: int) -> str:
    return f"{iteration}/{beam_index}/{plan_index}/{attempt_index}"


class Pair(BaseModel):
    """A (parent, attempt) pair chosen for the summarizer."""

    attempt: AttemptRecord
    speedup: float
    positive: bool


def plan_representatives(attempts: list[AttemptRecord]) -> list[AttemptRecord]:
    """Per plan: its best attempt when that beats the parent, else its worst. Attempts that did
    not pass have no speedup and represent nothing; neither do untrusted (flagged) ones."""
    by_plan: dict[str, list[AttemptRecord]] = {}
    for attempt in attempts:
        if attempt.speedup is not None and attempt.trusted:
            by_plan.setdefault(attempt.branch, []).append(attempt)
    chosen = []
    for group in by_plan.values():
        best = max(group, key=lambda a: a.speedup or 0.0)
        worst = min(group, key=lambda a: a.speedup or 0.0)
        chosen.append(best if (best.speedup or 0.0) > 1.0 else worst)
    return chosen


def select_pairs(
    attempts: list[AttemptRecord],
    *,
    topk: int,
    positive_threshold: float,
    negative_threshold: float,
) -> list[Pair]:
    """Up to topk // 2 positive pairs (speedup >= positive_threshold, best first), the rest of
    the topk slots filled with negative pairs (speedup <= negative_threshold, worst first).
    Plans whose representatives are the same stored kernel of the same parent give one pair."""
    representatives = plan_representatives(attempts)
    positives = _distinct(
        sorted(
            (a for a in representatives if (a.speedup or 0.0) >= positive_threshold),
            key=lambda a: (-(a.speedup or 0.0), a.key),
        )
    )[: topk // 2]
    negatives = _distinct(
        sorted(
            (a for a in representatives if (a.speedup or 0.0) <= negative_threshold),
            key=lambda a: (a.speedup or 0.0, a.key),
        )
    )[: max(0, topk - len(positives))]
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


class BeamEntry(BaseModel):
    solution_id: str
    latency_ms: float
    source_hash: str
    branch: str
    """The plan branch it came from ("initial" for the starting kernel)."""


def next_beam(old: list[BeamEntry], attempts: list[AttemptRecord], width: int) -> list[BeamEntry]:
    """The `width` fastest correct, trusted kernels among the old beam and the new attempts, one
    per source hash and one per plan branch. Ties go to the old beam (it is known to be
    stable)."""
    candidates = list(old) + [
        BeamEntry(
            solution_id=a.solution_id,
            latency_ms=a.latency_ms,
            source_hash=a.source_hash,
            branch=a.branch,
        )
        for a in attempts
        if a.usable and a.solution_id and a.source_hash and a.latency_ms is not None
    ]
    order = {id(entry): index for index, entry in enumerate(candidates)}
    candidates.sort(key=lambda e: (e.latency_ms, order[id(e)]))
    beam: list[BeamEntry] = []
    hashes: set[str] = set()
    branches: set[str] = set()
    for entry in candidates:
        if entry.source_hash in hashes or entry.branch in branches:
            continue
        beam.append(entry)
        hashes.add(entry.source_hash)
        branches.add(entry.branch)
        if len(beam) == width:
            break
    return beam
