"""Batches (KernelStore.batch) and the query planner's statistics, on real databases: a batch
stores what single calls store, across its commits; a failed call ends it without losing what
was committed or passing off what was rolled back as stored; statistics are gathered where the
plans depend on them, and the hot queries use their indexes."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from accelopt_mcp.models import EvaluationStatus
from accelopt_mcp.store._sql import BATCH_CALLS
from accelopt_mcp.store.base import (
    ExperienceIn,
    KernelStore,
    RunRecord,
    StoreError,
    UnknownReferenceError,
)
from accelopt_mcp.store.postgres import PostgresStore
from accelopt_mcp.store.sqlite import ANALYZE_MIN_ROWS, SqliteStore
from tests.store.conftest import fresh_database
from tests.store.samples import make_definition, make_evaluation, make_solution, make_workload

DEF = "exp_f32"
CONFIG = {"seeds": [0, 1], "iterations": 10}
SQL_KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def _source(i: int) -> str:
    return f"def run(x):\n    return x + {i}\n"


@pytest.fixture(params=SQL_KINDS)
def sql_store(request: pytest.FixtureRequest, tmp_path: Path) -> KernelStore:
    if request.param == "sqlite":
        opened: KernelStore = SqliteStore(tmp_path / "k.db")
    else:
        admin_dsn = request.getfixturevalue("pg_admin_dsn")
        opened = PostgresStore(fresh_database(admin_dsn), init_schema=True)
    request.addfinalizer(opened.close)
    return opened


@pytest.fixture
def pg_store(pg_admin_dsn: str) -> Iterator[tuple[PostgresStore, str]]:
    dsn = fresh_database(pg_admin_dsn)
    store = PostgresStore(dsn, init_schema=True)
    yield store, dsn
    store.close()


def test_a_batch_stores_and_reads_what_single_calls_do(store: KernelStore) -> None:
    with store.batch():
        store.upsert_definition(make_definition(DEF))
        workload = store.upsert_workload(DEF, make_workload(DEF))
        parent = store.upsert_solution(make_solution(DEF, _source(0)))
        child = store.upsert_solution(make_solution(DEF, _source(1)), parent_id=parent)
        # Dedup and reads inside the batch see the writes before them.
        assert store.upsert_solution(make_solution(DEF, _source(0))) == parent
        assert [s.id for s in store.ancestors(child)] == [parent]
        first = store.upsert_profile(workload, child, make_evaluation(latency_ms=1.0), CONFIG)
        again = store.upsert_profile(workload, child, make_evaluation(latency_ms=3.0), CONFIG)
        store.create_run(RunRecord(id="run-1", definition_name=DEF))
        store.put_run_entry("run-1", "attempt", "0/0", {"ok": True})
        item = store.add_experience(
            ExperienceIn(definition_name=DEF, title="fuse loops", strategy="one pass")
        )
    assert first == again
    assert len(store.list_measurements(first)) == 2
    profile = store.get_profile(first)
    assert profile is not None and profile.latency_ms is not None
    assert 1.0 < profile.latency_ms < 3.0  # pooled over both measurements
    assert [s.id for s in store.descendants(parent)] == [child]
    assert [e.data for e in store.run_entries("run-1")] == [{"ok": True}]
    assert [e.id for e in store.search_experiences(text="fuse")] == [item]
    assert store.stats().counts["solutions"] == 2


def test_a_batch_longer_than_one_transaction_keeps_every_row(sql_store: KernelStore) -> None:
    sql_store.upsert_definition(make_definition(DEF))
    count = 2 * BATCH_CALLS + 7
    with sql_store.batch():
        ids = [sql_store.upsert_solution(make_solution(DEF, _source(i))) for i in range(count)]
    assert len(set(ids)) == count
    assert sql_store.stats().counts["solutions"] == count


def test_a_failed_call_ends_the_batch_and_keeps_what_was_committed(
    sql_store: KernelStore,
) -> None:
    sql_store.upsert_definition(make_definition(DEF))
    committed = BATCH_CALLS + 3  # one transaction committed, three calls in the next
    with pytest.raises(UnknownReferenceError, match="parent_id"), sql_store.batch():
        for i in range(committed):
            sql_store.upsert_solution(make_solution(DEF, _source(i)))
        sql_store.upsert_solution(make_solution(DEF, "# bad\n"), parent_id=str(uuid.uuid4()))
    assert sql_store.stats().counts["solutions"] == BATCH_CALLS

    # A caller that swallows the failure is told at the end that rows were rolled back, and
    # cannot go on writing in the broken batch meanwhile.
    rolled_back = "rolled back the calls since the batch's last commit"
    with pytest.raises(StoreError, match=rolled_back), sql_store.batch():
        sql_store.upsert_solution(make_solution(DEF, "# kept only if committed\n"))
        with pytest.raises(UnknownReferenceError):
            sql_store.upsert_solution(make_solution(DEF, "# x\n"), parent_id=str(uuid.uuid4()))
        with pytest.raises(StoreError, match="an earlier call in this batch failed"):
            sql_store.upsert_solution(make_solution(DEF, "# after\n"))
    assert sql_store.stats().counts["solutions"] == BATCH_CALLS


@pytest.mark.postgres
def test_a_write_sent_without_waiting_that_fails_fails_the_batch(
    pg_store: tuple[PostgresStore, str],
) -> None:
    """In pipeline mode a run entry's INSERT is not waited for: when the server refuses it (its
    run was deleted by another client after the batch had seen it), the error still ends the
    batch, as a named reference error, and nothing of that transaction is stored."""
    store, dsn = pg_store
    store.upsert_definition(make_definition(DEF))
    store.create_run(RunRecord(id="doomed", definition_name=DEF))
    with pytest.raises(UnknownReferenceError, match="not stored"), store.batch():
        assert store.resolve_id("run", "doomed") == "doomed"  # the batch now knows the run
        with psycopg.connect(dsn, autocommit=True) as other:
            other.execute("DELETE FROM runs WHERE id = 'doomed'")
        store.upsert_solution(make_solution(DEF, "# written with the entry\n"))
        store.put_run_entry("doomed", "attempt", "0/0", {"ok": True})
    assert store.stats().counts["solutions"] == 0


# --------------------------------------------------------------------------- statistics


def _fill(store: KernelStore, count: int) -> tuple[str, list[str]]:
    """count solutions of DEF, each with a profile on one workload (as one task's run)."""
    store.upsert_definition(make_definition(DEF))
    workload = store.upsert_workload(DEF, make_workload(DEF))
    with store.batch():
        ids = [store.upsert_solution(make_solution(DEF, _source(i))) for i in range(count)]
        for i, sid in enumerate(ids):
            status = EvaluationStatus.PASSED if i % 3 else EvaluationStatus.INCORRECT_NUMERICAL
            evaluation = make_evaluation(status, latency_ms=1.0 + i / count)
            store.upsert_profile(workload, sid, evaluation, CONFIG)
    return workload, ids


def _plan(path: Path, sql: str, params: tuple[object, ...]) -> str:
    with sqlite3.connect(path) as conn:
        return " | ".join(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params))


def _store_sql(store: SqliteStore, call: Callable[[], object], start: str = "SELECT") -> str:
    """The first statement beginning with `start` that the store ran for `call`, as SQLite
    traced it."""
    seen: list[str] = []
    conn = store._connection()
    conn.set_trace_callback(seen.append)
    try:
        call()
    finally:
        conn.set_trace_callback(None)
    return next(q for q in seen if q.lstrip().startswith(start))


def test_sqlite_statistics_are_gathered_once_tables_are_big_enough(tmp_path: Path) -> None:
    path = tmp_path / "k.db"
    with SqliteStore(path) as store:
        store.upsert_definition(make_definition(DEF))
        store.upsert_solution(make_solution(DEF, _source(0)))
    with sqlite3.connect(path) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        # A near-empty table is left without figures: they would mislead once it grows.
        assert (
            "sqlite_stat1" not in tables
            or not conn.execute("SELECT 1 FROM sqlite_stat1 WHERE tbl = 'solutions'").fetchone()
        )

    with SqliteStore(path) as store:
        workload, ids = _fill(store, ANALYZE_MIN_ROWS + 200)  # a batch that large refreshes
        lookup = _store_sql(
            store, lambda: store.list_profiles(solution_id=ids[7], workload_uuid=workload)
        )
        ranking = "SELECT s.id AS s_id"  # the ranking by ids, before the winners are read
        best = _store_sql(store, lambda: store.best_solutions(DEF, limit=10), ranking)
    with sqlite3.connect(path) as conn:
        analyzed = {r[0] for r in conn.execute("SELECT tbl FROM sqlite_stat1")}
    assert {"solutions", "profiles", "measurements"} <= analyzed
    # Ranking walks the latency index (with `trusted` in it: no profile row is read) instead of
    # sorting every profile of the definition.
    plan = _plan(path, best, ())
    assert plan.startswith("SEARCH p USING INDEX profiles_rank_idx (latency_ms>?)"), plan
    assert "profiles_solution_workload_idx" in _plan(path, lookup, ())

    # Without any figures (a file from before, or too small when last checked) the engine's
    # per-attempt lookup still finds its row by index, not by scanning the workload's rows.
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM sqlite_stat1")
    plan = _plan(path, lookup, ())
    assert "profiles_solution_workload_idx (solution_id=? AND workload_uuid=?)" in plan, plan


def test_sqlite_statistics_missing_from_a_big_file_are_gathered_on_open(tmp_path: Path) -> None:
    path = tmp_path / "k.db"
    with SqliteStore(path) as store:
        _fill(store, ANALYZE_MIN_ROWS + 10)
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE sqlite_stat1")
    SqliteStore(path).close()
    with sqlite3.connect(path) as conn:
        rows = dict(conn.execute("SELECT idx, stat FROM sqlite_stat1 WHERE tbl = 'profiles'"))
    # A full ANALYZE: every profile counted (a sampled one stops at its limit).
    assert rows["profiles_solution_idx"].split()[0] == str(ANALYZE_MIN_ROWS + 10)


@pytest.mark.postgres
def test_postgres_statistics_are_refreshed_after_a_large_batch(
    pg_store: tuple[PostgresStore, str],
) -> None:
    store, dsn = pg_store
    workload, ids = _fill(store, 600)  # 1200 calls in the batch
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT reltuples FROM pg_class WHERE relname = 'profiles'").fetchone()
        assert row is not None and row[0] == 600
        plan = " ".join(
            r[0]
            for r in conn.execute(
                "EXPLAIN SELECT p.id FROM profiles p WHERE p.solution_id = %s "
                "AND p.workload_uuid = %s",
                (ids[3], workload),
            )
        )
    assert "Index Scan" in plan and "Seq Scan" not in plan, plan


def test_sqlite_ranks_a_big_and_a_rare_definition_each_the_fast_way(tmp_path: Path) -> None:
    """A big definition is ranked by walking the latency index until enough of its kernels
    came up, a rare one by reading its own few profiles (walking would pass over nearly every
    profile of the others); both give the fastest kernels, fastest first."""
    path = tmp_path / "k.db"
    latencies: dict[str, dict[str, float]] = {"big": {}, "rare": {}}
    with SqliteStore(path) as store:
        with store.batch():
            for name, count in (("big", 1500), ("rare", 20)):
                store.upsert_definition(make_definition(name))
                workload = store.upsert_workload(name, make_workload(name))
                for i in range(count):
                    sid = store.upsert_solution(make_solution(name, f"# {name} {i}\n"))
                    latency = 1.0 + ((i * 7919) % count) / count
                    store.upsert_profile(workload, sid, make_evaluation(latency_ms=latency), CONFIG)
                    latencies[name][sid] = latency
        plans = {}
        for name in latencies:
            ranked = store.best_solutions(name, limit=10)
            expected = sorted(latencies[name], key=latencies[name].__getitem__)[:10]
            assert [r.solution.id for r in ranked] == expected
            assert [r.profile.latency_ms for r in ranked] == sorted(
                latencies[name][sid] for sid in expected
            )
            ranking = _store_sql(
                store, lambda n=name: store.best_solutions(n, limit=10), "SELECT s.id AS s_id"
            )
            plans[name] = _plan(path, ranking, ())
    assert plans["big"].startswith("SEARCH p USING INDEX profiles_rank_idx"), plans["big"]
    assert plans["rare"].startswith("SEARCH s USING INDEX solutions_definition_idx"), plans["rare"]
