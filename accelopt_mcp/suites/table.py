"""A suite's table, as the AccelOpt paper reports it: per task, the baseline's and the best
kernel's percent of peak, the speedup of the best over the baseline with its interval, what the
run cost and how it ended; then the geometric means.

Everything here is pure: rows in, rows, figures and text out (the runner measures and stores,
cli/suite.py prints). A percent of peak above 100 is never published: such a row is flagged,
says why, and stays out of every geometric mean, as AccelOpt's own script refuses it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_PERCENT = 100.0
"""A percent of the theoretical peak above this cannot be right: the roofline overstates the
work or the measurement is wrong."""


def _finite(value: float | None) -> float | None:
    """None for an infinite or NaN bound: a suite is stored as JSON, which has neither (an
    interval with too few samples has no upper bound, read as infinity elsewhere)."""
    return value if value is not None and math.isfinite(value) else None


class KernelFigures(BaseModel):
    """One kernel of a case as measured: the baseline, or the run's best."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    solution_id: str | None = None
    latency_ms: float | None = None
    """The median latency."""
    percent_of_peak: float | None = None
    """Theoretical latency / measured latency x 100 (roofline_pct_of_peak); None without a
    roofline."""
    status: str = "PASSED"
    """The evaluation's status; anything but PASSED has no figures to believe."""
    flags: list[str] = Field(default_factory=list)

    @field_validator("latency_ms", "percent_of_peak", mode="before")
    @classmethod
    def _figures_finite(cls, value: float | None) -> float | None:
        return _finite(value)


class SpeedupFigure(BaseModel):
    """The best kernel over the baseline: baseline median / best median."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    speedup: float
    ci_low: float | None = None
    ci_high: float | None = None
    """None: no upper bound (too few samples)."""

    @field_validator("ci_low", "ci_high", mode="before")
    @classmethod
    def _bounds_finite(cls, value: float | None) -> float | None:
        return _finite(value)

    beside: bool = False
    """True when both were timed in the same interleaved rounds (the interval holds); False:
    from two separate measurements, no interval."""


class SuiteCase(BaseModel):
    """One task case of a suite: what it runs, and what came of it."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    key: str
    """problem/case, e.g. 'silu/0'."""
    task: str
    """The problem's name (NKIBench) or the definition's."""
    task_path: str
    kernel_path: str
    definition_name: str | None = None
    run_id: str | None = None
    baseline: KernelFigures | None = None
    best: KernelFigures | None = None
    speedup: SpeedupFigure | None = None
    llm_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    wall_s: float | None = None
    ended: str | None = None
    """How the case ended: the run's state (completed, budget_exhausted, failed, ...),
    'baseline only', or why it could not start; None while it runs."""
    error: str | None = None


class Excluded(BaseModel):
    key: str
    reason: str


class Geomeans(BaseModel):
    """Geometric means over the cases whose figures can be believed."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    baseline_percent_of_peak: float | None = None
    best_percent_of_peak: float | None = None
    speedup: float | None = None
    cases: int = 0
    """How many cases the percent-of-peak means are over."""
    speedup_cases: int = 0
    excluded: list[Excluded] = Field(default_factory=list)
    """Cases left out of the means, and why."""


def geomean(values: Iterable[float]) -> float | None:
    kept = [v for v in values if v > 0 and math.isfinite(v)]
    if not kept:
        return None
    return math.exp(sum(math.log(v) for v in kept) / len(kept))


def untrusted_reason(case: SuiteCase) -> str | None:
    """Why a case's figures must not be published, or None."""
    for label, figures in (("baseline", case.baseline), ("best", case.best)):
        if figures is None:
            continue
        if figures.percent_of_peak is not None and figures.percent_of_peak > MAX_PERCENT:
            return (
                f"{label} at {figures.percent_of_peak:.1f}% of the theoretical peak (above "
                "100%: the roofline overstates the work, or the timing is wrong)"
            )
        if "above_peak" in figures.flags:
            return f"{label} flagged above_peak"
    return None


def geomeans(cases: Sequence[SuiteCase], *, baseline_only: bool = False) -> Geomeans:
    """The means over the cases whose figures can be believed. The two percent means are over
    the same cases (those with both a baseline and a best figure; with baseline_only, those
    with a baseline one), so they compare; cases above peak are left out, with the reason."""
    excluded: list[Excluded] = []
    base: list[float] = []
    best: list[float] = []
    speedups: list[float] = []
    for case in cases:
        reason = untrusted_reason(case)
        if reason is not None:
            excluded.append(Excluded(key=case.key, reason=reason))
            continue
        base_pct = case.baseline.percent_of_peak if case.baseline else None
        best_pct = case.best.percent_of_peak if case.best else None
        if base_pct is not None and (baseline_only or best_pct is not None):
            base.append(base_pct)
            if best_pct is not None and not baseline_only:
                best.append(best_pct)
        if case.speedup is not None and not baseline_only:
            speedups.append(case.speedup.speedup)
    return Geomeans(
        baseline_percent_of_peak=geomean(base),
        best_percent_of_peak=None if baseline_only else geomean(best),
        speedup=geomean(speedups),
        cases=len(base),
        speedup_cases=len(speedups),
        excluded=excluded,
    )


# --------------------------------------------------------------------------- text


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def _ms(figures: KernelFigures | None) -> str:
    if figures is None or figures.latency_ms is None:
        return "-"
    return f"{figures.latency_ms:.3g} ms"


def speedup_cell(figure: SpeedupFigure | None) -> str:
    if figure is None:
        return "-"
    text = f"{figure.speedup:.2f}x"
    if figure.beside and figure.ci_low is not None:
        high = (
            "inf"
            if figure.ci_high is None or not math.isfinite(figure.ci_high)
            else (f"{figure.ci_high:.2f}")
        )
        text += f" [{figure.ci_low:.2f}, {high}]"
    elif not figure.beside:
        text += " (not timed beside the baseline)"
    return text


def percent_cell(figures: KernelFigures | None) -> str:
    if figures is None:
        return "-"
    if figures.status != "PASSED":
        return figures.status
    return _pct(figures.percent_of_peak)


Column = Literal["task", "baseline", "best", "speedup", "llm", "cost", "wall", "ended"]

HEADERS: dict[Column, str] = {
    "task": "task",
    "baseline": "baseline % of peak",
    "best": "best % of peak",
    "speedup": "speedup over baseline",
    "llm": "LLM calls (tokens in/out)",
    "cost": "cost",
    "wall": "wall",
    "ended": "ended",
}


def row_cells(case: SuiteCase, *, baseline_only: bool) -> dict[Column, str]:
    reason = untrusted_reason(case)
    ended = case.ended or "running"
    if reason is not None:
        ended += f"; excluded: {reason}"
    elif case.best is not None and case.speedup is not None and not case.speedup.beside:
        ended += "; best not timed beside the baseline"
    cells: dict[Column, str] = {
        "task": case.key,
        "baseline": f"{percent_cell(case.baseline)} ({_ms(case.baseline)})",
        "ended": ended,
    }
    if not baseline_only:
        cells |= {
            "best": f"{percent_cell(case.best)} ({_ms(case.best)})",
            "speedup": speedup_cell(case.speedup),
            "llm": f"{case.llm_calls} ({case.tokens_in:,}/{case.tokens_out:,})",
            "cost": f"${case.cost_usd:.2f}",
            "wall": "-" if case.wall_s is None else f"{case.wall_s:.0f} s",
        }
    return cells


def columns(baseline_only: bool) -> list[Column]:
    if baseline_only:
        return ["task", "baseline", "ended"]
    return ["task", "baseline", "best", "speedup", "llm", "cost", "wall", "ended"]


def geomean_cells(means: Geomeans, *, baseline_only: bool) -> dict[Column, str]:
    cells: dict[Column, str] = {
        "task": f"geomean ({means.cases} cases)",
        "baseline": _pct(means.baseline_percent_of_peak),
        "ended": f"{len(means.excluded)} excluded" if means.excluded else "",
    }
    if not baseline_only:
        cells |= {
            "best": _pct(means.best_percent_of_peak),
            "speedup": "-" if means.speedup is None else f"{means.speedup:.2f}x",
        }
    return cells


def markdown(
    title: str,
    cases: Sequence[SuiteCase],
    means: Geomeans,
    *,
    baseline_only: bool,
    about: Sequence[tuple[str, str]],
) -> str:
    """The table as a Markdown document: a heading, what it was measured on and with (about:
    name/value lines: hardware, peaks, settings, models, code version), the table, the means,
    and the excluded cases with their reasons."""
    shown = columns(baseline_only)
    lines = [f"# {title}", ""]
    lines += [f"- **{name}**: {_md(value)}" for name, value in about]
    lines += ["", "| " + " | ".join(HEADERS[c] for c in shown) + " |"]
    lines.append("|" + "|".join("---" for _ in shown) + "|")
    for case in cases:
        cells = row_cells(case, baseline_only=baseline_only)
        lines.append("| " + " | ".join(_md(cells.get(c, "")) for c in shown) + " |")
    total = geomean_cells(means, baseline_only=baseline_only)
    bold = [f"**{_md(total[c])}**" if total.get(c) else "" for c in shown]
    lines.append("| " + " | ".join(bold) + " |")
    if means.excluded:
        lines += ["", "Excluded from the geometric means:"]
        lines += [f"- {e.key}: {_md(e.reason)}" for e in means.excluded]
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    """Text safe in a Markdown table cell: task names and errors come from files."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def bar_chart(title: str, cases: Sequence[SuiteCase], path: Path) -> Path | None:
    """Percent of peak per task, baseline beside best, like the paper's figure; cases
    excluded from the means are left out of the chart. None when matplotlib is missing or
    there is nothing to draw."""
    shown = [c for c in cases if untrusted_reason(c) is None and c.baseline is not None]
    shown = [c for c in shown if c.baseline and c.baseline.percent_of_peak is not None]
    if not shown:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, never a window
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    names = [c.key for c in shown]
    base = [c.baseline.percent_of_peak or 0.0 for c in shown if c.baseline]
    best = [(c.best.percent_of_peak or 0.0) if c.best else 0.0 for c in shown]
    figure, axes = plt.subplots(figsize=(max(6.0, 0.7 * len(shown) + 2), 4.5), dpi=120)
    xs = list(range(len(shown)))
    both = any(best)
    width = 0.4 if both else 0.6
    offset = width / 2 if both else 0.0
    axes.bar([x - offset for x in xs], base, width, label="baseline")
    if both:
        axes.bar([x + offset for x in xs], best, width, label="best")
    # The geometric means, as the paper quotes them, across the whole chart.
    for values, label, style in ((base, "baseline", "--"), (best, "best", ":")):
        mean = geomean(values) if all(values) else None
        if mean is not None:
            axes.axhline(mean, linestyle=style, color="gray", linewidth=1)
            axes.text(
                len(shown) - 0.5,
                mean,
                f" {label} geomean {mean:.1f}%",
                va="bottom",
                ha="right",
                fontsize=8,
            )
    axes.set_xticks(xs, names, rotation=45, ha="right")
    axes.set_ylabel("% of theoretical peak")
    axes.set_ylim(0, 100)
    axes.set_title(title)
    axes.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path
