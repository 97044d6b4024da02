"""Speedups between kernels of a lineage as the views show them (the MCP tools list_solutions
and solution_lineage, `accelopt db best` and `accelopt db lineage`), and how often a kernel was
timed beside its children.

A ratio of two kernels' stored latencies compares medians taken at different times on a host
whose speed moves: a child that reads 1.62x over its parent from their stored profiles was
0.916x [0.783, 0.993] when the two were timed side by side. So a view says which it shows:

- **Same rounds** first. Where the child's stored measurements timed the other kernel in the
  same interleaved rounds (Evaluation.comparisons), that figure is shown with its interval and
  verdict (SpeedupFigure, measured 'same_rounds'). Only the measurements of the profile the
  child is ranked by count (one workload, settings and hardware: a figure taken on two cores
  says nothing of one), and only those that passed with a trusted result; several are pooled
  as a profile pools its latency (stats.pool: they widen the interval when they disagree).
- Which kernel a comparison was against is its `baseline_id`. A comparison stored before ids
  were kept (baseline_id None) and labelled 'parent' is read as against the child's stored
  parent: the parent it was first stored with, which it is unless that same source was later
  profiled afresh beside another kernel it was derived from (another run reaching the same
  source under other settings). A comparison labelled with a kernel's id is against that id.
- Otherwise **timed apart**: the ratio of the two kernels' ranked (pooled) latencies, when on
  the same hardware (measured 'apart'), with an interval when both latencies have one (their
  errors combined as independent, stats.ratio_of_independent: wider) and no verdict without.

A kernel timed as the parent baseline of a child was measured in those rounds too: its median
there is in the child's comparison (baseline_latency_ms). `timed_beside_children` counts those
timings so that a view can show them next to the kernel's own measurements. They are counted,
not pooled into its latency: a comparison keeps the baseline's median but not its interval,
and a measurement without an interval does not move a pooled figure that has intervals
(models/pooling.py); they also stay out of the profile's history, which is its own
measurements as they were taken.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from accelopt_mcp import stats
from accelopt_mcp.engine.runs import SpeedupFigure
from accelopt_mcp.engine.selection import PARENT_LABEL, interval_of
from accelopt_mcp.models import Comparison, Evaluation
from accelopt_mcp.stats import Interval, ratio_of_independent
from accelopt_mcp.store.base import KernelStore, StoredProfile, StoredSolution


def is_against(comparison: Comparison, kernel_id: str, child: StoredSolution) -> bool:
    """Whether `comparison`, from a measurement of `child`, timed the kernel `kernel_id` (see
    the module docstring for comparisons stored before baseline ids were kept)."""
    if comparison.baseline_id is not None:
        return comparison.baseline_id == kernel_id
    if comparison.baseline == kernel_id:
        return True
    return comparison.baseline == PARENT_LABEL and child.parent_id == kernel_id


def _counted(evaluation: Evaluation) -> bool:
    return evaluation.passed and evaluation.trusted


def _measured(store: KernelStore, profile: StoredProfile) -> list[Evaluation]:
    """The profile's measurements as they were taken (its own evaluation when the store holds
    none: a row from before measurements were kept)."""
    history = [m.evaluation for m in store.list_measurements(profile.id)]
    return history or [profile.evaluation]


def same_round_comparisons(
    store: KernelStore, child: StoredSolution, profile: StoredProfile, other_id: str
) -> list[Comparison]:
    """The comparisons against `other_id` in the measurements of the child's `profile` that
    passed with a trusted result, oldest first, one per measurement."""
    found = []
    for evaluation in _measured(store, profile):
        if not _counted(evaluation):
            continue
        against = next((c for c in evaluation.comparisons if is_against(c, other_id, child)), None)
        if against is not None:
            found.append(against)
    return found


def same_round_figure(
    comparisons: Sequence[Comparison], confidence: float = stats.CONFIDENCE
) -> SpeedupFigure | None:
    """One figure of the comparisons (pooled when there are several); None without any."""
    if not comparisons:
        return None
    intervals = [Interval(c.speedup, c.ci_low, c.ci_high) for c in comparisons]
    pooled = intervals[0] if len(intervals) == 1 else stats.pool(intervals, confidence)
    return SpeedupFigure.of(pooled, "same_rounds")


def _latency(profile: StoredProfile) -> Interval | None:
    latency = profile.evaluation.latency_stats
    return interval_of(
        profile.latency_ms,
        latency.ci_low_ms if latency else None,
        latency.ci_high_ms if latency else None,
    )


def _confidence(profile: StoredProfile | None) -> float:
    latency = profile.evaluation.latency_stats if profile is not None else None
    return latency.confidence if latency is not None else stats.CONFIDENCE


def apart_figure(slow: StoredProfile | None, fast: StoredProfile | None) -> SpeedupFigure | None:
    """slow latency / fast latency from two stored profiles ('apart'); None unless both have a
    latency on the same hardware."""
    if slow is None or fast is None or slow.latency_ms is None or fast.latency_ms is None:
        return None
    if slow.eval_hardware != fast.eval_hardware or fast.latency_ms <= 0:
        return None
    theirs, ours = _latency(slow), _latency(fast)
    if theirs is not None and ours is not None:
        return SpeedupFigure.of(ratio_of_independent(theirs, ours, _confidence(fast)), "apart")
    return SpeedupFigure(estimate=slow.latency_ms / fast.latency_ms, measured="apart")


def speedup_between(
    store: KernelStore,
    kernel: StoredSolution,
    kernel_profile: StoredProfile | None,
    other_id: str,
    other_profile: StoredProfile | None,
) -> SpeedupFigure | None:
    """How many times faster `kernel` is than the kernel `other_id`: timed in the same rounds
    when a measurement of the profile `kernel` is ranked by (`kernel_profile`) did, else from
    the two ranked profiles, timed apart (module docstring); None when neither is known (no
    ranked profile of `kernel`, or the other's missing or on other hardware)."""
    if kernel_profile is None:
        return None
    beside = same_round_comparisons(store, kernel, kernel_profile, other_id)
    if beside:
        return same_round_figure(beside, _confidence(kernel_profile))
    return apart_figure(other_profile, kernel_profile)


def children_of(store: KernelStore, solution_id: str) -> list[StoredSolution]:
    """The kernels whose stored parent is this one."""
    return [s for s in store.descendants(solution_id) if s.parent_id == solution_id]


def timed_beside_children(
    store: KernelStore,
    solution_id: str,
    profile: StoredProfile,
    children: Iterable[StoredSolution] | None = None,
) -> int:
    """How many measurements of the kernel's children timed it in the same rounds under the
    conditions of its `profile` (the same workload, settings and hardware), counting those
    that passed with a trusted result. children: its children, when the caller has them
    (default: looked up)."""
    if children is None:
        children = children_of(store, solution_id)
    count = 0
    for child in children:
        for theirs in store.list_profiles(
            solution_id=child.id,
            workload_uuid=profile.workload_uuid,
            hardware=profile.eval_hardware,
        ):
            if theirs.benchmark_config_hash != profile.benchmark_config_hash:
                continue
            count += sum(
                1
                for evaluation in _measured(store, theirs)
                if _counted(evaluation)
                and any(is_against(c, solution_id, child) for c in evaluation.comparisons)
            )
    return count
