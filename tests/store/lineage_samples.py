"""Stored kernels with a lineage and measurements taken beside their parent, built through the
store's own API (no evaluation runs): for the tests of what the views show between kernels."""

from __future__ import annotations

from dataclasses import dataclass

from accelopt_mcp.models import Comparison, Correctness, Environment, Evaluation, EvaluationStatus
from accelopt_mcp.stats import Interval, verdict
from accelopt_mcp.store.base import KernelStore
from tests.store.samples import make_definition, make_solution, make_workload, passed_evaluation

DEF = "exp_f32"
WORKLOAD = "00000000-0000-4000-8000-00000000000a"
HARDWARE = "cpu/x86_64"
CONFIG = {"iterations": 10}
"""The settings every profile here is filed under (unless a test says otherwise)."""


def beside(
    speedup: float,
    low: float,
    high: float,
    *,
    baseline: str = "parent",
    baseline_id: str | None = None,
    baseline_latency_ms: float = 1.0,
) -> Comparison:
    """A baseline timed in the same rounds: `speedup` [low, high] over it."""
    return Comparison(
        baseline=baseline,
        baseline_id=baseline_id,
        baseline_latency_ms=baseline_latency_ms,
        speedup=speedup,
        ci_low=low,
        ci_high=high,
        verdict=verdict(Interval(speedup, low, high)),
    )


def timed(
    latency: float,
    *,
    half_width: float = 0.05,
    day: int = 1,
    comparisons: tuple[Comparison, ...] = (),
    flags: tuple[str, ...] = (),
    status: EvaluationStatus = EvaluationStatus.PASSED,
    hardware: str = HARDWARE,
) -> Evaluation:
    """A measurement taken on `day` (distinct days: distinct measurements) with a median
    interval of ±half_width, beside `comparisons`."""
    if status != EvaluationStatus.PASSED:
        return Evaluation(
            status=status,
            environment=Environment(hardware=hardware),
            timestamp=f"2026-01-{day:02d}T00:00:00Z",
            log="boom",
        )
    interval = (latency * (1 - half_width), latency * (1 + half_width))
    return passed_evaluation(
        latency,
        ci=interval,
        samples=interval,
        hardware=hardware,
        timestamp=f"2026-01-{day:02d}T00:00:00Z",
        correctness=Correctness(max_relative_error=1e-7),
        comparisons=list(comparisons),
        flags=list(flags),
    )


@dataclass(frozen=True)
class Family:
    """A parent with two children, and a grandchild of the first."""

    parent: str
    child: str
    sibling: str
    grandchild: str


def store_family(store: KernelStore) -> Family:
    """The kernels and the parent's own profile (1.0 ms); the children have none yet."""
    store.upsert_definition(make_definition(DEF))
    store.upsert_workload(DEF, make_workload(DEF, uuid_=WORKLOAD))
    parent = store.upsert_solution(make_solution(DEF, "# parent\n", name="parent"))
    child = store.upsert_solution(make_solution(DEF, "# child\n", name="child"), parent_id=parent)
    sibling = store.upsert_solution(
        make_solution(DEF, "# sibling\n", name="sibling"), parent_id=parent
    )
    grandchild = store.upsert_solution(
        make_solution(DEF, "# grandchild\n", name="grandchild"), parent_id=child
    )
    store.upsert_profile(WORKLOAD, parent, timed(1.0), CONFIG)
    return Family(parent, child, sibling, grandchild)
