"""`accelopt suite compare`: two suites per task and the difference of their geometric means,
taken only over the tasks both have a trusted best figure for."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from accelopt_mcp.store.base import SuiteRecord
from accelopt_mcp.store.sqlite import SqliteStore
from accelopt_mcp.suites.compare import compare_suites
from accelopt_mcp.suites.runner import SuiteSpec
from accelopt_mcp.suites.table import KernelFigures, SpeedupFigure, SuiteCase
from tests.cli_inprocess import run_accelopt


def _record(suite_id: str, best: dict[str, float]) -> SuiteRecord:
    cases = [
        SuiteCase(
            key=key,
            task=key,
            task_path="t.py",
            kernel_path="k.py",
            baseline=KernelFigures(latency_ms=2.0, percent_of_peak=10.0),
            best=KernelFigures(latency_ms=1.0, percent_of_peak=percent),
            speedup=SpeedupFigure(speedup=percent / 10.0, ci_low=1.0, ci_high=9.0, beside=True),
            ended="completed",
        )
        for key, percent in best.items()
    ]
    spec = SuiteSpec(settings={}, cases=cases)
    return SuiteRecord(
        id=suite_id, name="s", source="x", backend="cpu", status="completed",
        spec=spec.model_dump(mode="json"),
    )  # fmt: skip


def test_the_means_are_over_the_common_trusted_tasks() -> None:
    a = _record("a" * 8, {"matmul": 20.0, "silu": 40.0, "only_a": 90.0})
    b = _record("b" * 8, {"matmul": 80.0, "silu": 160.0, "only_b": 5.0})
    found = compare_suites(a, b)
    # silu in B is above 100 % of peak: out of the means, so only matmul is common.
    assert found.common_tasks == 1
    assert found.a_geomean_percent == pytest.approx(20.0)
    assert found.b_geomean_percent == pytest.approx(80.0)
    assert "+60.0 points" in found.summary
    rows = {r.task: r for r in found.rows}
    assert set(rows) == {"matmul", "silu", "only_a", "only_b"}
    assert rows["only_a"].b_percent == "(not in B)" and rows["only_b"].a_percent == "(not in A)"
    assert rows["silu"].b_percent_of_peak is None


def test_nothing_in_common_says_so() -> None:
    found = compare_suites(_record("a" * 8, {"x": 10.0}), _record("b" * 8, {"y": 10.0}))
    assert found.common_tasks == 0 and "nothing to compare" in found.summary


def test_the_cli_lists_shows_and_compares_stored_suites(tmp_path: Path) -> None:
    db = tmp_path / "k.db"
    with SqliteStore(db) as store:
        a = store.put_suite(_record(str(uuid.uuid4()), {"matmul": 20.0}))
        b = store.put_suite(_record(str(uuid.uuid4()), {"matmul": 50.0}))
    listed = run_accelopt("suite", "list", "--store", db, "--json")
    assert listed.returncode == 0, listed.stderr
    assert {s["id"] for s in json.loads(listed.stdout)} == {a.id, b.id}
    compared = run_accelopt("suite", "compare", a.id[:8], b.id[:8], "--store", db, "--json")
    assert compared.returncode == 0, compared.stderr
    found = json.loads(compared.stdout)
    assert found["a_geomean_percent"] == pytest.approx(20.0)
    assert found["b_geomean_percent"] == pytest.approx(50.0)
    shown = run_accelopt("suite", "compare", a.id[:8], b.id[:8], "--store", db)
    assert "(B - A: +30.0 points)" in shown.stdout
    missing = run_accelopt("suite", "show", "deadbeef", "--store", db)
    assert missing.returncode == 2 and "no suite with id 'deadbeef'" in missing.stderr
