"""A profile's history: every upsert is a measurement, the profile shows (and ranks by) their
pooled figure. Runs once per store (SQLite, PostgreSQL, Supabase through the stand-in)."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest

from accelopt_mcp import hashing
from accelopt_mcp.models import (
    Correctness,
    Evaluation,
    pool_evaluations,
)
from accelopt_mcp.store import _rows
from accelopt_mcp.store.base import KernelStore, StoreUnavailableError
from accelopt_mcp.store.postgres import PostgresStore, schema_v2
from accelopt_mcp.store.sqlite import SCHEMA_VERSION, SqliteStore, sqlite_schema
from accelopt_mcp.transfer.traceset import export_traceset, import_traceset
from tests.store.samples import (
    make_definition,
    make_evaluation,
    make_solution,
    make_workload,
    passed_evaluation,
    without_row_level_security,
)

DEF = "exp_f32"
CONFIG = {"iterations": 10}


def measured(
    latency: float,
    half_width: float | None = 0.05,
    *,
    day: int = 1,
    flags: tuple[str, ...] = (),
    log: str = "",
    hardware: str = "cpu/x86_64",
) -> Evaluation:
    """A PASSED evaluation taken on `day` (distinct days: distinct measurements) with a
    relative confidence interval of ±half_width (none when None)."""
    ci = (latency * (1 - half_width), latency * (1 + half_width)) if half_width else None
    return passed_evaluation(
        latency,
        ci=ci,
        speedup_ci=(2.0 / ci[1], 2.0 / ci[0]) if ci else None,
        hardware=hardware,
        timestamp=f"2026-01-{day:02d}T00:00:00Z",
        correctness=Correctness(max_relative_error=1e-7),
        log=log,
        flags=list(flags),
    )


@pytest.fixture
def seeded(store: KernelStore) -> KernelStore:
    store.upsert_definition(make_definition(DEF))
    store.upsert_workload(DEF, make_workload(DEF, uuid_="w-1"))
    return store


def _kernel(store: KernelStore, tag: str) -> str:
    return store.upsert_solution(make_solution(DEF, f"# {tag}\n", name=tag))


def _ci(store: KernelStore, profile_id: str) -> tuple[float, float, float]:
    profile = store.get_profile(profile_id)
    assert profile is not None and profile.evaluation.latency_stats is not None
    stats = profile.evaluation.latency_stats
    assert stats.ci_low_ms is not None and stats.ci_high_ms is not None
    assert profile.latency_ms == pytest.approx(stats.median_ms)  # the promoted column
    return stats.median_ms, stats.ci_low_ms, stats.ci_high_ms


def test_two_upserts_are_two_measurements_of_one_profile(seeded: KernelStore) -> None:
    sid = _kernel(seeded, "k")
    first = seeded.upsert_profile("w-1", sid, measured(1.00, day=1), CONFIG)
    again = seeded.upsert_profile("w-1", sid, measured(1.04, day=2), CONFIG)
    assert again == first
    counts = seeded.stats().counts
    assert (counts["profiles"], counts["measurements"]) == (1, 2)

    median, low, high = _ci(seeded, first)
    assert 1.00 < median < 1.04
    # They agree: the pooled interval is narrower than either one's (each 10% wide).
    assert high - low < 0.10 * 1.00
    profile = seeded.get_profile(first)
    assert profile is not None and profile.evaluation.latency_stats is not None
    assert profile.evaluation.latency_stats.measurements == 2
    assert profile.evaluation.log.startswith("pooled over 2 measurements")
    assert profile.speedup == pytest.approx(profile.evaluation.performance.speedup_factor)
    assert profile.evaluation == pool_evaluations([measured(1.00, day=1), measured(1.04, day=2)])


def test_measurements_that_disagree_widen_the_interval(seeded: KernelStore) -> None:
    sid = _kernel(seeded, "k")
    pid = seeded.upsert_profile("w-1", sid, measured(1.0, day=1), CONFIG)
    seeded.upsert_profile("w-1", sid, measured(3.0, day=2), CONFIG)
    median, low, high = _ci(seeded, pid)
    assert 1.0 < median < 3.0
    # Random effects: far apart beyond their own intervals, so wider than both of them.
    assert low < 1.0 * 0.95 and high > 3.0 * 1.05


def test_list_measurements_oldest_first(seeded: KernelStore) -> None:
    sid = _kernel(seeded, "k")
    latencies = (2.0, 1.0, 3.0, 1.5)
    pid = ""
    for day, latency in enumerate(latencies, start=1):
        pid = seeded.upsert_profile("w-1", sid, measured(latency, day=day), CONFIG)
    history = seeded.list_measurements(pid)
    assert [m.evaluation.performance.latency_ms for m in history] == list(latencies)
    assert [m.evaluation for m in history] == [
        measured(x, day=d) for d, x in enumerate(latencies, start=1)
    ]
    assert {m.profile_id for m in history} == {pid}
    assert len({m.id for m in history}) == len(latencies)
    stamps = [m.created_at for m in history]
    assert all(s is not None for s in stamps) and stamps == sorted(stamps)
    assert seeded.list_measurements("garbage") == []
    assert seeded.list_measurements("00000000-0000-0000-0000-000000000000") == []


def test_the_same_measurement_sent_twice_is_stored_once(seeded: KernelStore) -> None:
    sid = _kernel(seeded, "k")
    pid = seeded.upsert_profile("w-1", sid, measured(1.0, day=1), CONFIG)
    before = seeded.get_profile(pid)
    assert seeded.upsert_profile("w-1", sid, measured(1.0, day=1), CONFIG) == pid
    assert len(seeded.list_measurements(pid)) == 1
    assert seeded.get_profile(pid) == before


def test_a_failed_remeasurement_is_history_not_the_figure(seeded: KernelStore) -> None:
    sid = _kernel(seeded, "k")
    pid = seeded.upsert_profile("w-1", sid, measured(1.0, day=1), CONFIG)
    seeded.upsert_profile("w-1", sid, make_evaluation("RUNTIME_ERROR"), CONFIG)
    history = seeded.list_measurements(pid)
    assert [m.evaluation.status.value for m in history] == ["PASSED", "RUNTIME_ERROR"]
    profile = seeded.get_profile(pid)
    assert profile is not None and profile.eval_status == "PASSED"
    assert profile.evaluation == measured(1.0, day=1)
    # Never passed: the newest failure is the profile's evaluation.
    broken = _kernel(seeded, "broken")
    bad = seeded.upsert_profile("w-1", broken, make_evaluation("COMPILE_ERROR"), CONFIG)
    seeded.upsert_profile("w-1", broken, make_evaluation("TIMEOUT"), CONFIG)
    assert seeded.get_profile(bad).eval_status == "TIMEOUT"
    assert len(seeded.list_measurements(bad)) == 2


def test_a_flagged_measurement_keeps_the_profile_untrusted(seeded: KernelStore) -> None:
    cheat, honest = _kernel(seeded, "cheat"), _kernel(seeded, "honest")
    flagged = seeded.upsert_profile("w-1", cheat, measured(0.2, day=1, flags=("above_peak",)), {})
    for day in (2, 3, 4):
        seeded.upsert_profile("w-1", cheat, measured(0.2, day=day), {})
    seeded.upsert_profile("w-1", honest, measured(1.0, day=1, flags=("noisy_timing",)), {})
    profile = seeded.get_profile(flagged)
    assert profile is not None and not profile.trusted
    assert profile.flags == ["above_peak"]
    assert [m.evaluation.trusted for m in seeded.list_measurements(flagged)] == [
        False,
        True,
        True,
        True,
    ]
    assert [r.solution.id for r in seeded.best_solutions(DEF)] == [honest]
    everything = seeded.best_solutions(DEF, include_flagged=True)
    assert [r.solution.id for r in everything] == [cheat, honest]
    assert everything[1].profile.trusted  # an informational flag leaves it trusted


def test_rankings_use_the_pooled_figure(seeded: KernelStore) -> None:
    lucky, steady, middling = (_kernel(seeded, t) for t in ("lucky", "steady", "middling"))
    # Measured fast once, then slow twice: neither its first nor its last figure.
    runs = [measured(0.5, day=1), measured(2.0, day=2), measured(2.0, day=3)]
    for evaluation in runs:
        seeded.upsert_profile("w-1", lucky, evaluation, CONFIG)
    seeded.upsert_profile("w-1", steady, measured(1.0, day=1), CONFIG)
    seeded.upsert_profile("w-1", middling, measured(1.5, day=1), CONFIG)
    pooled = pool_evaluations(runs).performance
    assert pooled is not None and 1.0 < pooled.latency_ms < 1.5

    ranked = seeded.best_solutions(DEF)
    # Latest-only would say steady, middling, lucky; first-only lucky, steady, middling.
    assert [r.solution.id for r in ranked] == [steady, lucky, middling]
    assert ranked[1].profile.latency_ms == pytest.approx(pooled.latency_ms)
    entries = seeded.ranked_solutions(DEF)
    assert [e.solution.id for e in entries] == [steady, lucky, middling]


def test_measurement_logs_are_redacted(
    seeded: KernelStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "measure-secret-4411"
    monkeypatch.setenv("KERNEL_SERVICE_TOKEN", secret)
    sid = _kernel(seeded, "k")
    leak = f"token {secret} at postgresql://u:pw-measure-7@h/db"
    pid = seeded.upsert_profile("w-1", sid, measured(1.0, day=1, log=leak), CONFIG)
    seeded.upsert_profile("w-1", sid, measured(1.1, day=2, log=leak), CONFIG)
    logs = [m.evaluation.log for m in seeded.list_measurements(pid)]
    logs.append(seeded.get_profile(pid).evaluation.log)
    for log in logs:
        assert secret not in log and "pw-measure-7" not in log
        assert "postgresql://***@h/db" in log


def test_concurrent_writers_of_one_profile_all_pool(seeded: KernelStore) -> None:
    sid = _kernel(seeded, "k")
    writers = 6
    start = threading.Barrier(writers)

    def write(day: int) -> str:
        start.wait()
        return seeded.upsert_profile("w-1", sid, measured(1.0 + day / 100, day=day), CONFIG)

    with ThreadPoolExecutor(writers) as pool:
        ids = set(pool.map(write, range(1, writers + 1)))
    assert len(ids) == 1
    [pid] = ids
    history = seeded.list_measurements(pid)
    assert len(history) == writers
    profile = seeded.get_profile(pid)
    assert profile is not None
    assert profile.evaluation == pool_evaluations([m.evaluation for m in history])


def test_export_import_keeps_every_measurement(seeded: KernelStore, tmp_path: Path) -> None:
    sid = _kernel(seeded, "k")
    pid = ""
    for day, latency in enumerate((1.0, 1.2, 0.9), start=1):
        pid = seeded.upsert_profile("w-1", sid, measured(latency, day=day), CONFIG)
    seeded.upsert_profile("w-1", sid, make_evaluation("RUNTIME_ERROR"), CONFIG)
    exported = export_traceset(seeded, tmp_path / "out")
    assert (exported.profiles, exported.measurements) == (1, 4)

    with SqliteStore(tmp_path / "copy.db") as copy:
        counts = import_traceset(copy, tmp_path / "out")
        assert (counts.profiles, counts.measurements) == (1, 4)
        [profile] = copy.list_profiles()
        assert profile.evaluation == seeded.get_profile(pid).evaluation
        assert [m.evaluation for m in copy.list_measurements(profile.id)] == [
            m.evaluation for m in seeded.list_measurements(pid)
        ]
        before = copy.stats().counts
        import_traceset(copy, tmp_path / "out")  # again: nothing new
        assert copy.stats().counts == before

    # Back into the store it came from: every measurement is there already.
    before = seeded.stats().counts
    import_traceset(seeded, tmp_path / "out")
    assert seeded.stats().counts == before


def test_a_trace_without_measurements_imports_as_one(seeded: KernelStore, tmp_path: Path) -> None:
    sid = _kernel(seeded, "k")
    seeded.upsert_profile("w-1", sid, measured(1.0, day=1), CONFIG)
    seeded.upsert_profile("w-1", sid, measured(1.1, day=2), CONFIG)
    export_traceset(seeded, tmp_path / "out")
    [traces] = (tmp_path / "out" / "traces").rglob("*.jsonl")
    lines = [json.loads(line) for line in traces.read_text().splitlines()]
    for line in lines:  # as flashinfer-bench (or an older accelopt) writes it
        del line["accelopt"]["measurements"]
    traces.write_text("".join(json.dumps(line) + "\n" for line in lines))

    with SqliteStore(tmp_path / "copy.db") as copy:
        import_traceset(copy, tmp_path / "out")
        [profile] = copy.list_profiles()
        [only] = copy.list_measurements(profile.id)
        assert only.evaluation.performance.latency_ms == profile.latency_ms
        stats = profile.evaluation.latency_stats
        assert stats is not None and stats.measurements == 1


# --------------------------------------------------------------------------- older databases


def _legacy_rows(
    run: Callable[[str, tuple[Any, ...]], object], *, pg: bool
) -> tuple[str, Evaluation]:
    """A definition, workload, solution and one profile written by an accelopt that kept no
    measurements (plain INSERTs through `run`); returns the profile id and its evaluation."""
    definition, workload = make_definition(DEF), make_workload(DEF, uuid_="w-1")
    solution = make_solution(DEF, "# old\n")
    if pg:
        run("INSERT INTO definitions (definition) VALUES (%s)", (_rows.record_json(definition),))
        run(
            "INSERT INTO workloads (definition_name, workload) VALUES (%s, %s)",
            (DEF, _rows.workload_trace_json(DEF, workload)),
        )
    else:
        run(
            "INSERT INTO definitions (name, definition) VALUES (?, ?)",
            (DEF, _rows.record_json(definition)),
        )
        run(
            "INSERT INTO workloads (uuid, definition_name, workload) VALUES (?, ?, ?)",
            ("w-1", DEF, _rows.workload_trace_json(DEF, workload)),
        )
    sid, pid = _rows.new_uuid(), _rows.new_uuid()
    mark = "%s" if pg else "?"
    run(
        "INSERT INTO solutions (id, definition_name, solution, hash_version, solution_hash) "
        f"VALUES ({mark}, {mark}, {mark}, 1, {mark})",
        (sid, DEF, _rows.record_json(solution), hashing.solution_hash(solution)),
    )
    old = measured(2.0, day=1)
    run(
        "INSERT INTO profiles (id, workload_uuid, solution_id, evaluation, benchmark_config, "
        f"benchmark_config_hash) VALUES ({mark}, {mark}, {mark}, {mark}, {mark}, {mark})",
        (pid, "w-1", sid, _rows.record_json(old), "{}", hashing.benchmark_config_hash(CONFIG)),
    )
    return pid, old


def _without_measurements(schema: str) -> str:
    """A schema text as it was before the measurements table (and row level security, which
    came later and names every table)."""
    if "ROW LEVEL SECURITY" in schema:  # schema_v2.txt (the SQLite schema has none)
        schema = without_row_level_security(schema)
    start = schema.index("CREATE TABLE IF NOT EXISTS measurements")
    end = schema.index("CREATE INDEX IF NOT EXISTS measurements_profile_idx")
    end = schema.index(";", end) + 1
    old = schema[:start] + schema[end:]
    backfill = old.find("INSERT INTO measurements")
    if backfill >= 0:
        old = old[:backfill] + old[old.index(";", backfill) + 1 :]
    assert "measurements (" not in old
    return old


def _check_legacy(store: KernelStore, pid: str, old: Evaluation) -> None:
    [first] = store.list_measurements(pid)
    assert first.evaluation == old
    profile = store.get_profile(pid)
    assert profile is not None
    sid = profile.solution_id
    assert store.upsert_profile("w-1", sid, measured(2.2, day=2), CONFIG) == pid
    history = store.list_measurements(pid)
    assert [m.evaluation for m in history] == [old, measured(2.2, day=2)]
    assert store.get_profile(pid).evaluation == pool_evaluations([old, measured(2.2, day=2)])


def test_sqlite_file_from_before_measurements_gains_its_history(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.executescript(_without_measurements(sqlite_schema()) + "\nPRAGMA user_version = 2;")
    pid, old = _legacy_rows(conn.execute, pg=False)
    conn.commit()
    conn.close()
    with SqliteStore(path) as store:
        _check_legacy(store, pid, old)
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 3
    finally:
        conn.close()


def test_sqlite_refuses_a_newer_file(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    SqliteStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StoreUnavailableError, match="upgrade accelopt-mcp"):
        SqliteStore(path)


def test_a_profile_without_measurements_counts_its_evaluation_first(tmp_path: Path) -> None:
    # Written by an older accelopt into a file this one had already upgraded.
    path = tmp_path / "k.db"
    SqliteStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA foreign_keys = ON")
    pid, old = _legacy_rows(conn.execute, pg=False)
    conn.commit()
    conn.close()
    with SqliteStore(path) as store:
        assert store.list_measurements(pid) == []
        profile = store.get_profile(pid)
        assert profile is not None
        store.upsert_profile("w-1", profile.solution_id, measured(2.2, day=2), CONFIG)
        history = store.list_measurements(pid)
        assert [m.evaluation for m in history] == [old, measured(2.2, day=2)]
        assert history[0].created_at == profile.created_at


@pytest.mark.postgres
def test_postgres_database_from_before_measurements(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(_without_measurements(schema_v2()))
        pid, old = _legacy_rows(conn.execute, pg=True)
    with pytest.raises(StoreUnavailableError, match=r"older than this accelopt") as caught:
        PostgresStore(pg_dsn)
    assert "measurements" in str(caught.value) and "schema_v2.txt" in str(caught.value)
    with PostgresStore(pg_dsn, init_schema=True) as store:  # `accelopt db init` does this
        _check_legacy(store, pid, old)
    with PostgresStore(pg_dsn, init_schema=True) as store:  # re-applying adds nothing
        assert len(store.list_measurements(pid)) == 2
