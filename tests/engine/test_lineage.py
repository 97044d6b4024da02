"""The speedup between two kernels as views show it: the same-round figure (interval, verdict)
where a measurement of the child timed the other kernel beside it, else the ratio of two
medians labelled as timed apart; and how often a kernel was timed beside its children. Rows are
built through the store's API, on SQLite and on PostgreSQL."""

from __future__ import annotations

import pytest

from accelopt_mcp import stats
from accelopt_mcp.engine.lineage import (
    apart_figure,
    children_of,
    speedup_between,
    timed_beside_children,
)
from accelopt_mcp.engine.runs import SpeedupFigure
from accelopt_mcp.models import EvaluationStatus
from accelopt_mcp.stats import Interval, ratio_of_independent
from accelopt_mcp.store.base import KernelStore, StoredProfile, StoredSolution
from tests.engine.conftest import BOTH_STORES
from tests.store.lineage_samples import CONFIG, WORKLOAD, Family, beside, store_family, timed


def _profile(
    store: KernelStore, solution_id: str, config: dict[str, int] = CONFIG
) -> StoredProfile:
    (found,) = [
        p for p in store.list_profiles(solution_id=solution_id) if p.benchmark_config == config
    ]
    return found


def _solution(store: KernelStore, solution_id: str) -> StoredSolution:
    found = store.get_solution(solution_id)
    assert found is not None
    return found


def _sibling_over_parent(store: KernelStore, family: Family) -> SpeedupFigure:
    """The sibling's figure over the parent, each with its profile under CONFIG."""
    figure = speedup_between(
        store,
        _solution(store, family.sibling),
        _profile(store, family.sibling),
        family.parent,
        _profile(store, family.parent),
    )
    assert figure is not None
    return figure


@BOTH_STORES
def test_a_child_timed_beside_its_parent_shows_that_figure_not_the_ratio(
    store: KernelStore,
) -> None:
    family = store_family(store)
    # The g7: 1.62x from two stored medians, 0.916x [0.783, 0.993] side by side.
    slower = beside(0.916, 0.783, 0.993, baseline_id=family.parent)
    store.upsert_profile(WORKLOAD, family.child, timed(0.617, day=2, comparisons=(slower,)), CONFIG)
    parent, child = _profile(store, family.parent), _profile(store, family.child)
    kernel = _solution(store, family.child)

    figure = speedup_between(store, kernel, child, family.parent, parent)
    assert figure is not None
    assert figure.measured == "same_rounds"
    assert (figure.estimate, figure.low, figure.high) == (0.916, 0.783, 0.993)
    assert figure.verdict == "slower"
    # What a ratio of the stored medians says instead: faster, and labelled apart.
    apart = apart_figure(parent, child)
    assert apart is not None and apart.measured == "apart"
    assert apart.estimate == pytest.approx(1.0 / 0.617)
    expected = ratio_of_independent(
        Interval(1.0, 0.95, 1.05), Interval(0.617, 0.617 * 0.95, 0.617 * 1.05), 0.95
    )
    assert (apart.low, apart.high) == pytest.approx((expected.low, expected.high))
    assert apart.verdict == "faster"


@BOTH_STORES
def test_without_a_same_round_measurement_the_ratio_is_labelled_apart(
    store: KernelStore,
) -> None:
    family = store_family(store)
    store.upsert_profile(WORKLOAD, family.sibling, timed(0.8, day=2), CONFIG)
    # Timed beside another kernel that was once called its parent: not beside this parent.
    elsewhere = beside(3.0, 2.8, 3.2, baseline_id=family.sibling)
    store.upsert_profile(
        WORKLOAD, family.grandchild, timed(0.5, day=3, comparisons=(elsewhere,)), CONFIG
    )
    store.upsert_profile(WORKLOAD, family.child, timed(0.6, day=4), CONFIG)

    sibling = _solution(store, family.sibling)
    figure = _sibling_over_parent(store, family)
    assert figure.measured == "apart"
    assert figure.estimate == pytest.approx(1.0 / 0.8)
    grandchild = _solution(store, family.grandchild)
    figure = speedup_between(
        store, grandchild, _profile(store, family.grandchild), family.child,
        _profile(store, family.child),
    )  # fmt: skip
    assert figure is not None and figure.measured == "apart"
    assert figure.estimate == pytest.approx(0.6 / 0.5)
    # No ranked profile of the kernel: nothing to show; another hardware: no ratio either.
    assert speedup_between(store, sibling, None, family.parent, None) is None
    other = timed(0.4, day=5, hardware="cpu/aarch64")
    store.upsert_profile(WORKLOAD, family.sibling, other, CONFIG)
    on_arm = next(
        p
        for p in store.list_profiles(solution_id=family.sibling)
        if p.eval_hardware != "cpu/x86_64"
    )
    assert (
        speedup_between(store, sibling, on_arm, family.parent, _profile(store, family.parent))
        is None
    )


@BOTH_STORES
def test_old_parent_comparisons_several_measurements_and_what_does_not_count(
    store: KernelStore,
) -> None:
    family = store_family(store)
    child = _solution(store, family.child)
    # Stored before baseline ids were kept: 'parent' is the child's stored parent.
    legacy = beside(0.9, 0.85, 0.95)
    store.upsert_profile(WORKLOAD, family.child, timed(0.9, day=2, comparisons=(legacy,)), CONFIG)
    figure = speedup_between(store, child, _profile(store, family.child), family.parent, None)
    assert figure is not None and figure.measured == "same_rounds" and figure.estimate == 0.9
    assert figure.verdict == "slower"

    # A second measurement beside the parent: the two are pooled as a profile pools latency.
    again = beside(0.95, 0.9, 1.0, baseline_id=family.parent)
    store.upsert_profile(WORKLOAD, family.child, timed(0.92, day=3, comparisons=(again,)), CONFIG)
    pooled = stats.pool([Interval(0.9, 0.85, 0.95), Interval(0.95, 0.9, 1.0)], 0.95)
    figure = speedup_between(store, child, _profile(store, family.child), family.parent, None)
    assert figure is not None and figure.measured == "same_rounds"
    assert (figure.estimate, figure.low, figure.high) == pytest.approx(
        (pooled.estimate, pooled.low, pooled.high)
    )
    assert 0.9 < figure.estimate < 0.95

    # Measured under other settings (two cores): a figure of its own conditions, not of the
    # profile the child is ranked by.
    two_cores = {**CONFIG, "cores": 2}
    split = beside(1.99, 1.9, 2.1, baseline_id=family.parent)
    store.upsert_profile(WORKLOAD, family.child, timed(0.5, day=4, comparisons=(split,)), two_cores)
    figure = speedup_between(store, child, _profile(store, family.child), family.parent, None)
    assert figure is not None and figure.estimate == pytest.approx(pooled.estimate)
    figure = speedup_between(
        store, child, _profile(store, family.child, two_cores), family.parent, None
    )
    assert figure is not None and (figure.estimate, figure.verdict) == (1.99, "faster")

    # A result flagged untrusted counts for nothing; without an interval: no verdict either.
    cheat = beside(9.0, 8.0, 10.0, baseline_id=family.parent)
    flagged = timed(0.1, day=5, comparisons=(cheat,), flags=("above_peak",))
    store.upsert_profile(WORKLOAD, family.sibling, flagged, CONFIG)
    figure = _sibling_over_parent(store, family)
    assert figure.measured == "apart"
    assert figure.estimate == pytest.approx(10.0)
    pointless = timed(0.1, day=5).model_copy(update={"latency_stats": None})
    store.upsert_profile(WORKLOAD, family.grandchild, pointless, CONFIG)
    grandchild = _solution(store, family.grandchild)
    figure = speedup_between(
        store, grandchild, _profile(store, family.grandchild), family.child,
        _profile(store, family.child),
    )  # fmt: skip
    assert figure is not None and figure.low is None and figure.verdict is None


@BOTH_STORES
def test_a_parent_timed_beside_its_children_counts_those_timings(store: KernelStore) -> None:
    family = store_family(store)
    parent = _profile(store, family.parent)
    assert timed_beside_children(store, family.parent, parent) == 0

    for day in (2, 3):
        timing = beside(1.2, 1.1, 1.3, baseline_id=family.parent)
        store.upsert_profile(
            WORKLOAD, family.child, timed(0.8, day=day, comparisons=(timing,)), CONFIG
        )
    store.upsert_profile(
        WORKLOAD, family.sibling, timed(0.9, day=4, comparisons=(beside(1.1, 1.0, 1.2),)), CONFIG
    )
    # Not counted: a measurement under other settings, a failed one, one of the grandchild
    # beside its own parent (the child), and one of the sibling timed beside nobody.
    other = beside(1.5, 1.4, 1.6, baseline_id=family.parent)
    store.upsert_profile(
        WORKLOAD, family.child, timed(0.7, day=5, comparisons=(other,)), {**CONFIG, "cores": 2}
    )
    failed = timed(0.0, day=6, status=EvaluationStatus.RUNTIME_ERROR)
    store.upsert_profile(WORKLOAD, family.sibling, failed, CONFIG)
    store.upsert_profile(
        WORKLOAD, family.grandchild, timed(0.5, day=7, comparisons=(beside(1.6, 1.5, 1.7),)), CONFIG
    )
    store.upsert_profile(WORKLOAD, family.sibling, timed(0.9, day=8), CONFIG)

    assert timed_beside_children(store, family.parent, parent) == 3
    assert {c.id for c in children_of(store, family.parent)} == {family.child, family.sibling}
    child = _profile(store, family.child)
    assert timed_beside_children(store, family.child, child) == 1
    # Its own history is untouched: one measurement, pooled alone.
    assert len(store.list_measurements(parent.id)) == 1
    assert parent.evaluation.latency_stats is not None
    assert parent.evaluation.latency_stats.measurements == 1
