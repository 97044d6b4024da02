"""schema_v2.txt is plain SQL that psql applies cleanly, twice, and that the stores agree with."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from accelopt_mcp import hashing
from accelopt_mcp.models import LlmCallIn, LlmMessage
from accelopt_mcp.models.evaluation import INFORMATIONAL_FLAGS, UNTRUSTED_FLAGS
from accelopt_mcp.store import _rows
from accelopt_mcp.store.base import (
    ExperienceIn,
    KernelStore,
    RunRecord,
    StoreUnavailableError,
    SuiteRecord,
)
from accelopt_mcp.store.postgres import (
    PostgresStore,
    behind_transaction_pooler,
    mask_dsn,
    schema_v2,
)
from accelopt_mcp.store.sqlite import (
    SCHEMA_VERSION,
    SqliteStore,
    added_column_sql,
    sqlite_schema,
    table_column_sql,
)
from tests.store.conftest import RECORD_TABLES, SCHEMA_TABLES, serve_older_schema
from tests.store.samples import (
    make_definition,
    make_evaluation,
    make_solution,
    make_workload,
    without_row_level_security,
)

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "schema_v2.txt"
OLD_SQLITE_V5 = ROOT / "tests" / "data" / "old_schemas" / "sqlite_schema_v5.sql"
OLD_SQLITE_V6 = ROOT / "tests" / "data" / "old_schemas" / "sqlite_schema_v6.sql"


def _psql() -> str:
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin/psql"), reverse=True):
        return str(candidate)
    found = shutil.which("psql")
    if found is None:
        pytest.fail("psql not found: apt-get install -y postgresql-client (scripts/test.sh does)")
    return found


def test_package_copy_is_identical() -> None:
    assert schema_v2() == SCHEMA.read_text("utf-8")


@pytest.mark.postgres
def test_psql_applies_schema_twice(pg_dsn: str) -> None:
    for attempt in (1, 2):
        done = subprocess.run(
            [_psql(), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", str(SCHEMA), pg_dsn],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, f"attempt {attempt}: {done.stderr}"
        assert "ERROR" not in done.stderr
    with psycopg.connect(pg_dsn) as conn:
        tables = {
            r[0]
            for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        }
        views = {
            r[0] for r in conn.execute("SELECT viewname FROM pg_views WHERE schemaname = 'public'")
        }
        functions = {
            r[0]
            for r in conn.execute("SELECT proname FROM pg_proc WHERE proname LIKE 'solution_%'")
        }
        search = conn.execute("SELECT to_regprocedure('search_experiences(text[])')").fetchone()
    assert tables == set(SCHEMA_TABLES)
    assert "solution_profiles" in views
    assert {"solution_ancestors", "solution_descendants"} <= functions
    assert search is not None and search[0] is not None
    # A store opened without init finds the schema psql applied.
    with PostgresStore(pg_dsn) as store:
        assert store.stats().counts == dict.fromkeys(RECORD_TABLES, 0)


@pytest.mark.postgres
def test_view_and_functions_agree_with_the_store(pg_dsn: str) -> None:
    with PostgresStore(pg_dsn, init_schema=True) as store:
        store.upsert_definition(make_definition("d"))
        store.upsert_workload("d", make_workload("d", uuid_="w"))
        root = store.upsert_solution(make_solution("d", "# 0\n"), evolve_metadata={"run_id": "r"})
        child = store.upsert_solution(make_solution("d", "# 1\n"), parent_id=root)
        pid = store.upsert_profile("w", child, make_evaluation(latency_ms=2.0), {})
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute(
            "SELECT id::text, definition_name, run_id, spec_language, latency_ms, speedup "
            "FROM solution_profiles"
        ).fetchone()
        assert row == (pid, "d", None, "python", 2.0, 1.0)
        up = conn.execute("SELECT id::text FROM solution_ancestors(%s)", (child,)).fetchall()
        down = conn.execute("SELECT id::text FROM solution_descendants(%s)", (root,)).fetchall()
        assert (up, down) == ([(root,)], [(child,)])


@pytest.mark.postgres
def test_deleting_a_definition_cascades(pg_dsn: str) -> None:
    with PostgresStore(pg_dsn, init_schema=True) as store:
        _fill(store)
    with psycopg.connect(pg_dsn) as conn:
        conn.execute("DELETE FROM solutions WHERE parent_id IS NULL")
        assert conn.execute("SELECT parent_id FROM solutions").fetchall() == [(None,)]
        conn.execute("DELETE FROM definitions")
        counts = [
            conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in sorted(SCHEMA_TABLES)
        ]
    assert counts == [0] * len(SCHEMA_TABLES)


def test_sqlite_deleting_a_definition_cascades(tmp_path: Path) -> None:
    path = tmp_path / "k.db"
    with SqliteStore(path) as store:
        _fill(store)
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("DELETE FROM solutions WHERE parent_id IS NULL")
        assert conn.execute("SELECT parent_id FROM solutions").fetchall() == [(None,)]
        conn.execute("DELETE FROM definitions")
        counts = [
            conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in sorted(SCHEMA_TABLES)
        ]
        conn.commit()
    finally:
        conn.close()
    assert counts == [0] * len(SCHEMA_TABLES)


def _fill(store: PostgresStore | SqliteStore) -> None:
    """A definition with a workload, a parent and child kernel, a profile, a run, an LLM call."""
    store.upsert_definition(make_definition("d"))
    store.upsert_workload("d", make_workload("d", uuid_="w"))
    root = store.upsert_solution(make_solution("d", "# 0\n"))
    store.upsert_solution(make_solution("d", "# 1\n"), parent_id=root)
    store.upsert_profile("w", root, make_evaluation(), {})
    store.create_run(RunRecord(id="r", definition_name="d", initial_solution_id=root))
    store.add_llm_call(LlmCallIn(run_id="r", role="planner", model="m"))
    store.put_run_entry("r", "slot", "1/0/0/0", {"status": "ok"})


# --------------------------------------------------------------------------- opening errors


@pytest.mark.postgres
def test_missing_schema_says_how_to_apply_it(pg_dsn: str) -> None:
    with pytest.raises(StoreUnavailableError, match=r"schema_v2\.txt") as caught:
        PostgresStore(pg_dsn)
    assert "accelopt db init" in str(caught.value)


@pytest.mark.postgres
def test_missing_database_is_named(pg_admin_dsn: str) -> None:
    dsn = pg_admin_dsn.rsplit("/", 1)[0] + "/no_such_db"
    with pytest.raises(StoreUnavailableError, match="does not exist") as caught:
        PostgresStore(dsn)
    assert "no_such_db" in str(caught.value)


def test_unreachable_server_fails_fast_without_the_password() -> None:
    import socket
    import time

    with socket.socket() as sock:  # a port that nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dsn = f"postgresql://alice:s3cret-pw@127.0.0.1:{port}/kernels"
    began = time.monotonic()
    with pytest.raises(StoreUnavailableError, match="not reachable") as caught:
        PostgresStore(dsn)
    assert time.monotonic() - began < 10
    assert "s3cret-pw" not in str(caught.value)
    assert f"alice@127.0.0.1:{port}/kernels" in str(caught.value)
    # libpq indents its hint line with a tab: one clear line keeps none of that.
    assert "\t" not in str(caught.value) and "( " not in str(caught.value), str(caught.value)


def test_mask_dsn_drops_the_password() -> None:
    assert mask_dsn("postgresql://u:pw@h:6543/db?sslmode=require") == "postgresql://u@h:6543/db"
    assert mask_dsn("host=h user=u password=pw dbname=db") == "postgresql://u@h:5432/db"
    assert "pw" not in mask_dsn("postgresql://u:pw@[bad")


@pytest.mark.postgres
def test_rejected_password_is_named_without_echoing_it() -> None:
    from tests.pg_server import PostgresServer

    server = PostgresServer()  # its own server: the shared one trusts every login
    admin = server.start()
    try:
        (server.data / "pg_hba.conf").write_text(
            "host all postgres 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n"
        )
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("CREATE ROLE alice LOGIN PASSWORD 'right-pw'")
            conn.execute("SELECT pg_reload_conf()")
        base = admin.split("@", 1)[1].rsplit("/", 1)[0]
        with pytest.raises(StoreUnavailableError, match="rejected the login") as caught:
            PostgresStore(f"postgresql://alice:wrong-pw-123@{base}/postgres")
        assert "wrong-pw-123" not in str(caught.value)
        assert "alice@" in str(caught.value)
        # The right password gets as far as the schema check.
        with pytest.raises(StoreUnavailableError, match="schema is not applied"):
            PostgresStore(f"postgresql://alice:right-pw@{base}/postgres")
    finally:
        server.stop()


def test_sqlite_refuses_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("these are not the pages of a database\n" * 200)
    with pytest.raises(StoreUnavailableError, match=r"notes\.db"):
        SqliteStore(path)


def test_a_sqlite_database_this_user_cannot_write_says_so(tmp_path: Path) -> None:
    # Root writes through file modes, so the file is made immutable (ext4's `i` attribute),
    # which holds for root too; where the filesystem has no such attribute, nothing to check.
    path = tmp_path / "k.db"
    SqliteStore(path).close()
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i does not work on this filesystem")
    try:
        with pytest.raises(StoreUnavailableError) as caught:
            SqliteStore(path)
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)
    message = str(caught.value)
    assert "this user may not write the file or its folder" in message
    assert "written by accelopt" not in message  # not a wrong file: a read-only one


def test_sqlite_leaves_another_programs_database_alone(tmp_path: Path) -> None:
    # A --store typo that names another program's SQLite file must not write our schema (and
    # our user_version, which that program may count its own migrations by) into it.
    path = tmp_path / "contacts.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER, name TEXT)")
        conn.execute("PRAGMA user_version = 3")
    with pytest.raises(StoreUnavailableError, match=r"contacts\.db.*another program.*customers"):
        SqliteStore(path)
    with sqlite3.connect(path) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        assert tables == ["customers"]
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 3
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()  # a SQLite file with nothing in it yet is ours to fill
    with SqliteStore(empty) as store:
        assert store.list_definitions() == []


def test_sqlite_creates_missing_folders_and_reopens(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "k.db"
    with SqliteStore(path) as store:
        store.upsert_definition(make_definition("d"))
    with SqliteStore(path) as store:
        assert [d.name for d in store.list_definitions()] == ["d"]
        assert store.stats().location == str(path)


def test_sqlite_in_memory_is_private_and_thread_safe() -> None:
    from concurrent.futures import ThreadPoolExecutor

    with SqliteStore(":memory:") as store, SqliteStore(":memory:") as other:
        store.upsert_definition(make_definition("d"))

        def add(i: int) -> str:
            return store.upsert_solution(make_solution("d", f"# {i % 10}\n"))

        with ThreadPoolExecutor(8) as pool:
            ids = list(pool.map(add, range(80)))
        assert len(set(ids)) == 10
        assert store.stats().counts["solutions"] == 10
        assert other.stats().counts["definitions"] == 0


def test_transaction_pooler_is_recognised() -> None:
    pooler = "postgresql://postgres.ref:pw@aws-0-eu-west-1.pooler.supabase.com:6543/postgres"
    assert behind_transaction_pooler(pooler)
    assert behind_transaction_pooler("host=10.0.0.5 port=6543 dbname=k")
    assert not behind_transaction_pooler(
        "postgresql://postgres:pw@db.ref.supabase.co:5432/postgres"
    )


# --------------------------------------------------------------------------- profiles.trusted


def _sql_flag_lists() -> dict[str, set[str]]:
    """The informational flags each schema spells out for its `trusted` column."""
    pg = SCHEMA.read_text("utf-8")
    pg_list = re.search(r"<@ '(\[[^']*\])'::jsonb", pg)
    assert pg_list is not None
    lite = added_column_sql(sqlite_schema(), "trusted")
    return {
        "schema_v2.txt": set(json.loads(pg_list.group(1))),
        "sqlite_schema.sql": set(re.findall(r"'\"([a-z_]+)\"'", lite)),
    }


def test_the_schemas_know_the_informational_flags_of_the_records() -> None:
    for name, flags in _sql_flag_lists().items():
        assert flags == INFORMATIONAL_FLAGS, name
    assert not INFORMATIONAL_FLAGS & UNTRUSTED_FLAGS


def _without_trusted_sqlite() -> str:
    """sqlite_schema.sql as it was before profiles.trusted."""
    schema = sqlite_schema()
    column = added_column_sql(schema, "trusted")
    old = re.sub(r"\n *-- 1 unless a flag says.*?\n(?= *trusted)", "\n", schema, flags=re.S)
    old = old.replace(column + ",", "")
    assert "trusted" not in old
    return old


def _old_rows(execute: Callable[[str, tuple[Any, ...]], object]) -> dict[str, str]:
    """A definition, a workload and three profiled solutions written as an older accelopt
    wrote them (plain INSERTs, no trusted column): name -> solution id."""
    execute(
        "INSERT INTO definitions (name, definition) VALUES (?, ?)",
        ("d", _rows.record_json(make_definition("d"))),
    )
    execute(
        "INSERT INTO workloads (uuid, definition_name, workload) VALUES (?, ?, ?)",
        ("w", "d", _rows.workload_trace_json("d", make_workload("d", uuid_="w"))),
    )
    ids = {}
    for i, (name, flags) in enumerate(
        (("honest", ["noisy_timing"]), ("cheat", ["above_peak"]), ("plain", []))
    ):
        solution = make_solution("d", f"# {name}\n")
        sid = ids[name] = _rows.new_uuid()
        execute(
            "INSERT INTO solutions (id, definition_name, solution, hash_version, solution_hash) "
            "VALUES (?, ?, ?, 1, ?)",
            (sid, "d", _rows.record_json(solution), hashing.solution_hash(solution)),
        )
        evaluation = make_evaluation(latency_ms=1.0 + 2 * (i % 2 == 0) + i)
        if flags:
            evaluation = evaluation.model_copy(update={"flags": flags})
        execute(
            "INSERT INTO profiles (id, workload_uuid, solution_id, evaluation, "
            "benchmark_config_hash) VALUES (?, ?, ?, ?, ?)",
            (_rows.new_uuid(), "w", sid, _rows.record_json(evaluation), "cfg"),
        )
    return ids


def _check_migrated(store: KernelStore, ids: dict[str, str]) -> None:
    # honest 3.0 ms, cheat 2.0 ms (above_peak), plain 5.0 ms
    assert [r.solution.id for r in store.best_solutions("d")] == [ids["honest"], ids["plain"]]
    flagged = store.best_solutions("d", include_flagged=True)
    assert [r.solution.id for r in flagged] == [ids["cheat"], ids["honest"], ids["plain"]]
    assert [r.profile.trusted for r in flagged] == [False, True, True]


def test_sqlite_adds_trusted_to_an_older_file(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.executescript(_without_trusted_sqlite() + "\nPRAGMA user_version = 2;")
    ids = _old_rows(conn.execute)
    conn.commit()
    conn.close()
    with SqliteStore(path) as store:
        _check_migrated(store, ids)
    with SqliteStore(path) as store:  # reopening changes nothing
        _check_migrated(store, ids)
    conn = sqlite3.connect(path)
    try:
        columns = [r[1] for r in conn.execute("PRAGMA table_xinfo(profiles)")]
        assert columns.count("trusted") == 1
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        conn.close()


def _without_trusted_pg() -> str:
    """schema_v2.txt as it was before profiles.trusted."""
    schema = SCHEMA.read_text("utf-8")
    old = re.sub(r"\n-- False when the evaluation carries.*?\) STORED;\n", "\n", schema, flags=re.S)
    old = re.sub(r"s\.spec_language,\n.*?p\.trusted\n", "s.spec_language\n", old, flags=re.S)
    # The ranking function came later still, and ranks by it.
    old = re.sub(r"\n-- Ranking a definition's solutions.*?\$\$;\n", "\n", old, flags=re.S)
    old = old.replace(
        "    -- trusted: added below, so that re-applying this file adds it to an "
        "older database.\n",
        "",
    )
    assert "trusted" not in old
    return old


@pytest.mark.postgres
def test_reapplying_the_schema_adds_trusted_to_an_older_database(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(_without_trusted_pg())

        def execute(sql: str, params: tuple[Any, ...]) -> object:
            if sql.startswith(("INSERT INTO definitions", "INSERT INTO workloads")):
                # Their keys are generated from the JSON in PostgreSQL.
                sql = sql.replace("(name, definition) VALUES (?, ?)", "(definition) VALUES (?)")
                sql = sql.replace(
                    "(uuid, definition_name, workload) VALUES (?, ?, ?)",
                    "(definition_name, workload) VALUES (?, ?)",
                )
                params = params[1:]
            return conn.execute(sql.replace("?", "%s"), params)

        ids = _old_rows(execute)
    with pytest.raises(StoreUnavailableError, match=r"older than this accelopt") as caught:
        PostgresStore(pg_dsn)
    assert "profiles.trusted" in str(caught.value) and "schema_v2.txt" in str(caught.value)
    with PostgresStore(pg_dsn, init_schema=True) as store:  # `accelopt db init` does this
        _check_migrated(store, ids)
    with PostgresStore(pg_dsn) as store:
        _check_migrated(store, ids)
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute("SELECT count(*) FILTER (WHERE trusted) FROM solution_profiles")
        assert row.fetchone() == (2,)


# --------------------------------------------------------------------------- the audit trail

_LLM_CALLS = re.compile(r"CREATE TABLE IF NOT EXISTS llm_calls \(.*?\n\);", re.S)


def _llm_calls_v3() -> str:
    """The llm_calls table as version 3 made it: the frozen version 5 one (tests/data/
    old_schemas) without the columns from `status` on, which came with version 4."""
    found = _LLM_CALLS.search(OLD_SQLITE_V5.read_text())
    assert found is not None
    columns, _, _ = found.group(0).partition(",\n    status ")
    return columns + "\n);"


def _v3_sqlite() -> str:
    """sqlite_schema.sql as it was at version 3: no audit columns, no run_entries."""
    schema = sqlite_schema()
    old = _LLM_CALLS.sub(lambda _: _llm_calls_v3(), schema)
    old = re.sub(r"\n-- A run's state in small rows.*?\n\);\n", "\n", old, flags=re.S)
    assert "run_entries" not in old and "BLOB" not in old
    return old


_OLD_CALLS = (
    ("c-ok", "planner", 100, 1, None),
    ("c-failed", "executor", 0, 0, "HTTP 500"),
)


def _check_audit_migrated(store: KernelStore) -> None:
    listed = {c.id: c for c in store.list_llm_calls("r")}
    assert (listed["c-ok"].status, listed["c-ok"].tokens_in) == ("ok", 100)
    assert (listed["c-failed"].status, listed["c-failed"].error) == ("failed", "HTTP 500")
    assert store.get_llm_call("c-ok").messages is None  # type: ignore[union-attr]
    assert {t.role: t.failed for t in store.llm_totals("r")} == {"executor": 1, "planner": 0}
    new = store.add_llm_call(
        LlmCallIn(
            run_id="r",
            role="planner",
            model="m",
            status="in_flight",
            purpose="plan 1/0",
            messages=[LlmMessage(role="user", content="hello")],
        )
    )
    assert store.get_llm_call(new).messages[0].content == "hello"  # type: ignore[union-attr]
    store.put_run_entry("r", "slot", "1/0/0/0", {"status": "ok"})
    assert [e.key for e in store.run_entries("r")] == ["1/0/0/0"]


def test_sqlite_brings_a_version_3_file_up_to_date(tmp_path: Path) -> None:
    path = tmp_path / "v3.db"
    conn = sqlite3.connect(path)
    conn.executescript(_v3_sqlite() + "\nPRAGMA user_version = 3;")
    conn.execute(
        "INSERT INTO definitions (name, definition) VALUES (?, ?)",
        ("d", _rows.record_json(make_definition("d"))),
    )
    conn.execute("INSERT INTO runs (id, definition_name) VALUES ('r', 'd')")
    for call_id, role, tokens, ok, error in _OLD_CALLS:
        conn.execute(
            "INSERT INTO llm_calls (id, run_id, role, model, tokens_in, ok, error) "
            "VALUES (?, 'r', ?, 'm', ?, ?, ?)",
            (call_id, role, tokens, ok, error),
        )
    conn.commit()
    conn.close()
    with SqliteStore(path) as store:
        _check_audit_migrated(store)
    with SqliteStore(path) as store:  # reopening changes nothing
        assert len(store.list_llm_calls("r")) == 3
    conn = sqlite3.connect(path)
    try:
        columns = [r[1] for r in conn.execute("PRAGMA table_xinfo(llm_calls)")]
        assert columns.count("messages") == 1 and "status" in columns
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 7
    finally:
        conn.close()


def test_every_added_sqlite_column_is_defined_in_the_schema() -> None:
    schema = sqlite_schema()
    status = table_column_sql(schema, "llm_calls", "status")
    assert status == "status      TEXT NOT NULL DEFAULT 'ok'"
    assert table_column_sql(schema, "llm_calls", "messages") == "messages    BLOB"
    with pytest.raises(RuntimeError, match="no column"):
        table_column_sql(schema, "llm_calls", "nope")


def _cut(schema: str, *sections: str) -> str:
    """`schema` without each of `sections`: patterns from a newline to a newline, matched
    across lines (what a later version added)."""
    for section in sections:
        schema = re.sub(section, "\n", schema, flags=re.S)
    return schema


def _pg_schema() -> str:
    """schema_v2.txt without its row level security section (which came later than any of
    what these tests cut)."""
    return without_row_level_security(SCHEMA.read_text("utf-8"))


def _before_audit_trail_pg() -> str:
    """schema_v2.txt as it was before the audit trail and run_entries."""
    old = _cut(
        _pg_schema(),
        r"\n-- The audit trail, added here.*?status = 'ok';\n",
        r"\n-- -+ run_entries\n.*?EXECUTE FUNCTION runs_touch_updated_at\(\);\n",
    )
    assert "run_entries" not in old and "BYTEA" not in old
    return old


@pytest.mark.postgres
def test_reapplying_the_schema_adds_the_audit_trail(
    pg_dsn: str, request: pytest.FixtureRequest
) -> None:
    from accelopt_mcp.store.supabase import SupabaseStore

    rows: list[tuple[str, tuple[Any, ...]]] = [
        (
            "INSERT INTO definitions (definition) VALUES (%s)",
            (_rows.record_json(make_definition("d")),),
        ),
        ("INSERT INTO runs (id, definition_name) VALUES ('r', 'd')", ()),
    ]
    for call_id, role, tokens, ok, error in _OLD_CALLS:
        rows.append(
            (
                "INSERT INTO llm_calls (id, run_id, role, model, tokens_in, ok, error) "
                "VALUES (%s, 'r', %s, 'm', %s, %s, %s)",
                (call_id, role, tokens, bool(ok), error),
            )
        )
    # The stand-in loads its schema cache before the new columns exist.
    running = serve_older_schema(
        pg_dsn, request, _before_audit_trail_pg(), rows, ["llm_calls.messages", "run_entries"]
    )
    with PostgresStore(pg_dsn, init_schema=True) as store:
        _check_audit_migrated(store)
    with PostgresStore(pg_dsn, init_schema=True) as store:  # applying it again changes nothing
        assert len(store.list_llm_calls("r")) == 3
    # The stand-in learns the new columns and table without a restart, as PostgREST does
    # after a schema reload.
    with SupabaseStore(running.url, key=running.key) as remote:
        remote.put_run_entry("r", "slot", "1/0/0/1", {"status": "failed"})
        call = remote.get_llm_call(remote.list_llm_calls("r")[-1].id)
        assert call is not None and call.messages is not None
        assert [e.key for e in remote.run_entries("r")] == ["1/0/0/0", "1/0/0/1"]


# --------------------------------------------------------------------------- word search, peaks

_OLD_ITEMS = (
    ("e-far", "Tile the matrix", "each thread owns a band of rows; later the GEMM panel fits"),
    ("e-gemm", "GEMM in float32", "avoid float64 temporaries"),
)


def _v4_sqlite() -> str:
    """sqlite_schema.sql as it was at version 4: no word search, no hardware_peaks."""
    old = _cut(
        sqlite_schema(),
        r"\n-- Word search over the memory.*?experiences_fts_update.*?END;\n",
        r"\n-- Peak rates measured on a host.*?\n\);\n",
    )
    assert "experiences_fts" not in old and "hardware_peaks" not in old
    return old


def _check_search_migrated(store: KernelStore) -> None:
    # Both words first, then the item holding one of them.
    assert [e.id for e in store.search_experiences(text="GEMM thread")] == ["e-far", "e-gemm"]
    assert [e.id for e in store.search_experiences(text="float32")] == ["e-gemm"]
    store.put_hardware_peaks("cpu/x", {"fp32_gflops": 1.0})
    assert store.get_hardware_peaks("cpu/x").peaks == {"fp32_gflops": 1.0}  # type: ignore[union-attr]


def test_sqlite_brings_a_version_4_file_up_to_date(tmp_path: Path) -> None:
    path = tmp_path / "v4.db"
    conn = sqlite3.connect(path)
    conn.executescript(_v4_sqlite() + "\nPRAGMA user_version = 4;")
    conn.executemany(
        "INSERT INTO experiences (id, definition_name, title, strategy) VALUES (?, 'd', ?, ?)",
        _OLD_ITEMS,
    )
    conn.commit()
    conn.close()
    with SqliteStore(path) as store:
        _check_search_migrated(store)
    with SqliteStore(path) as store:  # reopening indexes nothing twice
        assert [e.id for e in store.search_experiences(text="gemm")] == ["e-gemm", "e-far"]
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("SELECT count(*) FROM experiences_fts").fetchone() == (2,)
        # The triggers keep the index in step with edits made outside the store too.
        conn.execute("UPDATE experiences SET title = 'Vectorize' WHERE id = 'e-gemm'")
        conn.execute("DELETE FROM experiences WHERE id = 'e-far'")
        conn.commit()
        assert conn.execute("SELECT id, title FROM experiences_fts").fetchall() == [
            ("e-gemm", "Vectorize")
        ]
    finally:
        conn.close()
    with SqliteStore(path) as store:
        assert [e.id for e in store.search_experiences(text="vectorize temporaries")] == ["e-gemm"]
        assert store.search_experiences(text="GEMM") == []


def _before_search_pg() -> str:
    """schema_v2.txt as it was before word search and hardware_peaks."""
    old = _cut(
        _pg_schema(),
        r"\n-- Word search \(accelopt_mcp.*?\$\$;\n",
        r"\n-- -+ hardware_peaks\n.*?EXECUTE FUNCTION hardware_peaks_touch_measured_at\(\);\n",
    )
    assert "search" not in old and "hardware_peaks" not in old and "tsvector" not in old
    return old


@pytest.mark.postgres
def test_reapplying_the_schema_adds_word_search_and_peaks(
    pg_dsn: str, request: pytest.FixtureRequest
) -> None:
    from accelopt_mcp.store.supabase import SupabaseStore

    rows = [
        (
            "INSERT INTO experiences (id, definition_name, title, strategy) "
            "VALUES (%s, 'd', %s, %s)",
            item,
        )
        for item in _OLD_ITEMS
    ]
    # The stand-in's schema cache predates the new objects.
    missing = ["experiences.search_vector", "hardware_peaks", "search_experiences()"]
    running = serve_older_schema(pg_dsn, request, _before_search_pg(), rows, missing)
    with PostgresStore(pg_dsn, init_schema=True) as store:
        _check_search_migrated(store)
    with SupabaseStore(running.url, key=running.key) as remote:
        found = [e.id for e in remote.search_experiences(text="thread GEMM")]
        assert found == ["e-far", "e-gemm"]
        assert remote.get_hardware_peaks("cpu/x").peaks == {"fp32_gflops": 1.0}  # type: ignore[union-attr]


@pytest.mark.postgres
def test_a_search_function_that_wants_every_word_is_replaced(pg_dsn: str) -> None:
    # A database whose search_experiences is the older one, which wanted every word: it
    # answers, but not as this accelopt expects, so it is named and `db init` replaces it.
    with PostgresStore(pg_dsn, init_schema=True) as store:
        store.upsert_definition(make_definition("d"))
        for title in ("GEMM threads", "GEMM in float32"):
            store.add_experience(ExperienceIn(definition_name="d", title=title, strategy="s"))
    current = SCHEMA.read_text("utf-8")
    body = re.search(r"CREATE OR REPLACE FUNCTION search_experiences.*?\$\$;", current, re.S)
    assert body is not None and "' | '" in body.group(0)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(body.group(0).replace("' | '", "' & '"))
    with pytest.raises(StoreUnavailableError, match=r"older than this accelopt") as caught:
        PostgresStore(pg_dsn)
    assert "search_experiences() ranking partial matches" in str(caught.value)
    with PostgresStore(pg_dsn, init_schema=True) as store:  # `accelopt db init` does this
        assert any("memory search" in change for change in store.schema_changes)
        found = [e.title for e in store.search_experiences(text="GEMM thread")]
        assert found == ["GEMM threads", "GEMM in float32"]


# --------------------------------------------------------------------------- suites

_OLD_SUITE_ID = "5a17e000-0000-4000-8000-0000000000aa"


def _check_suites_added(store: KernelStore) -> None:
    """The older database's rows are there, and suites can be stored beside them."""
    assert store.get_run("r").definition_name == "d"  # type: ignore[union-attr]
    assert store.list_suites() == []
    stored = store.put_suite(
        SuiteRecord(
            id=_OLD_SUITE_ID,
            name="cpu-nkibench",
            source="builtin:cpu-nkibench",
            backend="cpu",
            status="running",
            spec={"cases": [{"task": "t", "run_id": "r"}]},
        )
    )
    assert store.get_suite(_OLD_SUITE_ID[:8]) == stored
    assert store.stats().counts["suites"] == 1


def test_sqlite_brings_a_version_6_file_up_to_date(tmp_path: Path) -> None:
    path = tmp_path / "v6.db"
    conn = sqlite3.connect(path)
    conn.executescript(OLD_SQLITE_V6.read_text("utf-8") + "\nPRAGMA user_version = 6;")
    conn.execute(
        "INSERT INTO definitions (name, definition) VALUES (?, ?)",
        ("d", _rows.record_json(make_definition("d"))),
    )
    conn.execute("INSERT INTO runs (id, definition_name) VALUES ('r', 'd')")
    conn.commit()
    conn.close()
    with SqliteStore(path) as store:
        assert store.schema_changes == [
            f"schema version 6 -> {SCHEMA_VERSION}",
            "added tables: suites",
            "added indexes: suites_created_idx",
        ]
        _check_suites_added(store)
    with SqliteStore(path) as store:  # reopening changes nothing
        assert store.schema_changes == []
        assert [s.id for s in store.list_suites()] == [_OLD_SUITE_ID]
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 7
    finally:
        conn.close()


def _before_suites_pg() -> str:
    """schema_v2.txt as it was before suites."""
    old = _cut(_pg_schema(), r"\n-- -+ suites\n.*?EXECUTE FUNCTION runs_touch_updated_at\(\);\n")
    assert "suites" not in old
    return old


@pytest.mark.postgres
def test_reapplying_the_schema_adds_suites(pg_dsn: str, request: pytest.FixtureRequest) -> None:
    from accelopt_mcp.store.supabase import SupabaseStore

    rows: list[tuple[str, tuple[Any, ...]]] = [
        (
            "INSERT INTO definitions (definition) VALUES (%s)",
            (_rows.record_json(make_definition("d")),),
        ),
        ("INSERT INTO runs (id, definition_name) VALUES ('r', 'd')", ()),
    ]
    # The stand-in's schema cache predates the table.
    running = serve_older_schema(pg_dsn, request, _before_suites_pg(), rows, ["suites"])
    with PostgresStore(pg_dsn, init_schema=True) as store:
        assert "added tables: suites" in store.schema_changes
        _check_suites_added(store)
    with PostgresStore(pg_dsn, init_schema=True) as store:  # applying it again changes nothing
        assert store.schema_changes == []
    with SupabaseStore(running.url, key=running.key) as remote:
        stored = remote.get_suite(_OLD_SUITE_ID)
        assert stored is not None and stored.spec == {"cases": [{"task": "t", "run_id": "r"}]}
        again = remote.put_suite(stored.model_copy(update={"status": "completed"}))
        assert (again.created_at, again.status) == (stored.created_at, "completed")


@pytest.mark.postgres
def test_the_stop_words_are_postgresqls_english_ones(pg_admin_dsn: str) -> None:
    """A word PostgreSQL drops but SQLite's FTS5 kept would make the stores disagree."""
    from accelopt_mcp.store._search import STOP_WORDS

    with psycopg.connect(pg_admin_dsn) as conn:
        dropped = conn.execute(
            "SELECT w FROM unnest(%s::text[]) AS u (w) WHERE ts_lexize('english_stem', w) = '{}'",
            (sorted(STOP_WORDS),),
        ).fetchall()
        share = conn.execute("SELECT setting FROM pg_config WHERE name = 'SHAREDIR'").fetchone()
    assert {r[0] for r in dropped} == STOP_WORDS
    listed = Path(share[0]) / "tsearch_data" / "english.stop" if share else None
    if listed is not None and listed.exists():  # a server on this machine: the whole list
        assert set(listed.read_text().split()) == STOP_WORDS
