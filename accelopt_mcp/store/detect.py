"""Is the kernel database usable? `check_store` answers for SQLite, PostgreSQL and Supabase, and
when the answer is no, says which problem it is and what to do about it.

Every check returns within a few seconds, even when the address swallows packets: each probe
runs under a deadline, in a daemon thread, so a hanging DNS lookup or a server that accepts
the connection but never answers cannot hold the caller. No secret (password, API key) is
ever part of a result.

Over ~600 lines for one reason: the three checks answer alike (one StoreCheck, one deadline
probe, one way of naming a problem and the steps that fix it), and most of the length is
the wording of those steps for each kind of failure; apart, the three would drift in what
they say about the same problem (a missing schema, a rejected key).
"""

from __future__ import annotations

import os
import queue
import sqlite3
import threading
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any, Literal, TypeVar

import httpx
import psycopg
from pydantic import BaseModel, Field

from accelopt_mcp.redaction import redact, redacted_url
from accelopt_mcp.store._rows import SCHEMA_TABLES, TABLES
from accelopt_mcp.store.base import StoreError
from accelopt_mcp.store.postgres import dsn_password, mask_dsn
from accelopt_mcp.store.sqlite import another_programs_file, another_programs_tables
from accelopt_mcp.store.url import describe_store_url

SUPABASE_URL_ENV = "SUPABASE_URL"
SUPABASE_KEY_ENV = "SUPABASE_KEY"
_NO_UUID = "00000000-0000-0000-0000-000000000000"
FUNCTIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "solution_ancestors": ("uuid", {"sid": _NO_UUID}),
    "solution_descendants": ("uuid", {"sid": _NO_UUID}),
    "search_experiences": ("text[]", {"words": []}),
}
"""The schema's functions: name -> (argument type, arguments of a call that finds nothing)."""
VIEWS = ("solution_profiles",)

Kind = Literal["sqlite", "postgres", "supabase", "unknown"]
Problem = Literal[
    "unreachable",
    "key_rejected",
    "schema_missing",
    "not_supabase",
    "bad_url",
    "auth_failed",
    "database_missing",
]


class StoreCheck(BaseModel):
    """What `accelopt db check` reports."""

    kind: Kind
    location: str
    """Where the database is, with any secret left out."""
    ok: bool
    problem: Problem | None = None
    message: str
    next_steps: list[str] = Field(default_factory=list)
    tables: dict[str, int] | None = None
    """Row count per table, when the database is usable."""

    def explain(self) -> str:
        """The message followed by the next steps, as one text (e.g. for an exception)."""
        steps = "".join(f"\n  - {step}" for step in self.next_steps)
        return self.message + (f"\nNext steps:{steps}" if steps else "")


def _failed(
    kind: Kind, location: str, problem: Problem, message: str, steps: list[str]
) -> StoreCheck:
    """The check of a store that cannot be used: what is wrong and what to do."""
    return StoreCheck(
        kind=kind, location=location, ok=False, problem=problem, message=message, next_steps=steps
    )


def _ready(kind: Kind, location: str, message: str, tables: dict[str, int] | None) -> StoreCheck:
    """The check of a store that can be used, with its row counts (None: not counted)."""
    return StoreCheck(kind=kind, location=location, ok=True, message=message, tables=tables)


def check_store(url: str | None, *, key: str | None = None, timeout_s: float = 5) -> StoreCheck:
    """Check the store a URL names (default: $ACCELOPT_STORE, else the per-user SQLite file).

    `key` is the Supabase API key (default: $SUPABASE_KEY). `timeout_s` bounds each network
    step; the whole check ends within about twice that.
    """
    try:
        kind, location = describe_store_url(url)
    except StoreError as exc:
        return _failed(
            "unknown",
            redacted_url(url or ""),
            "bad_url",
            str(exc),
            [
                "SQLite: a file path such as ~/kernels.db",
                "PostgreSQL: postgresql://user@host:5432/dbname (password in PGPASSWORD)",
                f"Supabase: https://<project-ref>.supabase.co, with the key in {SUPABASE_KEY_ENV}",
            ],
        )
    if kind == "sqlite":
        return check_sqlite(location)
    if kind == "postgres":
        return check_postgres(location, timeout_s=timeout_s)
    return check_supabase(location, key=key, timeout_s=timeout_s)


# --------------------------------------------------------------------------- deadlines

T = TypeVar("T")


class _DeadlineExceeded(Exception):
    pass


class _Raised:
    """What a probe raised, passed back from its thread."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _within(deadline_s: float, probe: Callable[[], T]) -> T:
    """Run `probe` in a daemon thread and give up waiting after `deadline_s` seconds."""
    results: queue.Queue[T | _Raised] = queue.Queue(maxsize=1)

    def target() -> None:
        try:
            results.put(probe())
        except BaseException as exc:
            results.put(_Raised(exc))

    threading.Thread(target=target, name="accelopt-store-check", daemon=True).start()
    try:
        value = results.get(timeout=deadline_s)
    except queue.Empty:
        raise _DeadlineExceeded from None
    if isinstance(value, _Raised):
        raise value.exc
    return value


def schema_file() -> str:
    """Where schema_v2.txt is on this machine (the copy shipped in the package)."""
    return str(resources.files("accelopt_mcp.store").joinpath("schema_v2.txt"))


# --------------------------------------------------------------------------- sqlite


def check_sqlite(path: str) -> StoreCheck:
    if path == ":memory:":
        return _ready("sqlite", path, "in-memory SQLite database", {})
    file = Path(path).expanduser()
    location = str(file)
    if not file.exists():
        folder = next((p for p in (file.parent, *file.parents) if p.exists()), None)
        if folder is None or not os.access(folder, os.W_OK):
            return _failed(
                "sqlite",
                location,
                "bad_url",
                f"cannot create {location}: {folder} is not writable",
                ["choose a writable location, e.g. --store ~/kernels.db"],
            )
        return StoreCheck(
            kind="sqlite",
            location=location,
            ok=True,
            message=f"{location} does not exist yet; it is created with its schema on first use",
            next_steps=[f"`accelopt db init --store {location}` creates it now"],
            tables={},
        )
    try:
        with sqlite3.connect(f"file:{file}?mode=ro", uri=True, timeout=5) as conn:
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            missing = [t for t in TABLES if t not in names]
            counts = {} if missing else _sqlite_counts(conn)
            foreign = another_programs_tables(conn)
    except sqlite3.DatabaseError as exc:
        return _failed(
            "sqlite",
            location,
            "bad_url",
            f"{location} is not a usable SQLite database ({exc})",
            ["point --store at another file; this one is not a kernel database"],
        )
    if foreign:
        return _failed(
            "sqlite",
            location,
            "bad_url",
            another_programs_file(location, foreign),
            ["point --store at a kernel database or at a new path; this file is left alone"],
        )
    if missing:
        return _failed(
            "sqlite",
            location,
            "schema_missing",
            f"{location} lacks the kernel database tables: {', '.join(missing)}",
            [f"`accelopt db init --store {location}` creates them"],
        )
    writable = os.access(file, os.W_OK)
    return StoreCheck(
        kind="sqlite",
        location=location,
        ok=writable,
        problem=None if writable else "bad_url",
        message="SQLite database ready" if writable else f"{location} is read-only",
        next_steps=[] if writable else ["make the file writable or choose another --store"],
        tables=counts,
    )


def _sqlite_counts(conn: sqlite3.Connection) -> dict[str, int]:
    # Table names come from our own constant, never from input.
    return {t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in TABLES}


# --------------------------------------------------------------------------- postgres


def check_postgres(dsn: str, *, timeout_s: float = 5) -> StoreCheck:
    location = mask_dsn(dsn)

    def verdict(problem: Problem, message: str, steps: list[str]) -> StoreCheck:
        return _failed("postgres", location, problem, message, steps)

    init_steps = [
        f"`accelopt db init --store {location}` (add the password via PGPASSWORD)",
        f'or: psql "<dsn>" -v ON_ERROR_STOP=1 -f {schema_file()}',
    ]
    try:
        found = _within(timeout_s + 2, lambda: _inspect_postgres(dsn, timeout_s))
    except _DeadlineExceeded:
        return verdict(
            "unreachable",
            f"PostgreSQL at {location} did not answer within {timeout_s:g} s",
            _pg_start_steps(),
        )
    except psycopg.ProgrammingError:
        return verdict(
            "bad_url",
            f"the PostgreSQL DSN {location} is malformed",
            ["write it as postgresql://user@host:5432/dbname (password in PGPASSWORD)"],
        )
    except psycopg.OperationalError as exc:
        return _postgres_failure(exc, dsn, location, verdict, init_steps)
    missing, counts = found
    if missing:
        return verdict(
            "schema_missing",
            f"PostgreSQL at {location} answers, but the kernel database schema is not applied "
            f"(missing: {', '.join(missing)})",
            init_steps,
        )
    return _ready("postgres", location, f"PostgreSQL at {location} is ready", counts)


def _inspect_postgres(dsn: str, timeout_s: float) -> tuple[list[str], dict[str, int]]:
    # libpq rounds connect_timeout to whole seconds and treats 1 as 2.
    with psycopg.connect(dsn, connect_timeout=max(2, round(timeout_s)), autocommit=True) as conn:
        expected = [*SCHEMA_TABLES, *VIEWS]
        present = conn.execute(
            "SELECT " + ", ".join("to_regclass(%s) IS NOT NULL" for _ in expected), expected
        ).fetchone()
        missing = [name for name, ok in zip(expected, present or (), strict=True) if not ok]
        for function, (argument_type, _) in FUNCTIONS.items():
            row = conn.execute(
                "SELECT to_regprocedure(%s) IS NOT NULL", (f"{function}({argument_type})",)
            )
            if not _scalar(row):
                missing.append(f"{function}()")
        if missing:
            return missing, {}
        counts = {
            t: int(_scalar(conn.execute(f"SELECT count(*) FROM {t}")))  # our constant names
            for t in TABLES
        }
        return [], counts


def _scalar(cursor: psycopg.Cursor[tuple[Any, ...]]) -> Any:
    """The one value of a single-value SELECT."""
    row = cursor.fetchone()
    assert row is not None, "a single-value SELECT returns one row"
    return row[0]


def _postgres_failure(
    exc: psycopg.OperationalError,
    dsn: str,
    location: str,
    verdict: Callable[[Problem, str, list[str]], StoreCheck],
    init_steps: list[str],
) -> StoreCheck:
    text = redact(str(exc).strip(), [dsn_password(dsn)])
    # libpq: "connection to server at "h", port p failed: <reason>\n\t<advice>"
    first_line = text.splitlines()[0] if text else type(exc).__name__
    detail = " ".join(first_line.rsplit("failed: ", 1)[-1].split())
    lowered = text.lower()
    if "database" in lowered and "does not exist" in lowered:
        return verdict(
            "database_missing",
            f"PostgreSQL answers, but the database of {location} does not exist ({detail})",
            [
                "create it: `createdb -h <host> -p <port> -U <user> <dbname>` "
                "(or CREATE DATABASE in psql)",
                *init_steps,
            ],
        )
    if any(
        marker in lowered
        for marker in ("authentication failed", "pg_hba.conf", "role", "password", "permission")
    ):
        return verdict(
            "auth_failed",
            f"PostgreSQL at {location} refused the login ({detail})",
            [
                "check the user name and password; keep the password in PGPASSWORD or ~/.pgpass "
                "rather than in the URL",
                "for a Supabase project use the connection string from Project Settings -> "
                "Database",
            ],
        )
    return verdict(
        "unreachable",
        f"no PostgreSQL server answers at {location} ({detail})",
        _pg_start_steps(),
    )


def _pg_start_steps() -> list[str]:
    return [
        "start the server, or check host, port and firewall",
        "a local one: `docker run -d -p 5432:5432 -e POSTGRES_PASSWORD=<pw> postgres:16`",
        "or keep the zero-set-up default: omit --store to use the SQLite file",
    ]


# --------------------------------------------------------------------------- supabase


def project_url(url: str) -> str:
    """The project's base URL, also when the REST URL (…/rest/v1) was given."""
    base = url.strip().rstrip("/")
    for suffix in ("/rest/v1", "/rest"):
        base = base.removesuffix(suffix)
    return base


def _create_project_steps() -> list[str]:
    return [
        "hosted: create a project at https://supabase.com/dashboard, then copy the Project URL "
        "and the service_role API key (row level security keeps the anon key out) from "
        "Project Settings -> API",
        "local: install the Supabase CLI and run `supabase start`; the API URL is "
        "http://127.0.0.1:54321 and `supabase status` prints the keys",
        f"export {SUPABASE_URL_ENV}=<project URL> and {SUPABASE_KEY_ENV}=<key>, apply "
        "schema_v2.txt in the project's SQL editor, then run `accelopt db check` again",
    ]


def _schema_steps() -> list[str]:
    return [
        f"open the SQL editor in the Supabase dashboard, paste {schema_file()} and run it",
        f'or: psql "$SUPABASE_DB_URL" -v ON_ERROR_STOP=1 -f {schema_file()} (the connection '
        "string is under Project Settings -> Database; local `supabase start`: "
        "postgresql://postgres:postgres@127.0.0.1:54322/postgres)",
        "or: `accelopt db init --store postgresql://...` with that direct connection string",
    ]


def _key_steps(had_key: bool) -> list[str]:
    first = (
        "the key was rejected: copy it again from Project Settings -> API (the service_role "
        "key: row level security keeps the anon key out); a local `supabase start` prints its "
        "keys in `supabase status`"
        if had_key
        else f"no API key was given: set {SUPABASE_KEY_ENV} (Project Settings -> API in the "
        "dashboard; `supabase status` for a local project)"
    )
    return [first, f"export {SUPABASE_KEY_ENV}=<key> (it is read from the environment only)"]


def _access_steps() -> list[str]:
    return [
        f"set {SUPABASE_KEY_ENV} to the project's service_role key (Project Settings -> API): "
        "row level security lets only it and team members in",
        "or give the key's role team access: an admin runs `GRANT accelopt_team TO "
        "authenticated;` (or TO <role>) in the SQL editor",
    ]


def _code(response: httpx.Response) -> object:
    """PostgREST's error code in an answer (None when it has none)."""
    body = _json_or_none(response)
    return body.get("code") if isinstance(body, dict) else None


def check_supabase(
    url: str, *, key: str | None = None, timeout_s: float = 5, count_rows: bool = True
) -> StoreCheck:
    """`count_rows=False` skips the row counts (`tables` is then None): opening a store needs
    to know the schema is there, not how big it is."""
    key = key if key is not None else os.environ.get(SUPABASE_KEY_ENV) or None
    base = project_url(url)
    location = redacted_url(base, [key])

    def verdict(problem: Problem, message: str, steps: list[str]) -> StoreCheck:
        return _failed("supabase", location, problem, redact(message, [key]), steps)

    try:
        parsed = httpx.URL(base)
    except httpx.InvalidURL as exc:
        return verdict("bad_url", f"not a URL: {exc}", _create_project_steps())
    if parsed.scheme not in ("http", "https") or not parsed.host:
        return verdict(
            "bad_url",
            f"{location} is not an http(s) URL with a host",
            ["the Project URL looks like https://<project-ref>.supabase.co"],
        )
    with _SupabaseProbe(base, key, timeout_s) as probe:
        try:
            # The first request bounds DNS and connect too; once the host has answered, each
            # later request is bounded by the client's own timeouts.
            first = _within(timeout_s + 1, probe.first)
        except (_DeadlineExceeded, httpx.TimeoutException):
            return verdict(
                "unreachable",
                f"nothing answered at {location} within {timeout_s:g} s (timed out); no "
                "Supabase API is reachable there",
                _create_project_steps(),
            )
        except httpx.TransportError as exc:
            return verdict(
                "unreachable",
                f"cannot reach {location} ({_reason(exc)}); no Supabase API answers there",
                _create_project_steps(),
            )
        problem = _classify(first)
        described = ""
        if problem == "not_supabase" and first.status_code == 404:
            # A 404 without PostgREST's error body: another web API, or a PostgREST too old
            # to name the missing table. PostgREST describes its API at /rest/v1/; a server
            # that does not is no Supabase project, whatever its 404 looks like.
            if probe.serves_postgrest():
                problem = "schema_missing"
            else:
                described = " and GET /rest/v1/ serves no PostgREST API description"
        if problem == "not_supabase":
            return verdict(
                "not_supabase",
                f"{location} answers HTTP, but is not a Supabase project (no PostgREST API "
                f"under /rest/v1): GET /rest/v1/definitions gave {_describe(first)}"
                f"{described}; check the URL",
                [
                    "use the Project URL (https://<project-ref>.supabase.co) from Project "
                    "Settings -> API, not the dashboard's address",
                    "a local `supabase start` serves the API at http://127.0.0.1:54321",
                ],
            )
        if problem == "key_rejected" and _code(first) == "42501":
            return verdict(
                "key_rejected",
                f"the Supabase API at {location} took the key, but its role may not read the "
                f"kernel database ({_describe(first)})",
                _access_steps(),
            )
        if problem == "key_rejected":
            what = "the API key" if key else "the request: no API key was given"
            return verdict(
                "key_rejected",
                f"the Supabase API at {location} rejected {what} ({_describe(first)})",
                _key_steps(bool(key)),
            )
        if problem == "unreachable":
            return verdict(
                "unreachable",
                f"the Supabase API at {location} answers, but its database does not "
                f"({_describe(first)}); a paused project must be restored in the dashboard",
                _create_project_steps(),
            )
        try:
            counts, missing = probe.inventory(count_rows=count_rows)
        except httpx.HTTPError as exc:
            return verdict(
                "unreachable",
                f"the Supabase API at {location} stopped answering during the check "
                f"({_reason(exc)})",
                _create_project_steps(),
            )
    if missing:
        return verdict(
            "schema_missing",
            f"Supabase at {location} answers, but the kernel database schema is not applied "
            f"(missing: {', '.join(missing)})",
            _schema_steps(),
        )
    return _ready(
        "supabase",
        location,
        f"Supabase project at {location} is ready",
        counts if count_rows else None,
    )


class _SupabaseProbe:
    """The HTTP requests of one Supabase check."""

    def __init__(self, base: str, key: str | None, timeout_s: float) -> None:
        self.rest = f"{base}/rest/v1"
        headers = {"Accept": "application/json"}
        if key:
            headers |= {"apikey": key, "Authorization": f"Bearer {key}"}
        self.client = httpx.Client(
            headers=headers, timeout=httpx.Timeout(timeout_s), follow_redirects=False
        )

    def __enter__(self) -> _SupabaseProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    def first(self) -> httpx.Response:
        return self.client.get(f"{self.rest}/definitions", params={"select": "name", "limit": 1})

    def serves_postgrest(self) -> bool:
        """Whether /rest/v1/ answers with the OpenAPI description PostgREST serves at its root
        (a Swagger 2.0 or OpenAPI document with paths)."""
        try:
            response = self.client.get(f"{self.rest}/")
        except httpx.HTTPError:
            return False
        body = _json_or_none(response)
        return (
            response.is_success
            and isinstance(body, dict)
            and ("swagger" in body or "openapi" in body)
            and isinstance(body.get("paths"), dict)
        )

    def inventory(self, *, count_rows: bool) -> tuple[dict[str, int], list[str]]:
        """Row counts of the tables, and the names of missing tables, views and functions."""
        counts: dict[str, int] = {}
        missing: list[str] = []
        prefer = {"Prefer": "count=exact"} if count_rows else {}
        for relation in [*SCHEMA_TABLES, *VIEWS]:
            response = self.client.get(
                f"{self.rest}/{relation}", params={"select": "*", "limit": 0}, headers=prefer
            )
            if not response.is_success:
                missing.append(relation)
            elif relation in TABLES:
                total = response.headers.get("content-range", "*/0").rpartition("/")[2]
                counts[relation] = int(total) if total.isdigit() else 0
        for function, (_, arguments) in FUNCTIONS.items():
            response = self.client.post(f"{self.rest}/rpc/{function}", json=arguments)
            if not response.is_success:
                missing.append(f"{function}()")
        return counts, missing


def _classify(response: httpx.Response) -> Problem | None:
    """None when the table answered; otherwise the problem the answer shows."""
    body = _json_or_none(response)
    code = body.get("code") if isinstance(body, dict) else None
    if response.is_success:
        return None if isinstance(body, list) else "not_supabase"
    if body is None:
        # Not JSON: PostgREST and Supabase's gateway always answer JSON; a web server's 404
        # page does not.
        return "not_supabase"
    if response.status_code in (401, 403) or code in ("PGRST301", "PGRST302", "PGRST303"):
        return "key_rejected"
    # PostgREST names an unknown table PGRST205 (42P01 before version 12); any 404 in its error
    # shape comes from a PostgREST. A 404 in some other JSON is told apart by the caller.
    if code in ("PGRST205", "42P01") or (response.status_code == 404 and _postgrest_error(body)):
        return "schema_missing"
    if response.status_code >= 500:
        return "unreachable"
    return "not_supabase"


def _postgrest_error(body: object) -> bool:
    """Whether a JSON body is PostgREST's error: an object with code, message, details and hint
    (null when empty), or at least a PGRST code."""
    if not isinstance(body, dict):
        return False
    code = body.get("code")
    return {"code", "message", "details", "hint"} <= body.keys() or (
        isinstance(code, str) and code.startswith("PGRST")
    )


def _json_or_none(response: httpx.Response) -> object:
    if "json" not in response.headers.get("content-type", ""):
        return None
    try:
        return response.json()
    except ValueError:
        return None


def _describe(response: httpx.Response) -> str:
    body = _json_or_none(response)
    kind = response.headers.get("content-type", "no content type").split(";")[0]
    if isinstance(body, dict) and (body.get("code") or body.get("message")):
        summary = " ".join(str(body[k]) for k in ("code", "message") if body.get(k))
        return f"HTTP {response.status_code}: {summary[:200]}"
    return f"HTTP {response.status_code}, {kind}"


def _reason(exc: httpx.HTTPError) -> str:
    text = str(exc) or type(exc).__name__
    lowered = text.lower()
    if "refused" in lowered:
        return "connection refused"
    if "name or service not known" in lowered or "nodename" in lowered or "resolve" in lowered:
        return "the host name does not resolve"
    if "certificate" in lowered or "ssl" in lowered:
        return f"TLS failed: {text.splitlines()[0][:160]}"
    return text.splitlines()[0][:200]
