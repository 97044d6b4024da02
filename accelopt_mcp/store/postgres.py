"""The kernel database on any PostgreSQL 14+ server (including a Supabase project's direct
connection string), through psycopg 3 and a small connection pool.

Opening fails fast (a few seconds) with a message that says which of these it was: the server
does not answer, the password was rejected, the database does not exist, or the schema is not
applied. A DSN's password never appears in a message.

Over ~600 lines for one reason: the PostgreSQL dialect of _sql.py plus what only a server has
(opening with a clear failure, the connection pool, schema migration, stored functions); each
part is small, and they change together when the schema does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib import resources
from typing import Any

import psycopg
import psycopg_pool
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg.types.string import TextLoader

from accelopt_mcp.redaction import redact, redacted_url
from accelopt_mcp.store import _retry, _rows
from accelopt_mcp.store._rows import SOLUTION_COLUMNS
from accelopt_mcp.store._sql import Batch, Cursor, Row, SqlKernelStore, _cols
from accelopt_mcp.store.base import (
    Claim,
    RankedSolution,
    Ranking,
    StoreError,
    StoreUnavailableError,
)
from accelopt_mcp.store.url import misencoded_userinfo

CONNECT_TIMEOUT_S = 5
POOL_MAX_SIZE = 8
POOL_WAIT_S = 2
"""How long one attempt waits for a pooled connection (less when the retry window ends
sooner), and how long the pool keeps trying to replace a broken one on its own; beyond that
the store's retry (store/_retry.py) asks again, and a new request makes the pool connect at
once instead of after its growing pause: the first call after an outage gets through soon."""
# Failures that say the server is away for now (restarting, shutting down, too busy to take
# the transaction): retried. Class 08 (connection exceptions) is retried as a whole.
_TRANSIENT_STATES = frozenset({"57P01", "57P02", "57P03", "40001", "40P01"})
_TRANSIENT_CLASSES = ("08",)
_SCHEMA_LOCK_KEY = 0x61636365_6C6F7074  # "accelopt": one schema apply at a time per server
_REQUIRED = (
    "definitions",
    "workloads",
    "solutions",
    "profiles",
    "runs",
    "experiences",
    "llm_calls",
)

# Columns schema_v2.txt gained after databases were created with it (added there with
# ALTER TABLE ... ADD COLUMN IF NOT EXISTS): a database without them needs the file again.
_ADDED_COLUMNS = (
    ("profiles", "trusted"),
    *(
        ("llm_calls", column)
        for column in ("status", "purpose", "started_at", "finished_at", "messages", "reply")
    ),
    ("experiences", "search_vector"),
    ("runs", "worker_id"),
    ("runs", "lease_expires_at"),
    ("experiences", "conditions"),
)
# Tables it gained the same way (CREATE TABLE IF NOT EXISTS, applied again).
_ADDED_TABLES = ("measurements", "run_entries", "hardware_peaks", "suites")
# Functions it gained the same way (CREATE OR REPLACE FUNCTION): shown name -> signature.
_ADDED_FUNCTIONS = {
    "search_experiences()": "search_experiences(text[])",
    "claim_run()": "claim_run(text, text, double precision, text[], text, text)",
    "renew_run_lease()": "renew_run_lease(text, text, double precision)",
    "best_solutions()": "best_solutions(text, text, text, integer, boolean)",
}
# Functions whose body it changed (CREATE OR REPLACE, applied again): shown name -> (the
# function's signature, a text its current body holds), and what `accelopt db init` says on
# replacing it. A database with the older body answers, but not as this accelopt expects.
_CHANGED_FUNCTIONS = {
    "search_experiences() ranking partial matches": (
        "search_experiences(text[])",
        "' | '",
        "memory search: an item holding any of the words is found, ranked by how many it holds",
    ),
}
# Constraints it changed in place (DO blocks that check pg_constraint first): shown name ->
# (table, the constraint this accelopt needs), and what `accelopt db init` says on adding it.
_ADDED_CONSTRAINTS = {
    "solutions unique per definition": (
        "solutions",
        "solutions_definition_hash_key",
        _rows.SOLUTIONS_PER_DEFINITION,
    ),
}

INIT_HINT = (
    "run `accelopt db init --store <dsn>` or `psql -v ON_ERROR_STOP=1 -f schema_v2.txt <dsn>`"
)


def _facts_sql() -> str:
    """One row of booleans, one per table, column, function and constraint this accelopt
    needs: whether the database has it."""
    return (
        "SELECT "
        + ", ".join(f"to_regclass('{t}') IS NOT NULL AS {t}" for t in (*_REQUIRED, *_ADDED_TABLES))
        + ", to_regprocedure('solution_ancestors(uuid)') IS NOT NULL AS lineage"
        + "".join(
            f", to_regprocedure('{signature}') IS NOT NULL AS \"{name}\""
            for name, signature in _ADDED_FUNCTIONS.items()
        )
        # pg_attribute, not information_schema.columns: that lists only the columns the user
        # has privileges on, and a role kept out by row level security may have none yet.
        + "".join(
            f", EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('{t}') "
            f"AND attname = '{c}' AND NOT attisdropped) AS \"{t}.{c}\""
            for t, c in _ADDED_COLUMNS
        )
        + "".join(
            f", EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = to_regclass('{t}') "
            f"AND conname = '{c}') AS \"{name}\""
            for name, (t, c, _) in _ADDED_CONSTRAINTS.items()
        )
        + "".join(
            f", EXISTS (SELECT 1 FROM pg_proc WHERE oid = to_regprocedure('{signature}') "
            f'AND strpos(prosrc, {_literal(marker)}) > 0) AS "{name}"'
            for name, (signature, marker, _) in _CHANGED_FUNCTIONS.items()
        )
    )


def _literal(text: str) -> str:
    """`text` as an SQL string literal (its quotes doubled)."""
    return "'" + text.replace("'", "''") + "'"


TEAM_ROLE = "accelopt_team"
"""The role schema_v2.txt lets read and write every table (row level security keeps others
out); `GRANT accelopt_team TO <role>;` gives a role that access."""
ROW_LEVEL_SECURITY = (
    "row level security: on for every table; the anon role reads nothing, the owner and "
    f"service_role work as before; give a role access with GRANT {TEAM_ROLE} TO <role>;"
)


def _access_facts_sql() -> str:
    """Whether every table has row level security on (`secured`) and the team role exists."""
    tables = (*_REQUIRED, *_ADDED_TABLES)
    listed = ", ".join(f"'{t}'" for t in tables)
    return (
        "SELECT (SELECT count(*) FROM pg_class WHERE relnamespace = current_schema()::regnamespace "
        f"AND relrowsecurity AND relname IN ({listed})) = {len(tables)} AS secured, "
        f"EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{TEAM_ROLE}') AS team"
    )


def _schema_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What applying schema_v2.txt changed, one line each, from the facts before and after."""
    changes = _object_changes(before, after)
    if after.get("team") and not before.get("team"):
        changes.append(f"created role {TEAM_ROLE} (NOLOGIN), the team's access to the tables")
    if after.get("secured") and not before.get("secured"):
        changes.append(ROW_LEVEL_SECURITY)
    return changes


def _object_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    if not any(before[t] for t in _REQUIRED):
        return ["created the schema"]
    new = [name for name, present in after.items() if present and not before.get(name)]
    changes = []
    tables = [n for n in new if n in _ADDED_TABLES or n in _REQUIRED]
    columns = [n for n in new if n in {f"{t}.{c}" for t, c in _ADDED_COLUMNS}]
    functions = [n for n in new if n in _ADDED_FUNCTIONS or n == "lineage"]
    for what, names in (("tables", tables), ("columns", columns), ("functions", functions)):
        if names:
            changes.append(f"added {what}: {', '.join(names)}")
    changes += [said for name, (_, _, said) in _ADDED_CONSTRAINTS.items() if name in new]
    changes += [said for name, (_, _, said) in _CHANGED_FUNCTIONS.items() if name in new]
    return changes


def schema_v2() -> str:
    """schema_v2.txt as shipped in the package (identical to the repository's top-level file)."""
    return resources.files("accelopt_mcp.store").joinpath("schema_v2.txt").read_text("utf-8")


def _conninfo(dsn: str) -> dict[str, str]:
    """The DSN's parameters (raises psycopg.ProgrammingError for a malformed one)."""
    # Parsed from a string, every value is a string; psycopg types them loosely.
    return {name: str(value) for name, value in conninfo_to_dict(dsn).items() if value is not None}


def mask_dsn(dsn: str) -> str:
    """The DSN as postgresql://user@host:port/dbname: enough to recognise it, no secret (a DSN
    psycopg cannot parse, or one whose password libpq would cut short, is shown redacted
    instead)."""
    if misencoded_userinfo(dsn):
        return redacted_url(dsn)
    try:
        parts = _conninfo(dsn)
    except psycopg.ProgrammingError:
        return redacted_url(dsn)
    user = parts.get("user")
    host = parts.get("host") or "localhost"
    port = parts.get("port") or "5432"
    dbname = parts.get("dbname") or user or ""
    return f"postgresql://{user + '@' if user else ''}{host}:{port}/{dbname}"


def behind_transaction_pooler(dsn: str) -> bool:
    """True for a transaction-mode pooler (Supabase's Supavisor on port 6543, PgBouncer), where
    a server-side prepared statement may land on another backend and must not be used."""
    try:
        parts = _conninfo(dsn)
    except psycopg.ProgrammingError:
        return False
    return parts.get("port") == "6543" or "pooler.supabase.com" in (parts.get("host") or "")


def dsn_password(dsn: str) -> str | None:
    """The DSN's password, if it has one (None for a malformed DSN), to keep out of messages."""
    try:
        return _conninfo(dsn).get("password")
    except psycopg.ProgrammingError:
        return None


def _sync(state: Batch) -> None:
    if state.pipeline is not None:
        state.pipeline.sync()


# A statement whose rows the store reads: a SELECT (or WITH), or a write with RETURNING.
_RETURNS_ROWS = re.compile(r"^\s*(SELECT|WITH)\b|\bRETURNING\b", re.IGNORECASE)


class _PgCursor:
    """`pipelined`: the cursor is in pipeline mode (a batch), where a statement's result is
    known only once fetched: a statement that returns no rows is sent and not waited for (its
    error, if any, is raised by the next statement that is waited for, or by the commit)."""

    def __init__(
        self,
        cur: psycopg.Cursor[Any],
        known: set[tuple[str, str, Any]] | None = None,
        *,
        pipelined: bool = False,
    ) -> None:
        # JSONB as its text: _rows parses and validates a record from it in one pass, where
        # psycopg's json.loads and then pydantic took three times as long.
        cur.adapters.register_loader("jsonb", TextLoader)
        self._cur = cur
        self.known = known
        self._pipelined = pipelined

    @staticmethod
    def _sql(sql: str) -> str:
        return sql.replace("?j", "%s::jsonb").replace("?", "%s")

    def _has_rows(self, sql: str) -> bool:
        if self._pipelined:
            return _RETURNS_ROWS.search(sql) is not None
        return self._cur.description is not None

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        self._cur.execute(self._sql(sql), tuple(params))
        return self._cur.fetchall() if self._has_rows(sql) else []

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        self._cur.execute(self._sql(sql), tuple(params))
        return self._cur.fetchone() if self._has_rows(sql) else None


@_retry.retried_operations
class PostgresStore(SqlKernelStore):
    """KernelStore on PostgreSQL; `init_schema=True` applies schema_v2 when opening.

    Every operation rides out an outage of up to `retry_s` seconds (default
    $ACCELOPT_STORE_RETRY_S, else 30; store/_retry.py), then raises StoreOutageError; opening
    does not wait: it fails at once and says what is wrong."""

    backend = "postgres"
    generated_keys = True
    now_sql = "clock_timestamp()"

    def __init__(
        self, dsn: str, *, init_schema: bool = False, retry_s: float | None = None
    ) -> None:
        if not isinstance(dsn, str) or not dsn:
            raise StoreUnavailableError("a PostgreSQL DSN is needed, e.g. postgresql://u@h/db")
        self.retry_s = _retry.retry_window(retry_s)
        self._dsn = dsn
        self._secret = dsn_password(dsn)
        self.schema_changes: list[str] = []
        """What opening it changed in the schema (init_schema=True), one line each."""
        self.location = mask_dsn(dsn)
        self._probe()
        self._pool = psycopg_pool.ConnectionPool(
            dsn,
            min_size=1,
            max_size=POOL_MAX_SIZE,
            kwargs={
                "autocommit": True,
                "connect_timeout": CONNECT_TIMEOUT_S,
                # TCP keepalives: a connection whose peer silently vanished (a host gone, a
                # NAT that dropped it) fails within about a minute instead of hanging a query.
                "keepalives": 1,
                "keepalives_idle": 30,
                "keepalives_interval": 10,
                "keepalives_count": 3,
                # psycopg prepares a statement run often; a transaction pooler cannot keep it.
                "prepare_threshold": None if behind_transaction_pooler(dsn) else 5,
            },
            timeout=POOL_WAIT_S,
            reconnect_timeout=POOL_WAIT_S,
            check=self._check_connection,
            name="accelopt-store",
            open=False,
        )
        try:
            self._pool.open(wait=True, timeout=CONNECT_TIMEOUT_S * 2)
        except psycopg_pool.PoolTimeout as exc:
            self._pool.close()
            raise StoreUnavailableError(
                f"PostgreSQL at {self.location} did not give a connection in time; "
                "check that the server is up and accepts connections"
            ) from exc
        try:
            if init_schema:
                self.apply_schema()
            else:
                self._check_schema()
        except BaseException:
            self._pool.close()
            raise

    # ------------------------------------------------------------------ opening
    def _probe(self) -> None:
        """One direct connection, so that a failure is named before a pool retries it."""
        try:
            with psycopg.connect(self._dsn, connect_timeout=CONNECT_TIMEOUT_S):
                return
        except psycopg.ProgrammingError as exc:
            raise StoreUnavailableError(
                f"the PostgreSQL DSN is malformed ({redact(str(exc), [self._secret])}); write it "
                "as postgresql://user:password@host:5432/dbname"
            ) from exc
        except psycopg.OperationalError as exc:
            raise StoreUnavailableError(self._explain(exc)) from exc

    @staticmethod
    def _refusal(exc: psycopg.Error) -> str | None:
        """Why the server refused the connection, if waiting will not mend it: "login" or
        "database"; None when it did not answer (or not yet: starting up)."""
        lowered = str(exc).lower()
        state = getattr(exc, "sqlstate", None)
        if state in ("28P01", "28000") or "authentication failed" in lowered:
            return "login"
        if state == "3D000" or ("database" in lowered and "does not exist" in lowered):
            return "database"
        return None

    def _explain(self, exc: psycopg.Error) -> str:
        # libpq's last line is its hint, indented with a tab: the message is one line.
        detail = redact(
            str(exc).strip().splitlines()[-1].strip() if str(exc).strip() else "", [self._secret]
        )
        where = self.location
        refusal = self._refusal(exc)
        if refusal == "login":
            return (
                f"PostgreSQL at {where} rejected the login ({detail}); check the user and "
                "password (put the password in the DSN or in PGPASSWORD, never in a log)"
            )
        if refusal == "database":
            return (
                f"the database of {where} does not exist ({detail}); create it "
                "(`createdb <name>`, or in the Supabase dashboard), then " + INIT_HINT
            )
        return (
            f"PostgreSQL server not reachable at {where} ({detail}); check that it runs and "
            "that host, port and firewall allow the connection"
        )

    def _check_schema(self) -> None:
        added = [f"{t}.{c}" for t, c in _ADDED_COLUMNS] + list(_ADDED_TABLES)
        added += list(_ADDED_FUNCTIONS) + list(_ADDED_CONSTRAINTS) + list(_CHANGED_FUNCTIONS)
        with self._tx(write=False) as cur:
            row = cur.one(_facts_sql())
        absent = [name for name, present in (row or {}).items() if not present]
        missing = [name for name in absent if name not in added]
        if missing:
            raise StoreUnavailableError(
                f"the kernel database schema is not applied in {self.location} (missing: "
                f"{', '.join(missing)}); {INIT_HINT}"
            )
        if absent:
            raise StoreUnavailableError(
                f"the kernel database schema in {self.location} is older than this accelopt "
                f"(missing: {', '.join(absent)}); apply schema_v2.txt again to bring it up to "
                f"date (idempotent, keeps every row): {INIT_HINT}"
            )

    def apply_schema(self) -> list[str]:
        """Apply schema_v2 (idempotent) and return what it changed, one line each (also kept
        in schema_changes). A session lock keeps concurrent appliers apart."""
        sql = schema_v2()
        warnings: list[str] = []

        def warned(diag: psycopg.errors.Diagnostic) -> None:
            if diag.severity_nonlocalized == "WARNING" and diag.message_primary:
                warnings.append(f"warning: {diag.message_primary}")

        try:
            with self._pool.connection() as conn:
                conn.execute("SELECT pg_advisory_lock(%s)", (_SCHEMA_LOCK_KEY,))
                conn.add_notice_handler(warned)
                try:
                    facts = conn.cursor(row_factory=dict_row)
                    before = {
                        **(facts.execute(_facts_sql()).fetchone() or {}),
                        **(facts.execute(_access_facts_sql()).fetchone() or {}),
                    }
                    conn.execute(sql)
                    after = {
                        **(facts.execute(_facts_sql()).fetchone() or {}),
                        **(facts.execute(_access_facts_sql()).fetchone() or {}),
                    }
                finally:
                    conn.remove_notice_handler(warned)
                    conn.execute("SELECT pg_advisory_unlock(%s)", (_SCHEMA_LOCK_KEY,))
            self.schema_changes = _schema_changes(before, after) + warnings
            return self.schema_changes
        except psycopg.Error as exc:
            raise StoreUnavailableError(
                f"applying schema_v2 to {self.location} failed: "
                f"{redact(str(exc), [self._secret])}; the user needs the right to create tables "
                "and functions in the public schema"
            ) from exc

    # ------------------------------------------------------------------ transactions
    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[Cursor]:
        # A transient failure raises TransientStoreError, which the operation's retry
        # (@_retry.retried_operations) takes as "run the whole operation again".
        committing = False
        try:
            with (
                self._pool.connection(timeout=self._pool_wait()) as conn,
                conn.transaction(),
                conn.cursor(row_factory=dict_row) as cur,
            ):
                yield _PgCursor(cur)
                committing = True
        except StoreError:
            raise
        except psycopg_pool.PoolTimeout as exc:
            raise self._no_connection() from exc
        except psycopg.Error as exc:
            if self._transient(exc):
                # Broken in the body, the transaction was rolled back; broken while
                # committing, it may have been applied and only the answer lost.
                cause = f"{self._first_line(exc)} (SQLSTATE {exc.sqlstate or 'none'})"
                raise _retry.TransientStoreError(
                    f"lost the connection to PostgreSQL at {self.location} ({cause})",
                    cause=cause,
                    uncertain=committing and exc.sqlstate not in ("40001", "40P01"),
                ) from exc
            raise self._translate(exc) from exc

    def _retries_calls(self) -> bool:
        # In a batch the calls share one transaction, so one call cannot be run again alone
        # (what the batch did before it is rolled back with it): the batch fails as a whole.
        return self._batch() is None

    # ------------------------------------------------------------------ batches
    # A batch holds one pooled connection in pipeline mode: statements whose rows are not
    # read (a measurement, a run entry, a memory item, a ledger row) are sent without waiting
    # for the server, and BEGIN and COMMIT come once per BATCH_CALLS calls, not with each.
    @contextmanager
    def _batch_connection(self) -> Iterator[Batch]:
        # libpq before 14 has no pipeline mode: the batch then waits for each statement.
        piped = psycopg.Pipeline.is_supported()
        try:
            with (
                self._pool.connection(timeout=self._pool_wait()) as conn,
                conn.pipeline() if piped else contextlib.nullcontext() as pipeline,
                conn.cursor(row_factory=dict_row) as cur,
            ):
                state = Batch(conn, cur)
                state.pipeline = pipeline
                yield state
        except psycopg_pool.PoolTimeout as exc:
            raise self._no_connection() from exc
        except psycopg.Error as exc:
            # Leaving the pipeline waits for what was sent; a batch that failed already
            # raised its own error, so this one is what broke on the way out.
            raise self._batch_error(exc) from exc

    def _batch_begin(self, state: Batch) -> None:
        state.cursor.execute("BEGIN")

    def _batch_cursor(self, state: Batch) -> Cursor:
        return _PgCursor(state.cursor, state.known, pipelined=state.pipeline is not None)

    def _batch_abort(self, state: Batch, exc: BaseException) -> BaseException:
        error = self._batch_error(exc) if isinstance(exc, psycopg.Error) else exc
        self._batch_rollback(state)
        return error

    def _batch_committed(self, state: Batch) -> None:
        """ANALYZE the tables the batch is filling that were planned as near-empty: prepared
        statements and the foreign-key checks' own plans are kept per connection, made for a
        table of a few rows, and the table outgrows them. Inserting profiles into a new
        database slowed from 630/s to 325/s between its first and second thousand rows, and
        went back to 900/s after an ANALYZE (which makes every connection plan again). Such a
        table: statistics of under a thousand rows, more than 64 pages on disk. Cheap (one
        catalog query per BATCH_CALLS calls); each table is analyzed about once. Run between
        two transactions and best effort: what the batch wrote is committed already."""
        cur: psycopg.Cursor[Any] = state.cursor
        try:
            cur.execute(
                "SELECT t AS name FROM unnest(%s::text[]) AS t JOIN pg_class c "
                "ON c.oid = to_regclass(t) "
                "WHERE c.reltuples < 1000 AND pg_relation_size(c.oid) > 64 * 8192",
                (list(_rows.TABLES),),
            )
            grown = [str(r["name"]) for r in cur.fetchall()]
            if grown:
                cur.execute("ANALYZE " + ", ".join(grown))
                _sync(state)
        except psycopg.Error:
            # A broken connection fails the batch's next call, with its own message.
            with contextlib.suppress(psycopg.Error):
                _sync(state)

    def _batch_finish(self, state: Batch, *, commit: bool) -> None:
        if not commit:
            self._batch_rollback(state)
            return
        state.pending = 0
        try:
            state.cursor.execute("COMMIT")
            _sync(state)  # waits for every statement sent: their errors raise here
        except psycopg.Error as exc:
            error = self._batch_error(exc)
            state.failed = str(error)
            self._batch_rollback(state)
            raise error from exc

    @staticmethod
    def _batch_rollback(state: Batch) -> None:
        state.pending = 0
        with contextlib.suppress(psycopg.Error):
            _sync(state)  # ends an aborted pipeline, so that ROLLBACK is run
        try:
            state.cursor.execute("ROLLBACK")
            _sync(state)
        except psycopg.Error:
            pass  # a lost connection has no transaction left; the pool replaces it

    def _batch_error(self, exc: psycopg.Error) -> StoreError:
        """A failure inside a batch. Never one the operation's retry would take as "run me
        again": the batch's transaction, with the calls before this one, is gone."""
        if self._transient(exc):
            return StoreUnavailableError(
                f"lost the connection to PostgreSQL at {self.location} during a batch "
                f"({self._first_line(exc)}); the calls since its last commit were rolled "
                "back: run them again"
            )
        return self._translate(exc)

    def _refresh_statistics(self, written: int) -> None:
        """ANALYZE, after a batch, the tables it may have grown by a tenth or more (at most
        `written` rows each) or that were never analyzed, so that the next queries are planned
        on figures that count the new rows; autovacuum would, but up to minutes later. The
        others are left alone: analyzing them all takes seconds at 100k rows. Best effort."""
        try:
            with self._pool.connection(timeout=POOL_WAIT_S) as conn:
                sizes = conn.execute(
                    "SELECT t, (SELECT reltuples FROM pg_class WHERE oid = to_regclass(t)) "
                    "FROM unnest(%s::text[]) AS t",
                    (list(_rows.TABLES),),
                ).fetchall()
                # reltuples: -1 (PostgreSQL 14+) or 0 before a table's first analysis.
                stale = [t for t, rows in sizes if rows is not None and written * 10 > rows]
                if stale:
                    conn.execute("ANALYZE " + ", ".join(stale))
        except (psycopg.Error, psycopg_pool.PoolTimeout):
            pass

    @staticmethod
    def _pool_wait() -> float:
        left = _retry.remaining()
        return POOL_WAIT_S if left is None else max(0.1, min(POOL_WAIT_S, left))

    def _check_connection(self, conn: psycopg.Connection[Any]) -> None:
        """The pool's test of a connection before it hands it out. One that fails says the
        server went away (a restart, a failover): the idle ones are tested at once too, so
        that the pool does not hand them out one by one with a growing pause between them."""
        try:
            psycopg_pool.ConnectionPool.check_connection(conn)
        except psycopg.Error:
            self._pool.check()
            raise

    @staticmethod
    def _transient(exc: psycopg.Error) -> bool:
        if isinstance(exc, psycopg_pool.PoolClosed):
            return False  # the store was closed: no use waiting
        state = exc.sqlstate
        if state is None:
            # No SQLSTATE: libpq lost the connection (closed, reset), not a server's error.
            return isinstance(exc, psycopg.OperationalError)
        return state in _TRANSIENT_STATES or state.startswith(_TRANSIENT_CLASSES)

    def _no_connection(self) -> StoreError:
        """No pooled connection within POOL_WAIT_S: the server is away, or it refuses the
        login now (a changed password, a dropped database), or every connection is busy. One
        direct connection tells them apart; only the refusal is not worth waiting for."""
        try:
            with psycopg.connect(self._dsn, connect_timeout=CONNECT_TIMEOUT_S):
                cause = "every pooled connection stayed busy (the server is up)"
        except psycopg.OperationalError as exc:
            if self._refusal(exc) is not None:
                return StoreUnavailableError(self._explain(exc))
            cause = f"cannot connect: {self._first_line(exc)}"
        except psycopg.Error as exc:
            return StoreUnavailableError(self._explain(exc))
        return _retry.TransientStoreError(
            f"no connection to PostgreSQL at {self.location} ({cause})",
            cause=cause,
            uncertain=False,
        )

    def _message(self, exc: psycopg.Error) -> str:
        return redact(str(exc).strip(), [self._secret])

    def _first_line(self, exc: psycopg.Error) -> str:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        return redact(lines[0] if lines else type(exc).__name__, [self._secret])

    def _translate(self, exc: psycopg.Error) -> StoreError:
        message = self._message(exc)
        if isinstance(exc, pg_errors.ForeignKeyViolation):
            return _rows.reference_error(message)
        if isinstance(exc, pg_errors.UniqueViolation):
            return _rows.conflict_error(message)
        if isinstance(exc, pg_errors.UndefinedTable | pg_errors.UndefinedColumn) or (
            isinstance(exc, pg_errors.UndefinedFunction)
            and any(
                name in message
                for name in (
                    "solution_",
                    "search_experiences",
                    "claim_run",
                    "renew_run_lease",
                    "best_solutions",
                )
            )
        ):
            return StoreUnavailableError(
                f"the kernel database schema is incomplete in {self.location} ({message}); "
                + INIT_HINT
            )
        if isinstance(exc, pg_errors.InsufficientPrivilege):
            # Row level security (schema_v2.txt) or missing grants keep this login role out.
            return StoreUnavailableError(
                f"PostgreSQL at {self.location} refused this login role ({message}); connect "
                f"as the tables' owner, or have an admin run GRANT {TEAM_ROLE} TO <this role>;"
            )
        if isinstance(exc, psycopg.OperationalError):
            return StoreUnavailableError(
                f"lost the connection to PostgreSQL at {self.location} ({message})"
            )
        return StoreError(f"PostgreSQL error: {message}")

    def close(self) -> None:
        self._pool.close()

    # ------------------------------------------------------------------ dialect hooks
    def _order(self, table: str, alias: str) -> str:
        if table in ("solutions", "measurements", "experiences"):
            return f"{alias}.seq"
        return f"{alias}.created_at"

    def _word_search(self, words: list[str]) -> tuple[str, str, str, list[Any]]:
        # The schema's function, which the Supabase store calls through PostgREST too.
        return (
            "search_experiences(?::text[]) e",
            "1 = 1",
            "e.search_rank DESC, e.seq DESC",
            [words],
        )

    def _for_update(self) -> str:
        return " FOR UPDATE"

    def _best_solutions(self, ranking: Ranking) -> list[RankedSolution]:
        # The schema's best_solutions ranks (the function the Supabase store calls through
        # PostgREST: one ranking, one tie rule); the winners' rows are read in the same
        # statement.
        with self._tx(write=False) as cur:
            rows = cur.all(
                f"SELECT {_cols('s', SOLUTION_COLUMNS, 's_')}, "
                f"{_cols('p', _rows.PROFILE_COLUMNS, 'p_')} "
                "FROM best_solutions(?, ?, ?, ?::integer, ?::boolean) b "
                "JOIN solutions s ON s.id = b.solution_id JOIN profiles p ON p.id = b.profile_id "
                "ORDER BY b.place",
                dataclasses.astuple(ranking),
            )
        return [_rows.ranked_from_row(r) for r in rows]

    # The lease algorithm is the schema's claim_run and renew_run_lease, the functions the
    # Supabase store calls through PostgREST: one copy, run by the database.
    def _claim(self, cur: Cursor, claim: Claim) -> Row | None:
        return cur.one(
            f"SELECT {', '.join(_rows.RUN_COLUMNS)} "
            "FROM claim_run(?, ?, ?::double precision, ?::text[], ?, ?)",
            dataclasses.astuple(claim),
        )

    def _renew(self, cur: Cursor, run_id: str, worker_id: str, lease_s: float) -> bool:
        row = cur.one(
            "SELECT id FROM renew_run_lease(?, ?, ?::double precision)",
            (run_id, worker_id, lease_s),
        )
        return row is not None

    def _location(self) -> str:
        return self.location

    def _secrets(self) -> tuple[str | None, ...]:
        return (self._secret,)

    def _lineage(self, cur: Cursor, solution_id: str, *, up: bool) -> list[Row]:
        function = "solution_ancestors" if up else "solution_descendants"
        columns = ", ".join(f"l.{c} AS {c}" for c in SOLUTION_COLUMNS)
        return cur.all(
            f"SELECT {columns} FROM {function}(?::uuid) WITH ORDINALITY AS l ORDER BY l.ordinality",
            (solution_id,),
        )
