"""The selection rules on hand-built attempts."""

from __future__ import annotations

from accelopt_mcp.engine.selection import (
    AttemptRecord,
    BeamEntry,
    next_beam,
    plan_representatives,
    select_pairs,
)


def attempt(
    plan: int,
    index: int,
    latency: float | None,
    *,
    status: str = "PASSED",
    parent_latency: float = 10.0,
    beam_index: int = 0,
    source: str | None = None,
) -> AttemptRecord:
    return AttemptRecord(
        iteration=1,
        beam_index=beam_index,
        plan_index=plan,
        attempt_index=index,
        parent_id="parent",
        parent_latency_ms=parent_latency,
        status=status,
        solution_id=f"s-{beam_index}-{plan}-{index}",
        source_hash=source or f"h-{beam_index}-{plan}-{index}",
        latency_ms=latency,
    )


def test_representative_is_best_when_faster_else_worst() -> None:
    faster = [attempt(0, 0, 8.0), attempt(0, 1, 5.0), attempt(0, 2, 12.0)]
    slower = [attempt(1, 0, 11.0), attempt(1, 1, 20.0)]
    broken = [attempt(2, 0, None, status="COMPILE_ERROR"), attempt(2, 1, None, status="NO_CODE")]
    chosen = {a.plan_index: a for a in plan_representatives(faster + slower + broken)}
    assert chosen[0].latency_ms == 5.0
    assert chosen[1].latency_ms == 20.0
    assert 2 not in chosen  # no correct attempt, no pair


def test_at_most_half_positive_and_thresholds() -> None:
    attempts = [
        attempt(0, 0, 2.0),  # 5x
        attempt(1, 0, 4.0),  # 2.5x
        attempt(2, 0, 9.8),  # 1.02x: below the positive threshold
        attempt(3, 0, 10.5),  # 0.95x: above the negative threshold
        attempt(4, 0, 20.0),  # 0.5x
        attempt(5, 0, 40.0),  # 0.25x
        attempt(6, 0, 3.0),  # 3.3x
    ]
    pairs = select_pairs(attempts, topk=4, positive_threshold=1.04, negative_threshold=0.87)
    positive = [p.speedup for p in pairs if p.positive]
    negative = [p.speedup for p in pairs if not p.positive]
    assert positive == [5.0, 10.0 / 3.0]  # best first, capped at topk // 2
    assert negative == [0.25, 0.5]  # worst first, filling the rest
    few_positive = select_pairs(
        attempts[2:6], topk=4, positive_threshold=1.04, negative_threshold=0.87
    )
    assert [p.speedup for p in few_positive] == [0.25, 0.5]
    assert select_pairs(attempts, topk=0, positive_threshold=1.04, negative_threshold=0.87) == []
    odd = select_pairs(attempts, topk=3, positive_threshold=1.04, negative_threshold=0.87)
    assert sum(p.positive for p in odd) == 1 and len(odd) == 3


def test_next_beam_dedups_by_hash_and_branch() -> None:
    old = [BeamEntry(solution_id="old", latency_ms=6.0, source_hash="h-old", branch="initial")]
    new = [
        attempt(0, 0, 3.0),
        attempt(0, 1, 2.0),  # same plan branch as the one above: only the faster stays
        attempt(1, 0, 4.0, source="h-0-0-1"),  # same source as the 2.0 one
        attempt(2, 0, 5.0),
        attempt(3, 0, None, status="RUNTIME_ERROR"),
    ]
    beam = next_beam(old, new, width=3)
    assert [e.latency_ms for e in beam] == [2.0, 5.0, 6.0]
    assert len({e.branch for e in beam}) == 3
    assert [e.solution_id for e in next_beam(old, [], width=2)] == ["old"]


def test_a_pair_found_by_two_plans_is_summarized_once() -> None:
    # Two plans of one parent whose best attempts wrote the same kernel (one stored solution):
    # one slow -> fast pair, so one memory item, and the free slot goes to the next pair.
    same = attempt(0, 0, 2.0)
    twin = same.model_copy(update={"plan_index": 1})
    worse = attempt(1, 1, 30.0).model_copy(update={"plan_index": 2})
    slowest = attempt(3, 0, 40.0)
    again = slowest.model_copy(update={"plan_index": 4})
    other = attempt(5, 0, 4.0)
    pairs = select_pairs(
        [same, twin, worse, slowest, again, other],
        topk=4,
        positive_threshold=1.04,
        negative_threshold=0.87,
    )
    ids = [(p.attempt.parent_id, p.attempt.solution_id) for p in pairs]
    assert len(ids) == len(set(ids)) == 4
    assert [p.speedup for p in pairs] == [5.0, 2.5, 0.25, 10.0 / 30.0]
