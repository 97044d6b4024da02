"""Databases made when one source belonged to one definition (solutions UNIQUE (solution_hash,
hash_version)) are brought up to per-definition uniqueness in place: every row and reference
kept, and the same source then stores once per definition. The old schemas are frozen copies
(tests/data/old_schemas), so the upgrade is tested from exactly what such databases hold."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from accelopt_mcp import hashing
from accelopt_mcp.store import _rows
from accelopt_mcp.store.base import KernelStore, StoreUnavailableError
from accelopt_mcp.store.postgres import PostgresStore
from accelopt_mcp.store.sqlite import SCHEMA_VERSION, SqliteStore
from tests.store.conftest import RECORD_TABLES
from tests.store.samples import make_definition, make_evaluation, make_solution, make_workload
from tests.test_cli import accelopt

OLD = Path(__file__).resolve().parents[1] / "data" / "old_schemas"
OLD_SQLITE = OLD / "sqlite_schema_v5.sql"
OLD_PG = OLD / "schema_v2_one_row_per_source.txt"
ROOT_ID = "00000000-0000-4000-8000-00000000000a"
CHILD_ID = "00000000-0000-4000-8000-00000000000b"
ELSEWHERE_ID = "00000000-0000-4000-8000-00000000000c"
PROFILE_ID = "00000000-0000-4000-8000-0000000000aa"
SHARED = "def kernel(x):\n    return x  # shape-generic\n"
OLD_TABLES = tuple(t for t in RECORD_TABLES if t != "suites")
"""The record tables an old database holds (suites came later, with version 7)."""


def _old_rows(execute: Callable[[str, tuple[Any, ...]], object], *, generated_keys: bool) -> None:
    """Rows of every kind an old database holds: two definitions, a root and its child (whose
    source is SHARED) under "d", another kernel under "e", a profile with its measurement, a
    run and a memory item naming the kernels, an LLM call and a run entry."""
    for name in ("d", "e"):
        doc = _rows.record_json(make_definition(name))
        if generated_keys:
            execute("INSERT INTO definitions (definition) VALUES (?)", (doc,))
        else:
            execute("INSERT INTO definitions (name, definition) VALUES (?, ?)", (name, doc))
    trace = _rows.workload_trace_json("d", make_workload("d", uuid_="w"))
    if generated_keys:
        execute("INSERT INTO workloads (definition_name, workload) VALUES ('d', ?)", (trace,))
    else:
        execute(
            "INSERT INTO workloads (uuid, definition_name, workload) VALUES ('w', 'd', ?)",
            (trace,),
        )
    kernels = (
        (ROOT_ID, "d", None, make_solution("d", "# root\n", name="root"), {"run_id": "r"}),
        (CHILD_ID, "d", ROOT_ID, make_solution("d", SHARED, name="child"), {"iteration": 1}),
        (ELSEWHERE_ID, "e", None, make_solution("e", "# e\n", name="e0", author="x"), {}),
    )
    for sid, definition, parent, solution, meta in kernels:
        execute(
            "INSERT INTO solutions (id, definition_name, parent_id, solution, solution_hash, "
            "evolve_metadata) VALUES (?, ?, ?, ?, ?, ?)",
            (
                sid,
                definition,
                parent,
                _rows.record_json(solution),
                hashing.solution_hash(solution),
                json.dumps(meta),
            ),
        )
    evaluation = _rows.record_json(make_evaluation(latency_ms=2.0))
    execute(
        "INSERT INTO profiles (id, workload_uuid, solution_id, evaluation, benchmark_config_hash) "
        "VALUES (?, 'w', ?, ?, 'cfg')",
        (PROFILE_ID, CHILD_ID, evaluation),
    )
    execute(
        "INSERT INTO measurements (id, profile_id, evaluation) VALUES (?, ?, ?)",
        ("00000000-0000-4000-8000-0000000000ab", PROFILE_ID, evaluation),
    )
    execute(
        "INSERT INTO runs (id, definition_name, initial_solution_id, best_solution_id) "
        "VALUES ('r', 'd', ?, ?)",
        (ROOT_ID, CHILD_ID),
    )
    execute(
        "INSERT INTO experiences (id, run_id, definition_name, slow_solution_id, "
        "fast_solution_id, title, strategy) VALUES ('x1', 'r', 'd', ?, ?, 'Tile', 'by rows')",
        (ROOT_ID, CHILD_ID),
    )
    execute(
        "INSERT INTO llm_calls (id, run_id, role, model) VALUES ('c1', 'r', 'planner', 'm')", ()
    )
    execute("INSERT INTO run_entries (run_id, kind, key) VALUES ('r', 'slot', '1/0/0/0')", ())


def _check_new_behaviour(store: KernelStore) -> None:
    """The migrated rows read back, lineage intact, and a second definition may now store the
    child's source as a solution of its own."""
    child = store.get_solution(CHILD_ID)
    assert child is not None and (child.parent_id, child.definition_name) == (ROOT_ID, "d")
    assert child.evolve_metadata == {"iteration": 1}
    assert [s.id for s in store.ancestors(CHILD_ID)] == [ROOT_ID]
    assert [s.id for s in store.descendants(ROOT_ID)] == [CHILD_ID]
    assert [s.id for s in store.list_solutions()] == [ROOT_ID, CHILD_ID, ELSEWHERE_ID]
    assert [s.id for s in store.list_solutions(run_id="r")] == [ROOT_ID]
    assert store.get_solution(ELSEWHERE_ID).author == "x"  # type: ignore[union-attr]
    assert [r.solution.id for r in store.best_solutions("d")] == [CHILD_ID]
    assert store.get_run("r").best_solution_id == CHILD_ID  # type: ignore[union-attr]
    assert store.recent_experiences(run_id="r", limit=5)[0].fast_solution_id == CHILD_ID
    assert len(store.list_measurements(PROFILE_ID)) == 1

    assert store.upsert_solution(make_solution("d", SHARED)) == CHILD_ID
    again = store.upsert_solution(
        make_solution("e", SHARED, name="generic"), parent_id=ELSEWHERE_ID
    )
    assert again != CHILD_ID
    assert store.find_solution("e", child.solution_hash).id == again  # type: ignore[union-attr]
    assert store.find_solution("d", child.solution_hash).id == CHILD_ID  # type: ignore[union-attr]
    assert [s.id for s in store.ancestors(again)] == [ELSEWHERE_ID]
    assert store.list_profiles(solution_id=again) == []


# --------------------------------------------------------------------------- SQLite


def _old_sqlite_file(path: Path) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.executescript(OLD_SQLITE.read_text("utf-8") + "\nPRAGMA user_version = 5;")
        _old_rows(conn.execute, generated_keys=False)
        conn.commit()
    finally:
        conn.close()


def _sqlite_snapshot(path: Path, columns: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """Every row of every table, rowid (insertion order) first, in the columns given (default:
    all of them, generated ones included)."""
    conn = sqlite3.connect(path)
    try:
        shot: dict[str, Any] = {}
        for table in OLD_TABLES:
            names = (columns or {}).get(table) or [
                r[1] for r in conn.execute(f"PRAGMA table_xinfo({table})")
            ]
            rows = conn.execute(f"SELECT rowid, {', '.join(names)} FROM {table} ORDER BY rowid")
            shot[table] = (names, rows.fetchall())
        return shot
    finally:
        conn.close()


def _solutions_sql(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'solutions'").fetchone()
        return str(row[0])
    finally:
        conn.close()


def test_sqlite_rebuilds_an_old_solutions_table_keeping_every_row(tmp_path: Path) -> None:
    path = tmp_path / "v5.db"
    _old_sqlite_file(path)
    before = _sqlite_snapshot(path)
    assert "UNIQUE (solution_hash, hash_version)" in _solutions_sql(path)

    with SqliteStore(path) as store:
        assert _rows.SOLUTIONS_PER_DEFINITION in store.schema_changes
        assert f"schema version 5 -> {SCHEMA_VERSION}" in store.schema_changes
        assert "added tables: suites" in store.schema_changes
        # Foreign keys were off for the rebuild only: the store's connection enforces them.
        assert store._connection().execute("PRAGMA foreign_keys").fetchone()[0] == 1
        # Every row, its rowid and its generated columns, exactly as before.
        after = _sqlite_snapshot(path, {t: names for t, (names, _) in before.items()})
        assert after == before
        _check_new_behaviour(store)
    with SqliteStore(path) as store:  # opening again rebuilds nothing
        assert store.schema_changes == []

    assert "UNIQUE (definition_name, solution_hash, hash_version)" in _solutions_sql(path)
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 7
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        indexes = {
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'solutions' "
                "AND sql IS NOT NULL"
            )
        }
        assert indexes == {"solutions_definition_idx", "solutions_parent_idx", "solutions_run_idx"}
        # The references of the other tables bind to the rebuilt table: its deletes act on them.
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("DELETE FROM solutions WHERE id = ?", (ROOT_ID,))
        assert conn.execute(
            "SELECT parent_id FROM solutions WHERE id = ?", (CHILD_ID,)
        ).fetchone() == (None,)
        assert conn.execute("SELECT initial_solution_id FROM runs").fetchone() == (None,)
        assert conn.execute("SELECT slow_solution_id FROM experiences").fetchone() == (None,)
        conn.execute("DELETE FROM solutions WHERE id = ?", (CHILD_ID,))
        assert conn.execute("SELECT count(*) FROM profiles").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM measurements").fetchone() == (0,)
        conn.rollback()
    finally:
        conn.close()


def test_sqlite_leaves_an_old_file_with_a_broken_reference_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "v5.db"
    _old_sqlite_file(path)
    conn = sqlite3.connect(path)  # foreign keys are off in a plain connection
    conn.execute(
        "INSERT INTO profiles (id, workload_uuid, solution_id, evaluation, benchmark_config_hash) "
        "VALUES ('p-ghost', 'w', '00000000-0000-4000-8000-0000000000ff', '{}', 'cfg')"
    )
    conn.commit()
    conn.close()
    before = _sqlite_snapshot(path)
    with pytest.raises(StoreUnavailableError, match="refer to records that are not stored") as e:
        SqliteStore(path)
    assert "profiles" in str(e.value) and "left as it was" in str(e.value)
    assert _sqlite_snapshot(path) == before
    assert "UNIQUE (solution_hash, hash_version)" in _solutions_sql(path)
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 5
        assert "solutions_v6" not in {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()


def test_db_init_says_what_it_changed_in_an_old_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "v5.db"
    _old_sqlite_file(path)
    first = accelopt("db", "init", "--store", str(path))
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert f"  {_rows.SOLUTIONS_PER_DEFINITION}" in lines
    assert f"  schema version 5 -> {SCHEMA_VERSION}" in lines
    assert lines[-1] == "schema ready (sqlite)"
    second = accelopt("db", "init", "--store", str(path))
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines() == ["schema ready (sqlite); it was up to date"]
    fresh = accelopt("db", "init", "--store", str(tmp_path / "new.db"))
    assert fresh.stdout.splitlines() == [
        f"  created the schema (version {SCHEMA_VERSION})",
        "schema ready (sqlite)",
    ]


# --------------------------------------------------------------------------- PostgreSQL

_ORDER = {"definitions": "name", "workloads": "uuid", "run_entries": "key"}


def _pg_snapshot(dsn: str, columns: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """Every row of every table as text, in the columns given (default: all of them, identity
    `seq` and generated ones included), and the foreign keys that refer to solutions."""
    with psycopg.connect(dsn) as conn:
        shot: dict[str, Any] = {}
        for table in OLD_TABLES:
            names = (columns or {}).get(table) or [
                r[0]
                for r in conn.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                    "AND table_schema = 'public' ORDER BY ordinal_position",
                    (table,),
                )
            ]
            order = _ORDER.get(table, "id")
            listed = ", ".join(f"{n}::text" for n in names)
            rows = conn.execute(f"SELECT {listed} FROM {table} ORDER BY {order}").fetchall()
            shot[table] = (names, rows)
        references = conn.execute(
            "SELECT conrelid::regclass::text, conname FROM pg_constraint "
            "WHERE contype = 'f' AND confrelid = 'solutions'::regclass ORDER BY 1, 2"
        ).fetchall()
        return {"rows": shot, "references": references}


def _pg_unique_keys(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return [
            r[0]
            for r in conn.execute(
                "SELECT conname FROM pg_constraint WHERE conrelid = 'solutions'::regclass "
                "AND contype = 'u' ORDER BY conname"
            )
        ]


@pytest.mark.postgres
def test_applying_the_schema_again_widens_an_old_solutions_key(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(OLD_PG.read_text("utf-8"))

        def execute(sql: str, params: tuple[Any, ...]) -> object:
            return conn.execute(sql.replace("?", "%s"), params)

        _old_rows(execute, generated_keys=True)
    before = _pg_snapshot(pg_dsn)
    assert _pg_unique_keys(pg_dsn) == ["solutions_hash_key"]

    with pytest.raises(StoreUnavailableError, match=r"older than this accelopt") as caught:
        PostgresStore(pg_dsn)
    assert "solutions unique per definition" in str(caught.value)
    assert "suites" in str(caught.value)
    assert "schema_v2.txt again" in str(caught.value)

    # `accelopt db init` applies it and says what it changed.
    done = accelopt("db", "init", "--store", pg_dsn)
    assert done.returncode == 0, done.stderr
    assert f"  {_rows.SOLUTIONS_PER_DEFINITION}" in done.stdout.splitlines()
    assert "  added tables: suites" in done.stdout.splitlines()
    assert done.stdout.splitlines()[-1] == "schema ready (postgres)"

    assert _pg_unique_keys(pg_dsn) == ["solutions_definition_hash_key"]
    columns = {table: names for table, (names, _) in before["rows"].items()}
    assert _pg_snapshot(pg_dsn, columns) == before
    with PostgresStore(pg_dsn) as store:
        _check_new_behaviour(store)
    with PostgresStore(pg_dsn, init_schema=True) as store:  # applying it again changes nothing
        assert store.schema_changes == []
    again = accelopt("db", "init", "--store", pg_dsn)
    assert again.stdout.splitlines() == ["schema ready (postgres); it was up to date"]
