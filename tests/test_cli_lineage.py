"""What `accelopt db best`, `db lineage` and `runs show` say between kernels: the speedup over
the parent timed in the same rounds (interval, verdict) where it was, "timed apart" otherwise,
and a kernel's measurements with the times its children timed it beside them. Rows are stored
through the store's API in a real SQLite file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from accelopt_mcp.cli import _register, app
from accelopt_mcp.cli.output import console
from accelopt_mcp.cli.runs import _slot_speedup
from accelopt_mcp.engine.runs import SpeedupFigure, figure_text
from accelopt_mcp.engine.selection import AttemptRecord
from accelopt_mcp.store.sqlite import SqliteStore
from tests.store.lineage_samples import CONFIG, DEF, WORKLOAD, Family, beside, store_family, timed

_register()
runner = CliRunner()


def _stored(path: Path) -> Family:
    with SqliteStore(path) as store:
        family = store_family(store)
        slower = beside(0.916, 0.783, 0.993, baseline_id=family.parent)
        child = timed(0.617, day=2, comparisons=(slower,))
        store.upsert_profile(WORKLOAD, family.child, child, CONFIG)
        again = beside(1.2, 1.1, 1.3, baseline_id=family.parent)
        store.upsert_profile(WORKLOAD, family.sibling, timed(0.8, day=3, comparisons=()), CONFIG)
        # Slower than its first profile by a hair, so that the ranking takes the first one by
        # latency (at equal latencies the tie rule falls to the profiles' creation times,
        # which can be the same millisecond here).
        store.upsert_profile(
            WORKLOAD, family.sibling, timed(0.81, day=4, comparisons=(again,)), {**CONFIG, "x": 1}
        )
        store.upsert_profile(WORKLOAD, family.grandchild, timed(0.5, day=5), CONFIG)
    return family


def test_db_best_shows_same_round_figures_and_labels_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "k.db"
    family = _stored(path)
    monkeypatch.setattr(console, "width", 400)  # one table row per line
    shown = runner.invoke(app, ["db", "best", DEF, "--store", str(path)])
    assert shown.exit_code == 0, shown.output
    lines = {line.split("│")[1].strip(): line for line in shown.output.splitlines() if "│" in line}
    # A table shows each id's first 8 characters, which every command takes back.
    assert "0.916x [0.783, 0.993] over parent (same rounds), slower" in lines[family.child[:8]]
    assert "1.23x [1.15, 1.32] over parent (timed apart), faster" in lines[family.grandchild[:8]]
    assert "1 + 1 beside children" in lines[family.parent[:8]]
    assert "beside children" not in lines[family.grandchild[:8]]

    data = json.loads(
        runner.invoke(app, ["db", "best", DEF, "--store", str(path), "--json"]).output
    )
    rows = {r["solution"]["id"]: r for r in data}
    assert rows[family.child]["speedup_vs_parent"]["measured"] == "same_rounds"
    assert rows[family.child]["speedup_vs_parent"]["verdict"] == "slower"
    assert rows[family.grandchild]["speedup_vs_parent"]["measured"] == "apart"
    assert rows[family.parent]["speedup_vs_parent"] is None
    assert rows[family.parent]["timed_beside_children"] == 1
    # The sibling's same-round figure was taken under other settings than it is ranked by.
    assert rows[family.sibling]["speedup_vs_parent"]["measured"] == "apart"


def test_db_lineage_names_each_kernels_figure(tmp_path: Path) -> None:
    path = tmp_path / "k.db"
    family = _stored(path)
    shown = runner.invoke(app, ["db", "lineage", family.grandchild, "--store", str(path)])
    assert shown.exit_code == 0, shown.output
    mine, first, top = shown.output.splitlines()[1:4]
    assert mine.startswith("  this kernel: ") and "0.5 ms" in mine
    assert "1.23x [1.15, 1.32] over its parent (timed apart), faster" in mine
    assert first.startswith(f"  ancestor 1: {family.child}")
    assert "over its parent (same rounds), slower" in first
    assert top.startswith(f"  ancestor 2: {family.parent}") and "over its parent" not in top

    data = json.loads(
        runner.invoke(app, ["db", "lineage", family.parent, "--store", str(path), "--json"]).output
    )
    assert data["solution"]["id"] == family.parent and data["ancestors"] == []
    kin = {d["id"]: d for d in data["descendants"]}
    assert kin[family.child]["speedup_vs_parent"]["measured"] == "same_rounds"
    assert kin[family.child]["best_latency_ms"] == 0.617


def test_run_tables_say_how_a_speedup_over_the_parent_was_had() -> None:
    def slot(**fields: float | str | None) -> AttemptRecord:
        return AttemptRecord(
            iteration=1, beam_index=0, plan_index=0, attempt_index=0, parent_id="p",
            parent_latency_ms=1.0, status="PASSED", latency_ms=0.5, **fields,  # type: ignore[arg-type]
        )  # fmt: skip

    same = slot(parent_speedup=1.9, speedup_ci_low=1.8, speedup_ci_high=2.0,
                speedup_measured="same_rounds")  # fmt: skip
    assert _slot_speedup(same) == "1.90x [1.80, 2.00] (same rounds)"
    apart = slot(speedup_ci_low=1.5, speedup_ci_high=2.6, speedup_measured="apart")
    assert _slot_speedup(apart) == "2.00x [1.50, 2.60] (timed apart)"
    assert _slot_speedup(slot()) == "2.00x (timed apart)"

    assert figure_text(SpeedupFigure(estimate=1.62, measured="apart"), "the parent") == (
        "1.62x over the parent (timed apart, no interval)"
    )
    unbounded = SpeedupFigure(estimate=1.1, low=0.9, measured="same_rounds")
    assert figure_text(unbounded, "the parent") == (
        "1.1x [0.9, inf] over the parent (same rounds), indistinguishable"
    )
    assert SpeedupFigure(estimate=2.0, measured="point").verdict is None


def test_eighty_columns_cut_no_id_or_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At 80 columns a table folds a long cell onto more lines of the cell; it never ends one
    in an ellipsis (before, `db best` showed `300b430d-e1…` and names cut the same way)."""
    path = tmp_path / "k.db"
    family = _stored(path)
    monkeypatch.setattr(console, "width", 80)
    shown = runner.invoke(app, ["db", "best", DEF, "--store", str(path)])
    assert shown.exit_code == 0, shown.output
    assert "…" not in shown.output
    assert family.child[:8] in shown.output
    listed = runner.invoke(app, ["runs", "list", "--store", str(path)])
    assert listed.exit_code == 0 and "…" not in listed.output
