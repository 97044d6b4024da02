"""Selection under noise: the rules on intervals (pure), the parent timed with every attempt,
and ties re-measured head-to-head and reported (the real cpu backend)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from accelopt_mcp.backends.base import Baseline
from accelopt_mcp.backends.cpu import CpuBackend
from accelopt_mcp.backends.pool import BackendFactory, DevicePool, PooledEvaluation
from accelopt_mcp.cli import _register, app
from accelopt_mcp.engine.beam import BeamSearch
from accelopt_mcp.engine.checkpoint import Checkpoint
from accelopt_mcp.engine.executor import derived_solution
from accelopt_mcp.engine.profile_cache import ProfileCache, ProfiledSolution
from accelopt_mcp.engine.runs import best_figures, load_run, prepare_run
from accelopt_mcp.engine.selection import (
    PARENT_LABEL,
    AttemptRecord,
    BeamEntry,
    HeadToHead,
    TieDecision,
    next_beam,
    parent_speedup_fields,
    plan_representatives,
    select_pairs,
    tie_basis,
)
from accelopt_mcp.engine.winner import MAX_TIE_BREAKS, head_to_head_of, settle_beam
from accelopt_mcp.models import (
    BenchmarkConfig,
    ComparedKernel,
    Evaluation,
    KernelComparison,
    PairVerdict,
    Solution,
    Task,
)
from accelopt_mcp.models.evaluation import (
    Comparison,
    Correctness,
    Environment,
    EvaluationStatus,
    LatencyStats,
    Performance,
)
from accelopt_mcp.stats import Verdict
from accelopt_mcp.store.sqlite import SqliteStore
from tests.bench import quick_bench
from tests.engine import kernels
from tests.engine.conftest import OLD_INITIAL, OLD_SLOT, ScriptedSettings, build_script, text

# Timing-sensitive (measured speedups decide what is kept): run alone, not beside other tests
# (scripts/test.sh runs `-m serial` first, then the rest in parallel).
pytestmark = pytest.mark.serial

_register()
runner = CliRunner()

# Small and quick, yet two sets of fresh processes so that every interval is a real one.
NOISE_BENCH = quick_bench(
    seeds=[0, 1],
    iterations=5,
    processes=2,
    max_timing_seconds=2,
    timeout_seconds=10.0,
    memory_limit_mb=1024,
)
POS, NEG = 1.04, 0.87


def attempt(
    plan: int,
    index: int,
    latency: float,
    *,
    ci: tuple[float, float] | None = None,
    parent_latency: float = 10.0,
) -> AttemptRecord:
    """A passed attempt whose speedup over its parent is parent_latency / latency, with the
    interval `ci` (None: a point estimate)."""
    return AttemptRecord(
        iteration=1,
        beam_index=0,
        plan_index=plan,
        attempt_index=index,
        parent_id="parent",
        parent_latency_ms=parent_latency,
        status="PASSED",
        solution_id=f"s-{plan}-{index}",
        source_hash=f"h-{plan}-{index}",
        latency_ms=latency,
        speedup_ci_low=ci[0] if ci else None,
        speedup_ci_high=ci[1] if ci else None,
        speedup_measured="same_rounds" if ci else None,
    )


def pairs_of(*attempts: AttemptRecord, topk: int = 4) -> list[tuple[str | None, bool]]:
    chosen = select_pairs(list(attempts), topk=topk, positive_threshold=POS, negative_threshold=NEG)
    return [(p.attempt.solution_id, p.positive) for p in chosen]


# --------------------------------------------------------------------------- pairs


def test_a_positive_pair_needs_its_whole_interval_above_the_threshold() -> None:
    wide = attempt(0, 0, 10 / 1.2, ci=(0.95, 1.5))  # 1.2x, but it may be slower
    assert wide.speedup == pytest.approx(1.2)
    assert not wide.beats_parent
    assert pairs_of(wide) == []  # neither positive nor negative
    sure = attempt(0, 0, 10 / 1.2, ci=(1.05, 1.4))
    assert sure.beats_parent and pairs_of(sure) == [("s-0-0", True)]
    point = attempt(0, 0, 10 / 1.2)  # no interval: the estimate alone decides, as before
    assert pairs_of(point) == [("s-0-0", True)]
    # The lower end at the threshold is enough; just under it is not.
    assert pairs_of(attempt(0, 0, 10 / 1.1, ci=(POS, 1.2))) == [("s-0-0", True)]
    assert pairs_of(attempt(0, 0, 10 / 1.1, ci=(POS - 1e-6, 1.2))) == []
    # An estimate outside its own (percentile) interval does not sneak past the threshold.
    assert pairs_of(attempt(0, 0, 10 / 1.02, ci=(1.05, 1.3))) == []


def test_a_negative_pair_needs_its_whole_interval_below_the_threshold() -> None:
    assert pairs_of(attempt(0, 0, 12.5, ci=(0.7, 0.95))) == []  # 0.8x, may be 0.95x
    assert pairs_of(attempt(0, 0, 12.5, ci=(0.7, 0.85))) == [("s-0-0", False)]
    assert pairs_of(attempt(0, 0, 12.5)) == [("s-0-0", False)]  # point: 0.8 <= 0.87
    unbounded = attempt(0, 0, 12.5).model_copy(update={"speedup_ci_low": 0.5})
    assert unbounded.speedup_interval is not None
    assert math.isinf(unbounded.speedup_interval.high)  # a stored None upper end
    assert pairs_of(unbounded) == []


def test_an_indistinguishable_best_does_not_represent_its_plan_as_better() -> None:
    # Plan 0: its best estimate (1.2x) cannot be told from the parent: the worst represents it.
    noisy = attempt(0, 0, 10 / 1.2, ci=(0.95, 1.5))
    slow = attempt(0, 1, 10 / 0.8, ci=(0.75, 0.85))
    # Plan 1: the higher estimate is noisy, the lower one sure: the sure gain represents it.
    lucky = attempt(1, 0, 10 / 1.5, ci=(0.9, 2.1))
    steady = attempt(1, 1, 10 / 1.3, ci=(1.2, 1.4))
    chosen = {
        a.plan_index: a.solution_id for a in plan_representatives([noisy, slow, lucky, steady])
    }
    assert chosen == {0: "s-0-1", 1: "s-1-1"}
    assert pairs_of(noisy, slow, lucky, steady) == [("s-1-1", True), ("s-0-1", False)]


def test_positives_are_ordered_by_how_sure_they_are() -> None:
    bigger = attempt(0, 0, 10 / 2.0, ci=(1.1, 3.0))
    surer = attempt(1, 0, 10 / 1.6, ci=(1.5, 1.7))
    assert pairs_of(bigger, surer, topk=2) == [("s-1-0", True)]


# --------------------------------------------------------------------------- the parent


def evaluation(
    latency: float,
    ci: tuple[float, float] | None,
    *,
    parent: tuple[float, float, float] | None = None,
) -> Evaluation:
    stats = LatencyStats(
        mean_ms=latency,
        median_ms=latency,
        min_ms=latency * 0.9,
        max_ms=latency * 1.1,
        relative_spread=0.02,
        runs=10,
        ci_low_ms=ci[0] if ci else None,
        ci_high_ms=ci[1] if ci else None,
    )
    comparisons = []
    if parent is not None:
        speedup, low, high = parent
        comparisons.append(
            Comparison(
                baseline=PARENT_LABEL,
                baseline_latency_ms=latency * speedup,
                speedup=speedup,
                ci_low=low,
                ci_high=high,
                verdict="faster" if low > 1 else "slower" if high < 1 else "indistinguishable",
            )
        )
    return Evaluation(
        status=EvaluationStatus.PASSED,
        environment=Environment(hardware="cpu/test"),
        timestamp="2025-01-01T00:00:00Z",
        correctness=Correctness(),
        performance=Performance(
            latency_ms=latency, reference_latency_ms=20.0, speedup_factor=20.0 / latency
        ),
        latency_stats=stats,
        comparisons=comparisons,
    )


def test_the_speedup_over_the_parent_comes_from_the_same_rounds_when_it_can() -> None:
    parent = BeamEntry(
        solution_id="p",
        latency_ms=10.0,
        source_hash="hp",
        branch="initial",
        latency_ci_low_ms=9.5,
        latency_ci_high_ms=10.5,
    )
    fresh = evaluation(5.0, (4.9, 5.1), parent=(1.9, 1.85, math.inf))
    (beside,) = fresh.comparisons
    fields = parent_speedup_fields(fresh, parent, beside)
    assert fields == {
        "parent_speedup": 1.9,
        "speedup_ci_low": 1.85,
        "speedup_ci_high": None,  # unbounded: JSON has no infinity
        "speedup_measured": "same_rounds",
    }
    # Not timed beside this parent (a stored profile): the two intervals, combined.
    apart = parent_speedup_fields(fresh, parent, None)
    assert apart["speedup_measured"] == "apart" and "parent_speedup" not in apart
    low, high = apart["speedup_ci_low"], apart["speedup_ci_high"]
    assert isinstance(low, float) and isinstance(high, float)
    assert low < 2.0 < high and high - low > 0.1  # wider than the paired 1.85..
    # Without an interval on either side: no interval, the point rule.
    assert parent_speedup_fields(evaluation(5.0, None), parent, None) == {}
    bare = parent.model_copy(update={"latency_ci_low_ms": None, "latency_ci_high_ms": None})
    assert parent_speedup_fields(evaluation(5.0, (4.9, 5.1)), bare, None) == {}
    record = attempt(0, 0, 5.0).model_copy(update=fields)
    assert record.speedup == 1.9  # the same-rounds estimate, not 10 / 5
    assert record.beats_parent


def test_old_checkpoints_load_without_intervals_or_ties() -> None:
    slot = AttemptRecord.model_validate(OLD_SLOT)
    assert slot.speedup_ci_low is None and slot.speedup_measured is None
    assert slot.speedup_interval is not None and slot.speedup_interval.low == 5.0
    checkpoint = Checkpoint.model_validate(
        {"initial": OLD_INITIAL, "beam": [OLD_INITIAL], "slots": {"1/0/0/0": OLD_SLOT}}
    )
    assert checkpoint.ties == []
    assert checkpoint.best_so_far().solution_id == "s"  # iteration 1 is under way
    figures = best_figures(checkpoint, "s")
    assert figures is not None and figures.over_initial is not None
    assert figures.over_initial.measured == "point" and figures.over_initial.estimate == 5.0


# --------------------------------------------------------------------------- ties


def entry(sid: str, latency: float, ref: tuple[float, float, float] | None) -> BeamEntry:
    return BeamEntry(
        solution_id=sid,
        latency_ms=latency,
        source_hash=f"h-{sid}",
        branch=f"b-{sid}",
        reference_speedup=ref[0] if ref else None,
        reference_speedup_ci_low=ref[1] if ref else None,
        reference_speedup_ci_high=ref[2] if ref else None,
    )


def as_attempt(e: BeamEntry, plan: int) -> AttemptRecord:
    """An attempt of this iteration with the entry's figures (its own branch)."""
    return AttemptRecord(
        iteration=1,
        beam_index=0,
        plan_index=plan,
        attempt_index=0,
        parent_id="old",
        parent_latency_ms=1.0,
        status="PASSED",
        solution_id=e.solution_id,
        source_hash=e.source_hash,
        latency_ms=e.latency_ms,
        reference_speedup=e.reference_speedup,
        reference_speedup_ci_low=e.reference_speedup_ci_low,
        reference_speedup_ci_high=e.reference_speedup_ci_high,
    )


def faster(winner: str, loser: str) -> HeadToHead:
    return HeadToHead(verdict="faster", faster=winner, slower=loser, speedup=1.05)


def overlapping_trio() -> tuple[list[BeamEntry], AttemptRecord, AttemptRecord]:
    """A beam of one ("old") and two attempts ("a", "b") whose speedup intervals all overlap;
    medians a < old < b."""
    old = [entry("old", 1.00, (2.00, 1.90, 2.10))]
    a = as_attempt(entry("a", 0.99, (2.02, 1.92, 2.12)), 0)
    b = as_attempt(entry("b", 1.01, (1.98, 1.88, 2.08)), 1)
    return old, a, b


def test_overlapping_intervals_are_ties_and_the_old_rule_keeps_the_beam_kernel() -> None:
    old = [entry("old", 1.00, (2.00, 1.90, 2.10))]
    new = as_attempt(entry("new", 0.98, (2.04, 1.95, 2.12)), 0)  # lower median, overlapping
    choice = next_beam(old, [new], 1, iteration=3)
    (tie,) = choice.ties
    assert (tie.place, tie.slot, tie.placed, tie.challenger) == ("first", 1, "new", "old")
    assert tie.basis == "reference_speedup" and tie.head_to_head is None
    assert tie.kept == "old" and tie.reason == "already in the beam"
    assert [e.solution_id for e in choice.beam] == ["old"]
    # A clear head-to-head decides; an indistinguishable one leaves the old rule.
    won = next_beam(old, [new], 1, {tie.pair: faster("new", "old")}, iteration=3)
    assert [e.solution_id for e in won.beam] == ["new"]
    assert won.ties[0].reason == "faster head-to-head"
    even = HeadToHead(verdict="indistinguishable", faster="new", slower="old", speedup=1.01)
    kept = next_beam(old, [new], 1, {tie.pair: even}, iteration=3)
    assert [e.solution_id for e in kept.beam] == ["old"]
    assert kept.ties[0].describe() == (
        "iteration 3: first place (the run's best) was a tie between new and old (speedup "
        "intervals overlap); head-to-head: indistinguishable, kept old (already in the beam)"
    )


def test_clear_intervals_make_no_tie_and_missing_ones_fall_back() -> None:
    old = [entry("old", 1.00, (2.00, 1.95, 2.05))]
    clear = as_attempt(entry("new", 0.90, (2.22, 2.15, 2.30)), 0)
    assert next_beam(old, [clear], 2).ties == []
    # No reference speedups: the latency intervals decide whether it is a tie.
    a = entry("a", 1.0, None).model_copy(
        update={"latency_ci_low_ms": 0.95, "latency_ci_high_ms": 1.05}
    )
    b = entry("b", 1.02, None).model_copy(
        update={"latency_ci_low_ms": 1.0, "latency_ci_high_ms": 1.04}
    )
    assert tie_basis(a, b) == "latency"
    assert tie_basis(a, entry("c", 1.02, None)) is None  # no interval at all: no tie
    # Neither in the old beam: the lower median keeps its place.
    x = as_attempt(entry("x", 0.98, (2.04, 1.95, 2.12)), 0)
    y = as_attempt(entry("y", 0.99, (2.02, 1.96, 2.10)), 1)
    (tie,) = next_beam([entry("slow", 5.0, (0.4, 0.39, 0.41))], [x, y], 1).ties
    assert tie.kept == "x" and tie.reason == "lower median"


def test_the_last_slot_is_decided_on_the_order_first_place_left() -> None:
    # Medians: a < old < b, all overlapping. Width 2: first place (a vs old), then slot 2.
    old, a, b = overlapping_trio()
    choice = next_beam(old, [a, b], 2)
    first, last = choice.ties
    assert (first.placed, first.challenger, first.kept) == ("a", "old", "old")
    # old took first place, so slot 2 is between a and b (neither in the old beam).
    assert (last.place, last.slot, last.placed, last.challenger) == ("last", 2, "a", "b")
    assert [e.solution_id for e in choice.beam] == ["old", "a"]
    beaten = next_beam(old, [a, b], 2, {last.pair: faster("b", "a")})
    assert [e.solution_id for e in beaten.beam] == ["old", "b"]
    assert beaten.ties[1].describe() == (
        "iteration 0: beam slot 2 was a tie between a and b (speedup intervals overlap); "
        "head-to-head: b faster, kept b"
    )


def test_settle_beam_re_measures_each_tie_once_and_within_the_limit() -> None:
    old, a, b = overlapping_trio()
    asked: list[tuple[str, str]] = []

    async def measure(tie: TieDecision) -> HeadToHead:
        asked.append((tie.placed, tie.challenger))
        return faster(tie.challenger, tie.placed)  # the challenger always wins

    choice = asyncio.run(settle_beam(old, [a, b], 2, measure, iteration=1))
    assert MAX_TIE_BREAKS == 2 and len(asked) == 2
    # First place: old beats a; slot 2 is then a vs b, and b wins it.
    assert asked == [("a", "old"), ("a", "b")]
    assert [e.solution_id for e in choice.beam] == ["old", "b"]
    assert all(t.head_to_head is not None for t in choice.ties)
    asked.clear()
    limited = asyncio.run(settle_beam(old, [a, b], 2, measure, iteration=1, max_tie_breaks=1))
    assert len(asked) == 1 and limited.ties[1].head_to_head is None
    assert "not re-measured" in limited.ties[1].describe()
    asked.clear()
    assert asyncio.run(settle_beam(old, [], 2, measure, iteration=1)).ties == []
    assert asked == []


def test_head_to_head_reads_the_pair_either_way_round() -> None:
    def comparison(*pairs: PairVerdict) -> KernelComparison:
        return KernelComparison(pairs=list(pairs))

    def pair(kernel: str, baseline: str, s: float, low: float, high: float) -> PairVerdict:
        verdict: Verdict = "faster" if low > 1 else "slower" if high < 1 else "indistinguishable"
        return PairVerdict(
            kernel=kernel,
            baseline=baseline,
            baseline_latency_ms=1.0,
            speedup=s,
            ci_low=low,
            ci_high=high,
            verdict=verdict,
        )

    clear = head_to_head_of(comparison(pair("b", "a", 1.1, 1.05, 1.15)), "a", "b")
    assert clear.winner == "b" and clear.verdict == "faster"
    turned = head_to_head_of(comparison(pair("a", "b", 0.5, 0.4, 0.625)), "a", "b")
    assert turned.winner == "b" and turned.speedup == 2.0
    assert turned.ci_low == pytest.approx(1.6) and turned.ci_high == pytest.approx(2.5)
    even = head_to_head_of(comparison(pair("a", "b", 1.01, 0.97, 1.05)), "a", "b")
    assert even.verdict == "indistinguishable" and even.winner is None
    failed = Evaluation(
        status=EvaluationStatus.TIMEOUT, environment=Environment(hardware="x"), timestamp="t"
    )
    lost = KernelComparison(kernels=[ComparedKernel(label="b", evaluation=failed)], pairs=[])
    none = head_to_head_of(lost, "a", "b")
    assert none.verdict is None and none.note and "TIMEOUT" in none.note
    # One passed, the other failed the re-measure: failing on purpose must not keep a slot.
    ok = Evaluation(
        status=EvaluationStatus.PASSED,
        environment=Environment(hardware="x"),
        timestamp="t",
        correctness=Correctness(),
        performance=Performance(latency_ms=1.0),
    )
    forfeit = KernelComparison(
        kernels=[
            ComparedKernel(label="a", evaluation=ok),
            ComparedKernel(label="b", evaluation=failed),
        ]
    )
    won = head_to_head_of(forfeit, "a", "b")
    assert won.verdict == "faster" and won.winner == "a" and won.slower == "b"


# --------------------------------------------------------------------------- the engine


def _twin(source: str) -> str:
    """The same kernel, another source hash: as fast as the original, by construction."""
    return source + "\n# the same kernel, written down again\n"


class WideningPool(DevicePool):
    """A real pool (real cpu backend) on a host noisier than this one: every speedup interval
    over the reference comes back ten times wider either way, so that two kernels of like
    speed overlap even when a busy host times the same code 1.5x apart; and it counts
    head-to-head compares."""

    compares: list[list[str]]

    def __init__(self, devices: Any) -> None:
        super().__init__(devices)
        self.compares = []

    async def evaluate(
        self,
        backend_factory: BackendFactory,
        task: Task,
        solution: Solution,
        config: BenchmarkConfig | None = None,
        baselines: Any = (),
    ) -> PooledEvaluation:
        result = await super().evaluate(backend_factory, task, solution, config, baselines)
        perf = result.evaluation.performance
        if perf is None:
            return result
        wide = perf.model_copy(
            update={
                "speedup_ci_low": perf.speedup_factor / 10,
                "speedup_ci_high": perf.speedup_factor * 10,
            }
        )
        widened = result.evaluation.model_copy(update={"performance": wide})
        return result.model_copy(update={"evaluation": widened})

    async def compare(
        self,
        backend_factory: BackendFactory,
        task: Task,
        kernels: Any,
        config: BenchmarkConfig | None = None,
    ) -> KernelComparison:
        self.compares.append([k.label for k in kernels])
        return await super().compare(backend_factory, task, kernels, config)


def _show(db_path: Path, run_id: str) -> str:
    shown = runner.invoke(app, ["runs", "show", run_id, "--store", str(db_path)])
    assert shown.exit_code == 0, shown.output
    return " ".join(shown.output.split())  # rich wraps long lines


def test_an_attempt_is_timed_with_its_parent(
    silu_task: Task,
    silu_baseline: Solution,
    scripted_settings: ScriptedSettings,
    tmp_path: Path,
) -> None:
    _, config = scripted_settings(
        build_script(
            faults=False,
            executor=[text(kernels.reply(kernels.FAST)), text(kernels.reply(kernels.SLOWER))],
        ),
        iterations=1,
        beam=1,
        plans=1,
        attempts=2,
        topk=0,
        benchmark=NOISE_BENCH,
    )
    db_path = tmp_path / "kernels.db"
    with SqliteStore(db_path) as store:
        run_id = prepare_run(store, silu_task, silu_baseline, config)
        run = asyncio.run(BeamSearch(store, run_id).run())
        assert run.status == "completed", run.error
        _, _, checkpoint = load_run(store, run_id)
        slots = {s.latency_ms or 0.0: s for s in checkpoint.slots.values() if s.passed}
        assert len(slots) == 2
        fast, slow = slots[min(slots)], slots[max(slots)]
        for slot in (fast, slow):
            assert slot.speedup_measured == "same_rounds", slot
            assert slot.parent_speedup is not None and slot.speedup == slot.parent_speedup
            assert slot.speedup_ci_low is not None
            assert slot.reference_speedup is not None and slot.latency_ci_low_ms is not None
            assert slot.solution_id is not None
            (profile,) = store.list_profiles(solution_id=slot.solution_id)
            (parent,) = profile.evaluation.comparisons
            assert parent.baseline == PARENT_LABEL
            assert parent.speedup == pytest.approx(slot.speedup)
        # The vectorized kernel is ~10x faster than the row-by-row parent, the other ~3x slower.
        assert fast.beats_parent
        assert slow.speedup is not None and slow.speedup < 1.0 and not slow.beats_parent
        assert checkpoint.initial is not None
        assert checkpoint.initial.latency_ci_low_ms is not None
        assert checkpoint.initial.reference_interval is not None
        assert run.best_solution_id == fast.solution_id
    text_out = _show(db_path, run_id)
    assert f"best {fast.solution_id}" in text_out
    assert "over the reference (same rounds)" in text_out
    assert "over the initial kernel (timed apart)" in text_out


def test_a_tie_is_re_measured_head_to_head_and_reported(
    silu_task: Task,
    silu_baseline: Solution,
    scripted_settings: ScriptedSettings,
    tmp_path: Path,
) -> None:
    # The executor writes the initial kernel down again: as fast, so a tie for first place.
    _, config = scripted_settings(
        build_script(
            faults=False,
            executor=[text(kernels.reply(_twin(silu_baseline.entry_source.content)))],
        ),
        iterations=1,
        beam=1,
        plans=1,
        attempts=1,
        topk=0,
        workers=1,
        benchmark=NOISE_BENCH,
    )
    db_path = tmp_path / "kernels.db"
    pool = WideningPool(DevicePool.for_cpu(1).devices)
    try:
        with SqliteStore(db_path) as store:
            run_id = prepare_run(store, silu_task, silu_baseline, config)
            run = asyncio.run(BeamSearch(store, run_id, pool=pool).run())
            assert run.status == "completed", run.error
            _, _, checkpoint = load_run(store, run_id)
    finally:
        pool.close()
    assert checkpoint.initial is not None
    initial = checkpoint.initial.solution_id
    passed = [s.solution_id for s in checkpoint.slots.values() if s.passed]
    # Once, in a CI run on a slow host, no attempt had passed; say how each ended if it recurs.
    ended = {key: (slot.status, slot.flags, slot.error) for key, slot in checkpoint.slots.items()}
    assert len(passed) == 1, ended
    (twin,) = passed
    assert twin is not None and twin != initial
    (tie,) = checkpoint.ties
    assert pool.compares and set(pool.compares[0]) == {initial, twin}
    assert len(pool.compares) == 1
    assert tie.iteration == 1 and tie.place == "first" and tie.pair == {initial, twin}
    outcome = tie.head_to_head
    assert outcome is not None and outcome.verdict is not None, outcome
    if outcome.verdict == "faster":
        assert tie.kept == outcome.faster and tie.reason == "faster head-to-head"
    else:  # the usual outcome: the same kernel twice cannot be told apart
        assert tie.kept == initial and tie.reason == "already in the beam"
    assert run.best_solution_id == tie.kept == checkpoint.beam[0].solution_id
    line = tie.describe()
    assert line.startswith("iteration 1: first place (the run's best) was a tie between")
    assert f"kept {tie.kept[:8]}" in line
    assert " ".join(line.split()) in _show(db_path, run_id)


class RecordingPool(DevicePool):
    """A real pool that notes the baselines of every evaluation it is given."""

    def __init__(self, devices: Any) -> None:
        super().__init__(devices)
        self.baselines: list[tuple[str, ...]] = []

    def submit(
        self,
        backend_factory: BackendFactory,
        task: Task,
        solution: Solution,
        config: BenchmarkConfig | None = None,
        baselines: Sequence[Baseline] = (),
    ) -> Future[PooledEvaluation]:
        self.baselines.append(tuple(b.label for b in baselines))
        return super().submit(backend_factory, task, solution, config, baselines)


def test_the_parent_is_timed_alongside_only_where_the_backend_interleaves(
    tmp_path: Path, silu_task: Task, silu_baseline: Solution
) -> None:
    pool = RecordingPool(DevicePool.for_cpu(1).devices)
    with SqliteStore(tmp_path / "k.db") as store, pool:
        for interleaves, expected in ((None, (PARENT_LABEL,)), (False, ())):
            cache = ProfileCache(
                store, silu_task, NOISE_BENCH, pool, CpuBackend, None, interleaves=interleaves
            )
            assert cache.interleaves is (interleaves is None)  # None: CpuBackend.interleaves
            evaluated = asyncio.run(cache.evaluate(silu_baseline, parent=silu_baseline))
            assert evaluated.passed, evaluated.log
            assert pool.baselines[-1] == expected
            assert tuple(c.baseline for c in evaluated.comparisons) == expected

        # A profile reused for the same parent keeps its comparison; for another, it has none.
        store.upsert_definition(silu_task.definition)
        store.upsert_workload(silu_task.definition.name, silu_task.workload)
        cache = ProfileCache(store, silu_task, NOISE_BENCH, pool, CpuBackend, "cpu/test")
        twin = derived_solution(silu_baseline, _twin(silu_baseline.entry_source.content), "twin")

        async def profile_thrice() -> list[ProfiledSolution]:
            parent_id = await cache.store_solution(silu_baseline, None, {})
            return [
                await cache.store_and_profile(twin, parent_id, {}, parent=silu_baseline),
                await cache.store_and_profile(twin, parent_id, {}, parent=silu_baseline),
                await cache.store_and_profile(twin, "another-parent", {}, parent=silu_baseline),
            ]

        first, again, other = asyncio.run(profile_thrice())
        assert not first.reused and again.reused and other.reused
        assert first.parent_comparison is not None
        assert again.parent_comparison == first.parent_comparison
        assert other.parent_comparison is None


def test_the_beam_ranks_by_speedup_over_the_reference_when_all_have_one() -> None:
    """B was measured while the host was slower (higher median) but is clearly faster against
    the reference timed in its own rounds: B goes first, no tie."""
    a = entry("a", 1.00, (2.00, 1.98, 2.02))
    b = entry("b", 1.05, (2.20, 2.18, 2.22))
    choice = next_beam([a], [as_attempt(b, 0)], 2)
    assert [e.solution_id for e in choice.beam] == ["b", "a"]
    assert choice.ties == []
    # Without reference figures for everyone, the median decides.
    c = entry("c", 0.90, None)
    assert next_beam([a], [as_attempt(c, 0)], 1).beam[0].solution_id == "c"
