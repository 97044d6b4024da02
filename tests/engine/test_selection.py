"""The selection rules on hand-built attempts."""

from __future__ import annotations

from accelopt_mcp.engine.checkpoint import Checkpoint
from accelopt_mcp.engine.selection import (
    AttemptRecord,
    BeamEntry,
    next_beam,
    plan_representatives,
    select_pairs,
)
from tests.engine.conftest import OLD_INITIAL, OLD_SLOT


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
    beam = next_beam(old, new, width=3).beam
    assert [e.latency_ms for e in beam] == [2.0, 5.0, 6.0]
    assert len({e.branch for e in beam}) == 3
    assert [e.solution_id for e in next_beam(old, [], width=2).beam] == ["old"]
    assert next_beam(old, new, width=3).ties == []  # no intervals: no ties, the old rule


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


# --------------------------------------------------------------------------- untrusted results


def flagged(plan: int, index: int, latency: float, *flags: str) -> AttemptRecord:
    return attempt(plan, index, latency).model_copy(update={"flags": list(flags)})


def test_flags_decide_trust_unknown_ones_included() -> None:
    assert attempt(0, 0, 1.0).trusted  # no flags
    assert flagged(0, 0, 1.0, "noisy_timing", "not_isolated").trusted
    assert flagged(0, 0, 1.0, "no_reference_latency", "unstable_latency").usable
    for flag in ("above_peak", "constant_output", "timed_output_mismatch", "forged_result"):
        assert not flagged(0, 0, 1.0, flag).trusted
    assert not flagged(0, 0, 1.0, "input_independent_output").usable
    assert not flagged(0, 0, 1.0, "noisy_timing", "a_flag_from_the_future").trusted
    assert flagged(0, 0, 1.0, "above_peak").passed  # it did pass; it is just not believed


def test_a_flagged_attempt_never_enters_the_beam() -> None:
    old = [BeamEntry(solution_id="old", latency_ms=6.0, source_hash="h-old", branch="initial")]
    new = [
        flagged(0, 0, 1.0, "above_peak"),  # fastest, and the fastest of its branch
        attempt(0, 1, 3.0),  # same branch: takes the branch's place
        flagged(1, 0, 0.5, "input_independent_output"),  # a branch of flagged attempts only
        flagged(2, 0, 4.0, "noisy_timing"),  # informational: joins
    ]
    beam = next_beam(old, new, width=4).beam
    assert [(e.solution_id, e.latency_ms) for e in beam] == [
        ("s-0-0-1", 3.0),
        ("s-0-2-0", 4.0),
        ("old", 6.0),
    ]


def test_a_flagged_attempt_represents_no_plan_and_forms_no_pair() -> None:
    attempts = [
        flagged(0, 0, 1.0, "above_peak"),  # 10x, flagged: the plan's best is the honest one
        attempt(0, 1, 4.0),  # 2.5x
        flagged(1, 0, 2.0, "constant_output"),  # a plan whose only pass is flagged
        attempt(1, 1, None, status="RUNTIME_ERROR"),
        flagged(2, 0, 40.0, "timed_output_mismatch"),  # a flagged slowdown: no negative pair
        attempt(2, 1, 20.0),  # 0.5x
    ]
    chosen = {a.plan_index: a.latency_ms for a in plan_representatives(attempts)}
    assert chosen == {0: 4.0, 2: 20.0}
    pairs = select_pairs(attempts, topk=4, positive_threshold=1.04, negative_threshold=0.87)
    assert [(p.attempt.latency_ms, p.positive) for p in pairs] == [(4.0, True), (20.0, False)]
    assert all(p.attempt.trusted for p in pairs)


def test_old_checkpoint_slots_without_flags_load_as_trusted() -> None:
    slot = AttemptRecord.model_validate(OLD_SLOT)
    assert slot.flags == [] and slot.trusted and slot.usable
    checkpoint = Checkpoint.model_validate(
        {
            "initial": OLD_INITIAL,
            "slots": {"1/0/0/0": OLD_SLOT},
            "history": [
                {
                    "iteration": 1,
                    "best_latency_ms": 2.0,
                    "attempts": 1,
                    "passed": 1,
                    "failed": 0,
                    "experiences_added": 0,
                }
            ],
        }
    )
    assert checkpoint.history[0].flagged == 0
    assert checkpoint.best_so_far().solution_id == "s"
    # A flagged slot written now round-trips with its flags, and is never the fastest.
    checkpoint.slots["1/0/0/1"] = flagged(0, 1, 0.1, "above_peak")
    again = Checkpoint.model_validate(checkpoint.model_dump(mode="json"))
    assert again.slots["1/0/0/1"].flags == ["above_peak"]
    assert again.best_so_far().solution_id == "s"


def test_a_negative_pair_that_is_a_positive_pair_reversed_is_not_taken_twice() -> None:
    """B's plan gave back A's source (slower): slow -> fast is A -> B both ways."""
    from accelopt_mcp.engine.selection import AttemptRecord, select_pairs

    def attempt(parent: str, solution: str, speedup: float, key: int) -> AttemptRecord:
        return AttemptRecord(
            iteration=2,
            beam_index=key,
            plan_index=0,
            attempt_index=0,
            parent_id=parent,
            parent_latency_ms=1.0,
            status="PASSED",
            solution_id=solution,
            source_hash=solution,
            latency_ms=1.0 / speedup,
        )

    forward = attempt("A", "B", 2.0, 0)  # A's plan gave B: 2x faster
    backward = attempt("B", "A", 0.5, 1)  # B's plan gave back A: 2x slower
    other = attempt("B", "C", 0.5, 2)
    pairs = select_pairs([forward, backward, other], topk=4, positive_threshold=1.04,
                         negative_threshold=0.87)  # fmt: skip
    kinds = [(p.attempt.solution_id, p.positive) for p in pairs]
    assert kinds == [("B", True), ("C", False)]
