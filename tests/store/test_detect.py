"""check_store: each way a database can be unusable is told apart, quickly, without secrets.

Supabase cases run against the PostgREST stand-in for tests (a real subprocess over the session's
real PostgreSQL), a plain `python -m http.server`, a small JSON API answering 404 (an
http.server in a thread), a port nobody listens on, and a socket that accepts connections but
never answers.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from accelopt_mcp.store._rows import TABLES
from accelopt_mcp.store.detect import check_postgres, check_store, check_supabase
from accelopt_mcp.store.sqlite import SqliteStore
from tests.cli_inprocess import Finished, run_accelopt
from tests.http_listener import serve_in_thread
from tests.postgrest_standin.launcher import RunningStandIn, free_port
from tests.store.samples import make_definition
from tests.store.supabase_fixture import SCHEMA_FILE, fresh_schema_database, serve

pytestmark = pytest.mark.postgres


# --------------------------------------------------------------------------- servers


@pytest.fixture(scope="module")
def ready(pg_admin_dsn: str, request: pytest.FixtureRequest) -> tuple[RunningStandIn, str]:
    """A stand-in over a database with the schema applied, and that database's DSN."""
    dsn = fresh_schema_database(pg_admin_dsn)
    return serve(dsn, request), dsn


@pytest.fixture(scope="module")
def bare(pg_admin_dsn: str, request: pytest.FixtureRequest) -> RunningStandIn:
    """A stand-in over a fresh database where schema_v2.txt was never applied."""
    return serve(fresh_schema_database(pg_admin_dsn, apply_schema=False), request)


@pytest.fixture
def blackhole() -> Iterator[int]:
    """A port whose socket accepts TCP connections (kernel backlog) but never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


@pytest.fixture(scope="module")
def plain_http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A web server that is not Supabase: Python's http.server over a folder with one page."""
    folder = tmp_path_factory.mktemp("www")
    (folder / "index.html").write_text("<html><body>hello</body></html>")
    for _ in range(3):  # another process may take the chosen port before the server binds it
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
            cwd=folder,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}"
        if _answers(url, process):
            break
        process.kill()
        process.wait(timeout=10)
    else:
        pytest.fail("python -m http.server did not start")
    try:
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def _answers(url: str, process: subprocess.Popen[bytes]) -> bool:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and process.poll() is None:
        try:
            httpx.get(url, timeout=1)
            return True
        except httpx.TransportError:
            time.sleep(0.1)
    return False


def _free_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


# --------------------------------------------------------------------------- supabase


def test_nothing_listening_is_unreachable_with_setup_steps() -> None:
    started = time.monotonic()
    check = check_supabase(_free_url(), key="some-key", timeout_s=2)
    assert time.monotonic() - started < 3
    assert check.kind == "supabase" and not check.ok
    assert check.problem == "unreachable"
    assert "connection refused" in check.message
    steps = " ".join(check.next_steps)
    assert "supabase start" in steps
    assert "Project Settings -> API" in steps
    assert "SUPABASE_URL" in steps and "SUPABASE_KEY" in steps


def test_a_blackholed_port_is_unreachable_within_the_timeout(blackhole: int) -> None:
    started = time.monotonic()
    check = check_supabase(f"http://127.0.0.1:{blackhole}", key="k", timeout_s=1)
    elapsed = time.monotonic() - started
    assert check.problem == "unreachable"
    assert "timed out" in check.message
    assert elapsed < 3, elapsed


def test_a_network_without_a_route_is_unreachable_at_once() -> None:
    # Run in a network namespace of its own (only a loopback, down): the kernel answers "network
    # is unreachable" for any address, so nothing leaves this host. The check runs as a user's
    # CLI would, in a process of its own.
    probe = (
        "import time\n"
        "from accelopt_mcp.store.detect import check_supabase\n"
        "started = time.monotonic()\n"
        "check = check_supabase('http://10.255.255.1:54321', key='k', timeout_s=1)\n"
        "print(check.problem, round(time.monotonic() - started, 2))\n"
        "print(check.message)\n"
    )
    if subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare --net is not allowed here (it needs root or user namespaces)")
    done = subprocess.run(
        ["unshare", "--net", sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "NO_PROXY": "*"},
    )
    assert done.returncode == 0, done.stderr
    first, message = done.stdout.splitlines()[:2]
    problem, elapsed = first.split()
    assert problem == "unreachable", done.stdout
    assert float(elapsed) < 3, done.stdout
    assert "Network is unreachable" in message, message


def test_a_web_server_that_is_not_supabase(plain_http: str) -> None:
    check = check_supabase(plain_http, key="k", timeout_s=5)
    assert check.problem == "not_supabase"
    assert "HTTP 404" in check.message and "text/html" in check.message
    assert any("Project URL" in step for step in check.next_steps)


class _JsonApi(http.server.BaseHTTPRequestHandler):
    """A web API that is not PostgREST: every path is a 404 with a JSON body. With
    `describes_api`, /rest/v1/ serves an OpenAPI document as PostgREST does (an old PostgREST
    whose 404 for an unknown table has no error body of its own)."""

    describes_api = False

    def do_GET(self) -> None:
        if self.describes_api and self.path.split("?")[0] == "/rest/v1/":
            self._reply(200, {"swagger": "2.0", "info": {"title": "PostgREST"}, "paths": {"/": {}}})
        else:
            self._reply(404, {"error": "Not Found", "status": 404, "path": self.path})

    def do_POST(self) -> None:
        self._reply(404, {"error": "Not Found", "status": 404})

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def json_404_api() -> Iterator[str]:
    with serve_in_thread(_JsonApi) as url:
        yield url


@pytest.fixture
def old_postgrest() -> Iterator[str]:
    with serve_in_thread(type("OldPostgrest", (_JsonApi,), {"describes_api": True})) as url:
        yield url


def _db_check(url: str, key: str) -> Finished:
    """`accelopt db check URL` (in this process), the key in the environment as a user sets it."""
    return run_accelopt("db", "check", url, env={"SUPABASE_KEY": key, "COLUMNS": "300"})


def test_a_json_404_api_is_not_a_supabase_project(json_404_api: str) -> None:
    check = check_supabase(json_404_api, key="k", timeout_s=5)
    assert check.problem == "not_supabase", check.message
    assert "is not a Supabase project (no PostgREST API under /rest/v1)" in check.message
    assert "HTTP 404, application/json" in check.message
    assert "\n" not in check.message
    assert not any("schema_v2.txt" in step for step in check.next_steps)

    shown = _db_check(json_404_api, "k")
    assert shown.returncode == 1
    first = shown.stdout.splitlines()[0]
    assert "is not a Supabase project" in first and first.endswith(f"(supabase: {json_404_api})")
    assert "schema" not in shown.stdout


def test_a_404_beside_a_postgrest_api_description_is_a_missing_schema(old_postgrest: str) -> None:
    check = check_supabase(old_postgrest, key="k", timeout_s=5)
    assert check.problem == "schema_missing", check.message
    assert "definitions" in check.message and "solution_ancestors()" in check.message


def test_db_check_on_a_supabase_project_without_the_schema(bare: RunningStandIn) -> None:
    shown = _db_check(bare.url, bare.key)
    assert shown.returncode == 1
    first = shown.stdout.splitlines()[0]
    assert "answers, but the kernel database schema is not applied" in first
    assert "not a Supabase project" not in shown.stdout
    assert "schema_v2.txt" in shown.stdout and "SQL editor" in shown.stdout


def test_a_wrong_key_is_rejected_and_never_echoed(ready: tuple[RunningStandIn, str]) -> None:
    standin, _ = ready
    wrong = "wrong-key-" + "z" * 20
    check = check_supabase(standin.url, key=wrong, timeout_s=5)
    assert check.problem == "key_rejected"
    assert "HTTP 401" in check.message
    text = check.model_dump_json()
    assert wrong not in text and standin.key not in text
    assert any("Project Settings -> API" in step for step in check.next_steps)


def test_no_key_at_all_says_which_variable_to_set(
    ready: tuple[RunningStandIn, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SUPABASE_KEY", raising=False)
    check = check_supabase(ready[0].url, timeout_s=5)
    assert check.problem == "key_rejected"
    assert "no API key" in check.message
    assert any("SUPABASE_KEY" in step for step in check.next_steps)


def test_the_key_is_read_from_the_environment(
    ready: tuple[RunningStandIn, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUPABASE_KEY", ready[0].key)
    assert check_store(ready[0].url, timeout_s=5).ok


def test_schema_not_applied_names_the_missing_objects(bare: RunningStandIn) -> None:
    check = check_supabase(bare.url, key=bare.key, timeout_s=5)
    assert check.problem == "schema_missing"
    for name in (*TABLES, "solution_profiles", "solution_ancestors()"):
        assert name in check.message
    steps = " ".join(check.next_steps)
    assert "schema_v2.txt" in steps and "SQL editor" in steps
    assert "ON_ERROR_STOP=1" in steps and "accelopt db init" in steps


def test_a_partly_applied_schema_names_only_what_is_missing(
    pg_admin_dsn: str, request: pytest.FixtureRequest
) -> None:
    dsn = fresh_schema_database(pg_admin_dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP VIEW solution_profiles")
        conn.execute("DROP FUNCTION solution_descendants(uuid)")
    standin = serve(dsn, request)
    check = check_supabase(standin.url, key=standin.key, timeout_s=5)
    assert check.problem == "schema_missing"
    assert "missing: solution_profiles, solution_descendants()" in check.message


def test_a_ready_project_reports_row_counts(ready: tuple[RunningStandIn, str]) -> None:
    standin, dsn = ready
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE definitions CASCADE")
        conn.execute(
            "INSERT INTO definitions (definition) VALUES (%s::jsonb)",
            (make_definition("counted").model_dump_json(),),
        )
    check = check_store(standin.url, key=standin.key, timeout_s=5)
    assert check.ok and check.problem is None
    assert check.kind == "supabase"
    assert check.tables is not None
    assert set(check.tables) == set(TABLES)
    assert check.tables["definitions"] == 1
    assert check.tables["solutions"] == 0


def test_the_rest_url_is_accepted_for_the_project_url(ready: tuple[RunningStandIn, str]) -> None:
    standin, _ = ready
    check = check_supabase(standin.url + "/rest/v1/", key=standin.key, timeout_s=5)
    assert check.ok
    assert check.location == standin.url


@pytest.mark.parametrize("url", ["http://", "https://:443", "mailto://"])
def test_urls_without_a_host_are_bad(url: str) -> None:
    check = check_supabase(url, key="k", timeout_s=1)
    assert check.problem == "bad_url"


def test_an_unrecognised_store_url_is_bad() -> None:
    check = check_store("kernels")
    assert check.kind == "unknown"
    assert check.problem == "bad_url"
    assert any("supabase.co" in step for step in check.next_steps)


# --------------------------------------------------------------------------- postgres


def _dsn_on(admin_dsn: str, database: str) -> str:
    return admin_dsn.rsplit("/", 1)[0] + "/" + database


def test_postgres_nothing_listening() -> None:
    started = time.monotonic()
    check = check_postgres(f"postgresql://postgres@127.0.0.1:{free_port()}/x", timeout_s=2)
    assert check.problem == "unreachable"
    assert time.monotonic() - started < 5
    assert any("docker run" in step for step in check.next_steps)


def test_postgres_blackholed_port_returns_within_the_timeout(blackhole: int) -> None:
    started = time.monotonic()
    check = check_postgres(f"postgresql://postgres@127.0.0.1:{blackhole}/x", timeout_s=2)
    assert check.problem == "unreachable"
    assert time.monotonic() - started < 6


def test_postgres_missing_database_hides_the_password(pg_admin_dsn: str) -> None:
    dsn = _dsn_on(pg_admin_dsn, "no_such_db").replace("postgres@", "postgres:s3cr3t-pw@")
    check = check_store(dsn, timeout_s=5)
    assert check.kind == "postgres"
    assert check.problem == "database_missing"
    assert "no_such_db" in check.message
    assert "s3cr3t-pw" not in check.model_dump_json()
    assert any("createdb" in step for step in check.next_steps)


def test_postgres_unknown_role_is_an_auth_failure(pg_admin_dsn: str) -> None:
    dsn = pg_admin_dsn.replace("postgres@", "nobody_here@")
    check = check_postgres(dsn, timeout_s=5)
    assert check.problem == "auth_failed"
    assert "nobody_here" in check.message


def test_postgres_schema_missing_then_ready(pg_admin_dsn: str) -> None:
    dsn = fresh_schema_database(pg_admin_dsn, apply_schema=False)
    missing = check_postgres(dsn, timeout_s=5)
    assert missing.problem == "schema_missing"
    assert "definitions" in missing.message and "solution_ancestors()" in missing.message
    assert any("accelopt db init" in step for step in missing.next_steps)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA_FILE.read_text(encoding="utf-8"))
        conn.execute(
            "INSERT INTO definitions (definition) VALUES (%s::jsonb)",
            (make_definition("one").model_dump_json(),),
        )
    ready = check_postgres(dsn, timeout_s=5)
    assert ready.ok
    assert ready.tables == {t: (1 if t == "definitions" else 0) for t in TABLES}


# --------------------------------------------------------------------------- sqlite


def test_sqlite_file_not_yet_created_is_fine(tmp_path: Path) -> None:
    check = check_store(str(tmp_path / "sub" / "k.db"))
    assert check.kind == "sqlite" and check.ok
    assert "first use" in check.message


def test_sqlite_store_file_reports_counts(tmp_path: Path) -> None:
    path = tmp_path / "k.db"
    with SqliteStore(path) as store:
        store.upsert_definition(make_definition("d1"))
        store.upsert_definition(make_definition("d2"))
    check = check_store(str(path))
    assert check.ok
    assert check.tables is not None and check.tables["definitions"] == 2


def test_sqlite_file_without_our_tables(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE unrelated (x)")
    check = check_store(str(path))
    # Another program's file: `accelopt db init` would refuse it (test_schema.py), so the
    # check must not send the user there.
    assert check.problem == "bad_url" and not check.ok
    assert "another program" in check.message and "unrelated" in check.message
    assert not any("accelopt db init" in step for step in check.next_steps)
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE definitions (name TEXT)")  # ours, from an older schema
    check = check_store(str(path))
    assert check.problem == "schema_missing"
    assert any("accelopt db init" in step for step in check.next_steps)


def test_a_file_that_is_not_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"this is not a database, just text " * 100)
    check = check_store(str(path))
    assert check.problem == "bad_url"
    assert "not a usable SQLite database" in check.message
