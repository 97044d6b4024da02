"""The suite table: geometric means over believable rows only, the >100 % guard, and the
Markdown and chart written from untrusted names."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from accelopt_mcp.suites.table import (
    KernelFigures,
    SpeedupFigure,
    SuiteCase,
    bar_chart,
    geomean,
    geomeans,
    markdown,
    row_cells,
    speedup_cell,
    untrusted_reason,
)


def _case(key: str, base: float | None, best: float | None, speedup: float | None) -> SuiteCase:
    return SuiteCase(
        key=key,
        task=key.split("/")[0],
        task_path=f"/t/{key}.py",
        kernel_path=f"/k/{key}.py",
        run_id="r-" + key,
        baseline=KernelFigures(solution_id="b", latency_ms=2.0, percent_of_peak=base),
        best=KernelFigures(solution_id="x", latency_ms=1.0, percent_of_peak=best),
        speedup=None
        if speedup is None
        else SpeedupFigure(
            speedup=speedup, ci_low=speedup * 0.9, ci_high=speedup * 1.1, beside=True
        ),
        ended="completed",
    )


def test_geomean_is_the_geometric_mean_of_positive_finite_values() -> None:
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([1.0, 0.0, math.inf, 4.0]) == pytest.approx(2.0)
    assert geomean([]) is None


def test_a_row_above_peak_is_flagged_and_kept_out_of_every_mean() -> None:
    cases = [
        _case("a/0", 10.0, 40.0, 4.0),
        _case("b/0", 20.0, 80.0, 4.0),
        _case("c/0", 30.0, 130.0, 9.0),  # a roofline that overstates the work
    ]
    means = geomeans(cases)
    assert means.baseline_percent_of_peak == pytest.approx(math.sqrt(10 * 20))
    assert means.best_percent_of_peak == pytest.approx(math.sqrt(40 * 80))
    assert means.speedup == pytest.approx(4.0)
    assert means.cases == 2
    assert [e.key for e in means.excluded] == ["c/0"]
    assert "130.0%" in means.excluded[0].reason and "above 100%" in means.excluded[0].reason
    assert "excluded" in row_cells(cases[2], baseline_only=False)["ended"]


def test_a_flag_excludes_a_row_even_below_100_percent() -> None:
    case = _case("a/0", 10.0, 50.0, 5.0)
    assert case.best is not None
    case.best.flags.append("above_peak")
    assert untrusted_reason(case) == "best flagged above_peak"
    assert geomeans([case]).cases == 0


def test_both_percent_means_are_over_the_same_cases() -> None:
    unfinished = _case("b/0", 20.0, None, None)
    means = geomeans([_case("a/0", 10.0, 40.0, 4.0), unfinished])
    assert means.cases == 1
    assert means.baseline_percent_of_peak == pytest.approx(10.0)
    assert geomeans([unfinished], baseline_only=True).baseline_percent_of_peak == pytest.approx(
        20.0
    )


def test_a_best_not_timed_beside_the_baseline_says_so() -> None:
    case = _case("a/0", 10.0, 40.0, None)
    case.speedup = SpeedupFigure(speedup=4.0)
    cells = row_cells(case, baseline_only=False)
    assert "not timed beside the baseline" in cells["speedup"]
    assert "best not timed beside the baseline" in cells["ended"]
    interval = row_cells(_case("b/0", 10.0, 40.0, 2.0), baseline_only=False)["speedup"]
    assert interval == "2.00x [1.80, 2.20]"


def test_markdown_escapes_names_from_files(tmp_path: Path) -> None:
    hostile = _case("x|y\n# injected/0", 10.0, 20.0, 2.0)
    text = markdown(
        "suite", [hostile], geomeans([hostile]), baseline_only=False, about=[("hardware", "a|b")]
    )
    rows = [line for line in text.splitlines() if line.startswith("| x")]
    assert len(rows) == 1 and "x\\|y # injected/0" in rows[0]
    assert "\n# injected" not in text
    assert "a\\|b" in text


def test_the_chart_is_written_and_leaves_out_excluded_rows(tmp_path: Path) -> None:
    cases = [_case("a/0", 10.0, 40.0, 4.0), _case("c/0", 30.0, 130.0, 9.0)]
    path = bar_chart("t", cases, tmp_path / "chart.png")
    assert path is not None and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert bar_chart("t", cases[1:], tmp_path / "none.png") is None


def test_an_interval_without_an_upper_bound_is_stored_as_none(tmp_path: Path) -> None:
    # A comparison with too few samples has ci_high = inf; a suite is JSON, which has no inf
    # (the resumed two-task suite failed on exactly this once).
    figure = SpeedupFigure(speedup=1.4, ci_low=1.1, ci_high=math.inf, beside=True)
    assert figure.ci_high is None
    assert speedup_cell(figure) == "1.40x [1.10, inf]"
    figures = KernelFigures(latency_ms=math.nan, percent_of_peak=math.inf)
    assert figures.latency_ms is None and figures.percent_of_peak is None
    from accelopt_mcp.store.base import SuiteRecord
    from accelopt_mcp.store.sqlite import SqliteStore

    case = _case("a/0", 10.0, 20.0, None)
    case.speedup = figure
    with SqliteStore(tmp_path / "k.db") as store:
        stored = store.put_suite(
            SuiteRecord(
                id="9" * 32, name="s", source="x", backend="cpu", status="completed",
                spec={"cases": [case.model_dump(mode="json")]},
            )
        )  # fmt: skip
    assert stored.spec["cases"][0]["speedup"]["ci_high"] is None
