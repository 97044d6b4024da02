"""The kernel database on any PostgreSQL 14+ server (including a Supabase project's direct
connection string), through psycopg 3 and a small connection pool.

Opening fails fast (a few seconds) with a message that says which of these it was: the server
does not answer, the password was rejected, the database does not exist, or the schema is not
applied. A DSN's password never appears in a message.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib import resources
from typing import Any

import psycopg
import psycopg_pool
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from accelopt_mcp.redaction import redact, redacted_url
from accelopt_mcp.store._rows import SOLUTION_COLUMNS
from accelopt_mcp.store._sql import Cursor, Row, SqlKernelStore
from accelopt_mcp.store.base import (
    ConflictError,
    StoreError,
    StoreUnavailableError,
    UnknownReferenceError,
)

CONNECT_TIMEOUT_S = 5
POOL_MAX_SIZE = 8
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
)
# Tables it gained the same way (CREATE TABLE IF NOT EXISTS, applied again).
_ADDED_TABLES = ("measurements", "run_entries", "hardware_peaks")
# Functions it gained the same way (CREATE OR REPLACE FUNCTION): shown name -> signature.
_ADDED_FUNCTIONS = {"search_experiences()": "search_experiences(text[])"}

INIT_HINT = (
    "run `accelopt db init --store <dsn>` or `psql -v ON_ERROR_STOP=1 -f schema_v2.txt <dsn>`"
)


def schema_v2() -> str:
    """schema_v2.txt as shipped in the package (identical to the repository's top-level file)."""
    return resources.files("accelopt_mcp.store").joinpath("schema_v2.txt").read_text("utf-8")


def _conninfo(dsn: str) -> dict[str, str]:
    """The DSN's parameters (raises psycopg.ProgrammingError for a malformed one)."""
    # Parsed from a string, every value is a string; psycopg types them loosely.
    return {name: str(value) for name, value in conninfo_to_dict(dsn).items() if value is not None}


def mask_dsn(dsn: str) -> str:
    """The DSN as postgresql://user@host:port/dbname: enough to recognise it, no secret (a DSN
    psycopg cannot parse is shown redacted instead)."""
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


class _PgCursor:
    def __init__(self, cur: psycopg.Cursor[Any]) -> None:
        self._cur = cur

    @staticmethod
    def _sql(sql: str) -> str:
        return sql.replace("?j", "%s::jsonb").replace("?", "%s")

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        self._cur.execute(self._sql(sql), tuple(params))
        return self._cur.fetchall() if self._cur.description else []

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        self._cur.execute(self._sql(sql), tuple(params))
        return self._cur.fetchone() if self._cur.description else None


class PostgresStore(SqlKernelStore):
    """KernelStore on PostgreSQL; `init_schema=True` applies schema_v2 when opening."""

    backend = "postgres"
    generated_keys = True
    now_sql = "clock_timestamp()"

    def __init__(self, dsn: str, *, init_schema: bool = False) -> None:
        if not isinstance(dsn, str) or not dsn:
            raise StoreUnavailableError("a PostgreSQL DSN is needed, e.g. postgresql://u@h/db")
        self._dsn = dsn
        self._secret = dsn_password(dsn)
        self.location = mask_dsn(dsn)
        self._probe()
        self._pool = psycopg_pool.ConnectionPool(
            dsn,
            min_size=1,
            max_size=POOL_MAX_SIZE,
            kwargs={
                "autocommit": True,
                "connect_timeout": CONNECT_TIMEOUT_S,
                # psycopg prepares a statement run often; a transaction pooler cannot keep it.
                "prepare_threshold": None if behind_transaction_pooler(dsn) else 5,
            },
            timeout=30,
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

    def _explain(self, exc: psycopg.OperationalError) -> str:
        detail = redact(
            str(exc).strip().splitlines()[-1] if str(exc).strip() else "", [self._secret]
        )
        lowered = str(exc).lower()
        state = getattr(exc, "sqlstate", None)
        where = self.location
        if state in ("28P01", "28000") or "authentication failed" in lowered:
            return (
                f"PostgreSQL at {where} rejected the login ({detail}); check the user and "
                "password (put the password in the DSN or in PGPASSWORD, never in a log)"
            )
        if state == "3D000" or ("database" in lowered and "does not exist" in lowered):
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
        added += list(_ADDED_FUNCTIONS)
        with self._tx(write=False) as cur:
            row = cur.one(
                "SELECT "
                + ", ".join(
                    f"to_regclass('{t}') IS NOT NULL AS {t}" for t in (*_REQUIRED, *_ADDED_TABLES)
                )
                + ", to_regprocedure('solution_ancestors(uuid)') IS NOT NULL AS lineage"
                + "".join(
                    f", to_regprocedure('{signature}') IS NOT NULL AS \"{name}\""
                    for name, signature in _ADDED_FUNCTIONS.items()
                )
                + "".join(
                    ", EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = "
                    f"current_schema() AND table_name = '{t}' AND column_name = '{c}') "
                    f'AS "{t}.{c}"'
                    for t, c in _ADDED_COLUMNS
                )
            )
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

    def apply_schema(self) -> None:
        """Apply schema_v2 (idempotent). A session lock keeps concurrent appliers apart."""
        sql = schema_v2()
        try:
            with self._pool.connection() as conn:
                conn.execute("SELECT pg_advisory_lock(%s)", (_SCHEMA_LOCK_KEY,))
                try:
                    conn.execute(sql)
                finally:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (_SCHEMA_LOCK_KEY,))
        except psycopg.Error as exc:
            raise StoreUnavailableError(
                f"applying schema_v2 to {self.location} failed: "
                f"{redact(str(exc), [self._secret])}; the user needs the right to create tables "
                "and functions in the public schema"
            ) from exc

    # ------------------------------------------------------------------ transactions
    @contextmanager
    def _tx(self, *, write: bool) -> Iterator[Cursor]:
        try:
            with (
                self._pool.connection() as conn,
                conn.transaction(),
                conn.cursor(row_factory=dict_row) as cur,
            ):
                yield _PgCursor(cur)
        except StoreError:
            raise
        except psycopg_pool.PoolTimeout as exc:
            raise StoreUnavailableError(
                f"no free connection to PostgreSQL at {self.location} within 30 s; the server "
                "may be down or overloaded"
            ) from exc
        except psycopg.Error as exc:
            raise self._translate(exc) from exc

    def _translate(self, exc: psycopg.Error) -> StoreError:
        message = redact(str(exc).strip(), [self._secret])
        if isinstance(exc, pg_errors.ForeignKeyViolation):
            return UnknownReferenceError(
                f"a referenced definition, workload, solution or run is not stored ({message})"
            )
        if isinstance(exc, pg_errors.UniqueViolation):
            return ConflictError(f"the record collides with a stored one ({message})")
        if isinstance(exc, pg_errors.UndefinedTable | pg_errors.UndefinedColumn) or (
            isinstance(exc, pg_errors.UndefinedFunction)
            and ("solution_" in message or "search_experiences" in message)
        ):
            return StoreUnavailableError(
                f"the kernel database schema is incomplete in {self.location} ({message}); "
                + INIT_HINT
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
