"""Row level security in schema_v2.txt, on the real PostgreSQL: the anon role reads and writes
nothing, the tables' owner and a BYPASSRLS role (Supabase's service_role) see everything, and
one statement, GRANT accelopt_team TO <role>, lets a role read and write. Each test gets a
database of its own whose owner is a plain login role (as Supabase's postgres, no superuser),
with the grants Supabase gives its API roles on what that owner creates."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from accelopt_mcp.models import LlmCallIn
from accelopt_mcp.store.base import ExperienceIn, RunRecord, StoreUnavailableError, SuiteRecord
from accelopt_mcp.store.postgres import ROW_LEVEL_SECURITY, TEAM_ROLE, PostgresStore
from accelopt_mcp.store.supabase import SupabaseStore
from tests.pg_server import PostgresServer
from tests.store.conftest import RECORD_TABLES, SCHEMA_TABLES
from tests.store.samples import make_definition, make_evaluation, make_solution, make_workload
from tests.store.supabase_fixture import serve

pytestmark = pytest.mark.postgres
SUITE_ID = "5a17e000-0000-4000-8000-000000000001"


@dataclass
class TeamDatabase:
    admin_dsn: str
    """The test server's superuser, connected to this database."""
    owner_dsn: str
    owner: PostgresStore
    """The store as the tables' owner (who applied the schema)."""
    member: str
    """A NOLOGIN role, as Supabase's `authenticated`."""
    service: str
    """A NOLOGIN BYPASSRLS role, as Supabase's `service_role`."""
    login: str
    """A login role with no privileges of its own."""
    login_dsn: str
    ids: dict[str, str]
    counts: dict[str, int]
    changes: list[str]


def _role(name: str) -> sql.Identifier:
    return sql.Identifier(name)


@pytest.fixture
def team_db(pg_admin_dsn: str) -> Iterator[TeamDatabase]:
    tag = uuid.uuid4().hex[:10]
    owner, member, service, login = (f"rls_{r}_{tag}" for r in ("owner", "auth", "svc", "alice"))
    database = f"rls_{tag}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        # Supabase's anon role, shared by every database on the server (roles are per server).
        conn.execute(
            "DO $$ BEGIN CREATE ROLE anon NOLOGIN; "
            "EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"
        )
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN CREATEROLE").format(_role(owner)))
        conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(_role(member)))
        conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN BYPASSRLS").format(_role(service)))
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(_role(login)))
        conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(_role(database), _role(owner)))
    admin_dsn = make_conninfo(pg_admin_dsn, dbname=database)
    owner_dsn = make_conninfo(admin_dsn, user=owner)
    login_dsn = make_conninfo(admin_dsn, user=login)
    store: PostgresStore | None = None
    try:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            # What Supabase grants its API roles on what postgres creates in public: every
            # privilege. Row level security is what keeps them out of the rows.
            api_roles = sql.SQL(", ").join([_role("anon"), _role(member), _role(service)])
            conn.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(api_roles))
            for kind in ("TABLES", "SEQUENCES", "FUNCTIONS"):
                conn.execute(
                    sql.SQL(
                        "ALTER DEFAULT PRIVILEGES FOR ROLE {} IN SCHEMA public "
                        "GRANT ALL ON {} TO {}"
                    ).format(_role(owner), sql.SQL(kind), api_roles)
                )
        try:
            store = PostgresStore(owner_dsn, init_schema=True)
        except StoreUnavailableError as exc:
            if "rejected the login" in str(exc):
                pytest.skip(f"the test server does not let new roles log in: {exc}")
            raise
        ids = _fill(store)
        counts = _counts(admin_dsn, None)
        assert all(counts[t] > 0 for t in SCHEMA_TABLES), counts
        yield TeamDatabase(
            admin_dsn, owner_dsn, store, member, service, login, login_dsn, ids, counts,
            list(store.schema_changes),
        )  # fmt: skip
    finally:
        if store is not None:
            store.close()
        with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(_role(database)))
            for name in (member, login, service, owner):
                conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(_role(name)))


def _fill(store: PostgresStore) -> dict[str, str]:
    """A row in every table, written by the owner's store."""
    store.upsert_definition(make_definition("d"))
    store.upsert_workload("d", make_workload("d", uuid_="w"))
    root = store.upsert_solution(make_solution("d", "# root\n"))
    child = store.upsert_solution(make_solution("d", "# child\n"), parent_id=root)
    store.upsert_profile("w", child, make_evaluation(latency_ms=1.0), {})
    store.create_run(RunRecord(id="r", definition_name="d", initial_solution_id=root))
    store.add_experience(
        ExperienceIn(
            definition_name="d",
            run_id="r",
            title="Tile the rows",
            strategy="one band each",
            slow_solution_id=root,
            fast_solution_id=child,
        )
    )
    store.add_llm_call(LlmCallIn(run_id="r", role="planner", model="m"))
    store.put_run_entry("r", "slot", "1/0/0/0", {"status": "ok"})
    store.put_hardware_peaks("cpu/x", {"fp32_gflops": 1.0})
    store.put_suite(
        SuiteRecord(
            id=SUITE_ID,
            name="cpu-nkibench",
            source="builtin:cpu-nkibench",
            backend="cpu",
            status="running",
            spec={"cases": [{"task": "t", "run_id": "r"}]},
        )
    )
    return {"root": root, "child": child}


def _counts(dsn: str, role: str | None) -> dict[str, int]:
    """Rows of every table and of the view, as `role` sees them (None: as the DSN's user)."""
    with psycopg.connect(dsn) as conn:
        if role is not None:
            conn.execute(sql.SQL("SET ROLE {}").format(_role(role)))
        return {
            name: conn.execute(sql.SQL("SELECT count(*) FROM {}").format(_role(name))).fetchone()[0]  # type: ignore[index]
            for name in (*SCHEMA_TABLES, "solution_profiles")
        }


def _through_functions(conn: psycopg.Connection, ids: dict[str, str]) -> tuple[int, ...]:
    """How many rows the schema's functions give the connection's role."""
    return tuple(
        conn.execute(statement, (value,)).fetchone()[0]  # type: ignore[index]
        for statement, value in (
            ("SELECT count(*) FROM search_experiences(%s)", ["tile"]),
            ("SELECT count(*) FROM solution_ancestors(%s)", ids["child"]),
            ("SELECT count(*) FROM solution_descendants(%s)", ids["root"]),
        )
    )


def test_applying_the_schema_says_it_turned_row_level_security_on(
    team_db: TeamDatabase,
) -> None:
    assert team_db.changes[0] == "created the schema"
    assert ROW_LEVEL_SECURITY in team_db.changes
    again = PostgresStore(team_db.owner_dsn, init_schema=True)
    try:
        assert again.schema_changes == []
    finally:
        again.close()


def test_the_owner_and_a_bypassrls_role_see_everything(team_db: TeamDatabase) -> None:
    owner = team_db.owner
    assert {name: n for name, n in owner.stats().counts.items() if n} == {
        t: team_db.counts[t] for t in RECORD_TABLES
    }
    assert [s.id for s in owner.ancestors(team_db.ids["child"])] == [team_db.ids["root"]]
    assert [e.title for e in owner.search_experiences(text="tile")] == ["Tile the rows"]
    assert _counts(team_db.admin_dsn, team_db.service) == team_db.counts


def test_anon_reads_nothing_and_writes_nothing(team_db: TeamDatabase) -> None:
    assert _counts(team_db.admin_dsn, "anon") == dict.fromkeys(
        (*SCHEMA_TABLES, "solution_profiles"), 0
    )
    with psycopg.connect(team_db.admin_dsn, autocommit=True) as conn:
        conn.execute("SET ROLE anon")
        assert _through_functions(conn, team_db.ids) == (0, 0, 0)
        for table in SCHEMA_TABLES:
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
                conn.execute(sql.SQL("INSERT INTO {} DEFAULT VALUES").format(_role(table)))
        assert conn.execute("UPDATE runs SET status = 'cancelled'").rowcount == 0
        assert conn.execute("DELETE FROM definitions").rowcount == 0
    assert _counts(team_db.admin_dsn, None) == team_db.counts
    assert team_db.owner.get_run("r").status == "pending"  # type: ignore[union-attr]


def test_one_grant_lets_a_role_read_and_write(team_db: TeamDatabase) -> None:
    member = team_db.member
    assert _counts(team_db.admin_dsn, member) == dict.fromkeys(
        (*SCHEMA_TABLES, "solution_profiles"), 0
    )
    # The documented statement, run by a team admin (the owner: it has CREATEROLE).
    with psycopg.connect(team_db.owner_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("GRANT accelopt_team TO {}").format(_role(member)))
    assert _counts(team_db.admin_dsn, member) == team_db.counts
    with psycopg.connect(team_db.admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("SET ROLE {}").format(_role(member)))
        assert _through_functions(conn, team_db.ids) == (1, 1, 1)
        conn.execute(
            "INSERT INTO definitions (definition) VALUES (%s)",
            (make_definition("team").model_dump_json(),),
        )
        conn.execute(
            "INSERT INTO solutions (definition_name, solution, solution_hash) "
            "VALUES ('team', %s, 'h-team')",
            (make_solution("team", "# team\n").model_dump_json(),),
        )
        assert conn.execute("UPDATE runs SET status = 'running'").rowcount == 1
        assert conn.execute("DELETE FROM run_entries").rowcount == 1
        assert conn.execute("UPDATE suites SET status = 'completed'").rowcount == 1
        conn.execute(
            "INSERT INTO hardware_peaks (hardware) VALUES ('cpu/x') ON CONFLICT (hardware) "
            "DO UPDATE SET peaks = '{\"fp32_gflops\": 2.0}'"
        )
    owner = team_db.owner
    assert owner.get_definition("team") is not None
    assert [s.solution_hash for s in owner.list_solutions(definition_name="team")] == ["h-team"]
    assert owner.get_run("r").status == "running"  # type: ignore[union-attr]
    assert owner.get_suite(SUITE_ID).status == "completed"  # type: ignore[union-attr]
    assert owner.get_hardware_peaks("cpu/x").peaks == {"fp32_gflops": 2.0}  # type: ignore[union-attr]
    # Taken back the same way.
    with psycopg.connect(team_db.owner_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("REVOKE accelopt_team FROM {}").format(_role(member)))
    assert set(_counts(team_db.admin_dsn, member).values()) == {0}


def test_a_login_role_given_team_access_uses_the_postgres_store(team_db: TeamDatabase) -> None:
    with PostgresStore(team_db.login_dsn) as outsider:
        with pytest.raises(StoreUnavailableError, match="refused this login role") as refused:
            outsider.list_definitions()
        assert f"GRANT {TEAM_ROLE} TO" in str(refused.value)
        with psycopg.connect(team_db.owner_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("GRANT accelopt_team TO {}").format(_role(team_db.login)))
        assert [d.name for d in outsider.list_definitions()] == ["d"]
        sid = outsider.upsert_solution(
            make_solution("d", "# by alice\n"), parent_id=team_db.ids["child"]
        )
        chain = [team_db.ids["child"], team_db.ids["root"]]
        assert [s.id for s in outsider.ancestors(sid)] == chain
        pid = outsider.upsert_profile("w", sid, make_evaluation(latency_ms=0.5), {})
        assert outsider.best_solutions("d")[0].profile.id == pid
        assert [e.title for e in outsider.search_experiences(text="tile")] == ["Tile the rows"]
    assert team_db.owner.get_solution(sid) is not None


def test_every_table_view_and_function_of_the_schema_is_covered(pg_dsn: str) -> None:
    """On a plain PostgreSQL (no Supabase roles needed): a table, view or function added to
    the schema must be added to its row level security section too."""
    with PostgresStore(pg_dsn, init_schema=True) as store:
        assert ROW_LEVEL_SECURITY in store.schema_changes
    with psycopg.connect(pg_dsn) as conn:
        tables = conn.execute(
            "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity, "
            "EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid "
            "AND p.polname = 'accelopt_team_all' "
            "AND p.polroles = ARRAY['accelopt_team'::regrole::oid]), "
            "has_table_privilege('accelopt_team', c.oid, 'SELECT, INSERT, UPDATE, DELETE') "
            "FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' "
            "ORDER BY c.relname"
        ).fetchall()
        assert tables == [(t, True, False, True, True) for t in sorted(SCHEMA_TABLES)]
        view = conn.execute(
            "SELECT reloptions, has_table_privilege('accelopt_team', oid, 'SELECT') "
            "FROM pg_class WHERE oid = 'solution_profiles'::regclass"
        ).fetchone()
        assert view == (["security_invoker=true"], True)
        functions = conn.execute(
            "SELECT p.proname, p.prosecdef, EXISTS (SELECT 1 FROM aclexplode(p.proacl) a "
            "WHERE a.grantee = 'accelopt_team'::regrole AND a.privilege_type = 'EXECUTE') "
            "FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace "
            "AND p.prorettype <> 'trigger'::regtype ORDER BY p.proname"
        ).fetchall()
        assert functions and all(f[1:] == (False, True) for f in functions), functions
        sequences = conn.execute(
            "SELECT c.relname, has_sequence_privilege('accelopt_team', c.oid, 'USAGE') "
            "FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'S'"
        ).fetchall()
        assert sequences and all(s[1] for s in sequences), sequences


def test_the_supabase_store_says_what_to_do_when_its_key_is_refused(
    team_db: TeamDatabase, request: pytest.FixtureRequest
) -> None:
    # The anon key: Supabase grants anon the tables, row level security gives it no row.
    anon = serve(team_db.admin_dsn, request, role="anon")
    with SupabaseStore(anon.url, key=anon.key) as store:
        assert store.list_definitions() == []
        assert store.get_solution(team_db.ids["root"]) is None
        with pytest.raises(StoreUnavailableError) as refused:
            store.upsert_definition(make_definition("sneaky"))
    message = str(refused.value)
    assert "row-level security policy" in message  # the server's own words
    assert "service_role key" in message and "GRANT accelopt_team TO authenticated;" in message
    assert "\n" not in message
    # A role without even the grants: refused on opening, with the same way out.
    bare = serve(team_db.admin_dsn, request, role=team_db.login)
    with pytest.raises(StoreUnavailableError, match="may not read the kernel database") as e:
        SupabaseStore(bare.url, key=bare.key)
    assert "service_role key" in str(e.value) and "GRANT accelopt_team TO" in str(e.value)
    # Team access for the key's role, and the same store writes.
    with psycopg.connect(team_db.owner_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("GRANT accelopt_team TO {}").format(_role(team_db.member)))
    member = serve(team_db.admin_dsn, request, role=team_db.member)
    with SupabaseStore(member.url, key=member.key) as store:
        assert [d.name for d in store.list_definitions()] == ["d"]
        store.upsert_definition(make_definition("team"))
        assert [e.title for e in store.search_experiences(text="tile")] == ["Tile the rows"]
    assert team_db.owner.get_definition("team") is not None


def test_an_owner_without_createrole_gets_the_schema_and_a_warning() -> None:
    """On a plain server of its own (no Supabase roles, no accelopt_team yet) and a database
    owner that may not create roles: the schema applies, row level security is on, and the
    warning says what is missing; once the role exists, applying it again grants it."""
    try:
        server = PostgresServer()
    except RuntimeError as exc:
        pytest.skip(f"needs PostgreSQL server binaries for a server of its own: {exc}")
    admin_dsn = server.start()
    try:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            assert conn.execute(
                "SELECT count(*) FROM pg_roles WHERE rolname IN "
                "('anon', 'authenticated', 'service_role', 'accelopt_team')"
            ).fetchone() == (0,)
            conn.execute("CREATE ROLE plain_owner LOGIN")
            conn.execute("CREATE DATABASE plain OWNER plain_owner")
        owner_dsn = make_conninfo(admin_dsn, dbname="plain", user="plain_owner")
        with PostgresStore(owner_dsn, init_schema=True) as store:
            assert ROW_LEVEL_SECURITY in store.schema_changes
            [warning] = [c for c in store.schema_changes if c.startswith("warning: ")]
            assert "accelopt_team not created" in warning and "CREATEROLE" in warning
            _fill(store)
            assert store.stats().counts["solutions"] == 2
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute("CREATE ROLE accelopt_team NOLOGIN")
        with PostgresStore(owner_dsn, init_schema=True) as store:
            assert store.schema_changes == []
        with psycopg.connect(make_conninfo(admin_dsn, dbname="plain")) as conn:
            policies = conn.execute("SELECT count(*) FROM pg_policies").fetchone()
            assert policies == (len(SCHEMA_TABLES),)
            conn.execute("CREATE ROLE plain_member NOLOGIN IN ROLE accelopt_team")
            conn.execute("SET ROLE plain_member")
            assert conn.execute("SELECT count(*) FROM solutions").fetchone() == (2,)
    finally:
        server.stop()
