"""Two suites side by side (e.g. two models, two presets): per task, each suite's best percent
of peak and speedup over its baseline, and the difference of their geometric means taken over
the tasks both have figures for (a mean over different tasks compares nothing)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from accelopt_mcp.store.base import SuiteRecord
from accelopt_mcp.suites.runner import spec_of
from accelopt_mcp.suites.table import (
    SuiteCase,
    geomean,
    percent_cell,
    speedup_cell,
    untrusted_reason,
)


class ComparedTask(BaseModel):
    task: str
    a_percent: str
    b_percent: str
    a_speedup: str
    b_speedup: str
    a_percent_of_peak: float | None = None
    b_percent_of_peak: float | None = None


class SuiteComparison(BaseModel):
    a: str
    b: str
    rows: list[ComparedTask] = Field(default_factory=list)
    common_tasks: int = 0
    """Tasks with a trusted best figure in both suites: what the means below are over."""
    a_geomean_percent: float | None = None
    b_geomean_percent: float | None = None
    a_geomean_speedup: float | None = None
    b_geomean_speedup: float | None = None
    summary: str = ""


def _best_percent(case: SuiteCase | None) -> float | None:
    if case is None or untrusted_reason(case) is not None or case.best is None:
        return None
    return case.best.percent_of_peak


def compare_suites(a: SuiteRecord, b: SuiteRecord) -> SuiteComparison:
    a_cases = {c.key: c for c in spec_of(a).cases}
    b_cases = {c.key: c for c in spec_of(b).cases}
    rows = []
    common: list[tuple[float, float]] = []
    speedups: list[tuple[float, float]] = []
    for key in [*a_cases, *(k for k in b_cases if k not in a_cases)]:
        ca, cb = a_cases.get(key), b_cases.get(key)
        pa, pb = _best_percent(ca), _best_percent(cb)
        rows.append(
            ComparedTask(
                task=key,
                a_percent=percent_cell(ca.best) if ca else "(not in A)",
                b_percent=percent_cell(cb.best) if cb else "(not in B)",
                a_speedup=speedup_cell(ca.speedup) if ca else "-",
                b_speedup=speedup_cell(cb.speedup) if cb else "-",
                a_percent_of_peak=pa,
                b_percent_of_peak=pb,
            )
        )
        if pa is not None and pb is not None:
            common.append((pa, pb))
            if ca and cb and ca.speedup and cb.speedup:
                speedups.append((ca.speedup.speedup, cb.speedup.speedup))
    found = SuiteComparison(
        a=a.id,
        b=b.id,
        rows=rows,
        common_tasks=len(common),
        a_geomean_percent=geomean(p[0] for p in common),
        b_geomean_percent=geomean(p[1] for p in common),
        a_geomean_speedup=geomean(s[0] for s in speedups),
        b_geomean_speedup=geomean(s[1] for s in speedups),
    )
    if found.a_geomean_percent is None or found.b_geomean_percent is None:
        found.summary = "no task has a trusted best figure in both suites: nothing to compare"
    else:
        diff = found.b_geomean_percent - found.a_geomean_percent
        found.summary = (
            f"geomean best % of peak over {len(common)} common task(s): A "
            f"{found.a_geomean_percent:.1f}%, B {found.b_geomean_percent:.1f}% "
            f"(B - A: {diff:+.1f} points)"
        )
    return found
