"""The embedded default store: one SQLite file, shared safely by threads and processes.

WAL lets readers run beside the one writer; every write transaction starts with
BEGIN IMMEDIATE, so two writers queue on the busy timeout instead of failing on a lock
upgrade. Each thread (and each process after a fork) opens its own connection.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

from accelopt_mcp.store import _search
from accelopt_mcp.store._rows import SOLUTION_COLUMNS, new_uuid, timestamp_text
from accelopt_mcp.store._sql import LINEAGE_DEPTH_CAP, Cursor, Row, SqlKernelStore
from accelopt_mcp.store.base import (
    ConflictError,
    StoreError,
    StoreUnavailableError,
    UnknownReferenceError,
)

SCHEMA_VERSION = 5
"""2 -> 3: the measurements table (a profile's history). An older accelopt refuses a version-3
file: it would overwrite profiles without recording the measurement, and the pooled figure
would then disagree with the history.
3 -> 4: the LLM audit trail (llm_calls gains status, purpose, started_at, finished_at,
messages, reply; a stored failed call becomes status 'failed') and the run_entries table. An
older accelopt refuses a version-4 file: its ledger rows would carry no status, prompt or
reply.
4 -> 5: word search over the memory (the experiences_fts table and the triggers that keep it
in step; the store indexes the items already there) and the hardware_peaks cache. An older
accelopt refuses a version-5 file, as it refuses any newer one."""
BUSY_TIMEOUT_MS = 30_000
_NOW = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"


def sqlite_schema() -> str:
    """The DDL, shipped as package data next to this module."""
    return resources.files("accelopt_mcp.store").joinpath("sqlite_schema.sql").read_text("utf-8")


# Columns added to the schema after files were written with it: (table, column); the column's
# definition is the schema's own (from its name to its closing keyword), added with ALTER TABLE
# to a file that lacks it. Generated VIRTUAL columns only: computed for the rows already there.
_ADDED_COLUMNS = (("profiles", "trusted"),)
# Plain columns added the same way (version 4), each defined on a line of its own in its
# table's CREATE TABLE; a NOT NULL one has a constant default, as ALTER TABLE requires.
_ADDED_PLAIN_COLUMNS = tuple(
    ("llm_calls", column)
    for column in ("status", "purpose", "started_at", "finished_at", "messages", "reply")
)


def added_column_sql(schema: str, column: str) -> str:
    """The definition of a generated column in the schema text ("trusted INTEGER GENERATED
    ALWAYS AS (...) VIRTUAL"), as ALTER TABLE ... ADD COLUMN takes it."""
    found = re.search(
        rf"^\s*({column}\s+\w+\s+GENERATED ALWAYS AS .*?\bVIRTUAL)\b", schema, re.S | re.M
    )
    if found is None:
        raise RuntimeError(f"sqlite_schema.sql defines no generated column {column!r}")
    return found.group(1)


def table_column_sql(schema: str, table: str, column: str) -> str:
    """The definition of a plain column in its table's CREATE TABLE ("status TEXT NOT NULL
    DEFAULT 'ok'"), as ALTER TABLE ... ADD COLUMN takes it."""
    block = re.search(
        rf"CREATE TABLE IF NOT EXISTS {table} \((.*?)\n\);", schema, re.S | re.IGNORECASE
    )
    if block is None:
        raise RuntimeError(f"sqlite_schema.sql defines no table {table!r}")
    found = re.search(rf"^\s*({column}\s+[^\n]*?),?\s*$", block.group(1), re.M)
    if found is None:
        raise RuntimeError(f"sqlite_schema.sql defines no column {table}.{column}")
    return found.group(1)


def _backfill_measurements(conn: sqlite3.Connection) -> None:
    """A file from before the measurements table: each stored profile was one measurement,
    so it becomes its profile's first (taken when the profile was stored)."""
    rows = conn.execute(
        "SELECT p.id, p.evaluation, p.created_at FROM profiles p WHERE NOT EXISTS "
        "(SELECT 1 FROM measurements m WHERE m.profile_id = p.id) ORDER BY p.rowid"
    ).fetchall()
    conn.executemany(
        "INSERT INTO measurements (id, profile_id, evaluation, created_at) VALUES (?, ?, ?, ?)",
        [(new_uuid(), r[0], r[1], r[2]) for r in rows],
    )


def _index_experiences(conn: sqlite3.Connection) -> None:
    """A file from before word search: index every stored item (the triggers index new ones)."""
    conn.execute("DELETE FROM experiences_fts")
    conn.execute(
        "INSERT INTO experiences_fts (id, title, strategy, pseudocode) "
        "SELECT id, title, strategy, pseudocode FROM experiences ORDER BY rowid"
    )


class _SqliteCursor:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return self._conn.execute(sql.replace("?j", "?"), tuple(params)).fetchall()

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        row: Row | None = self._conn.execute(sql.replace("?j", "?"), tuple(params)).fetchone()
        return row


class SqliteStore(SqlKernelStore):
    """KernelStore in a SQLite file (":memory:" for a private in-memory database)."""

    backend = "sqlite"
    generated_keys = False
    now_sql = _NOW

    def __init__(self, path: str | Path) -> None:
        self.memory = str(path) == ":memory:"
        self.path = str(path) if self.memory else str(Path(path).expanduser())
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        # An in-memory database lives in one connection, so its users take turns.
        self._memory_lock = threading.RLock()
        self._shared: sqlite3.Connection | None = None
        if not self.memory:
            try:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreUnavailableError(
                    f"cannot create the folder of the SQLite database {self.path}: {exc}; "
                    "choose a writable location (e.g. --store ~/kernels.db)"
                ) from exc
        self._init_schema()

    # ------------------------------------------------------------------ connections
    def _open(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=BUSY_TIMEOUT_MS / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA foreign_keys = ON")
            if not self.memory:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.DatabaseError as exc:
            raise StoreUnavailableError(
                f"cannot open the SQLite database {self.path}: {exc}; check that the path is a "
                "writable file made by accelopt (or a new path)"
            ) from exc
        with self._all_lock:
            self._all.append(conn)
        return conn

    def _connection(self) -> sqlite3.Connection:
        if self.memory:
            if self._shared is None:
                self._shared = self._open()
            return self._shared
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "pid", None) != os.getpid():
            conn = self._open()
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def _init_schema(self) -> None:
        with self._memory_lock:
            conn = self._connection()
            try:
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if version > SCHEMA_VERSION:
                    raise StoreUnavailableError(
                        f"the SQLite database {self.path} has schema version {version}, newer "
                        f"than this accelopt knows ({SCHEMA_VERSION}); upgrade accelopt-mcp"
                    )
                schema = sqlite_schema()
                # One write transaction: the script, then the columns an older file lacks.
                conn.executescript("BEGIN IMMEDIATE;\n" + schema)
                for table, column in _ADDED_COLUMNS:
                    present = {r[1] for r in conn.execute(f"PRAGMA table_xinfo({table})")}
                    if column not in present:
                        conn.execute(
                            f"ALTER TABLE {table} ADD COLUMN {added_column_sql(schema, column)}"
                        )
                for table, column in _ADDED_PLAIN_COLUMNS:
                    present = {r[1] for r in conn.execute(f"PRAGMA table_xinfo({table})")}
                    if column not in present:
                        definition = table_column_sql(schema, table, column)
                        conn.execute(f"ALTER TABLE {table} ADD COLUMN {definition}")
                if version < 3:
                    _backfill_measurements(conn)
                if version < 4:
                    # Rows from before `status`: a failed call said so with ok = 0 only.
                    conn.execute("UPDATE llm_calls SET status = 'failed' WHERE ok = 0")
                if version < 5:
                    _index_experiences(conn)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                if conn.in_transaction:
                    conn.rollback()
                if "fts5" in str(exc).lower():
                    raise StoreUnavailableError(
                        f"cannot set up the SQLite database {self.path}: this Python's SQLite "
                        f"({sqlite3.sqlite_version}) lacks the FTS5 extension that memory search "
                        "uses; use a Python whose sqlite3 has it (python.org, Debian, Ubuntu, "
                        "Homebrew and conda builds do), or a PostgreSQL store"
                    ) from exc
                raise StoreUnavailableError(
                    f"cannot set up the SQLite database {self.path}: {exc}; is it a SQLite file "
                    "written by accelopt?"
                ) from exc

    @contextmanager
    def _tx(self, *, write: bool) -> Iterator[Cursor]:
        with self._memory_lock if self.memory else _NoLock():
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            except sqlite3.OperationalError as exc:
                raise StoreUnavailableError(
                    f"the SQLite database {self.path} stayed locked for "
                    f"{BUSY_TIMEOUT_MS // 1000} s: {exc}; another process holds a long write"
                ) from exc
            try:
                yield _SqliteCursor(conn)
            except BaseException as exc:
                conn.rollback()
                if isinstance(exc, sqlite3.Error):
                    raise _translate(exc) from exc
                raise
            else:
                try:
                    conn.commit()
                except sqlite3.Error as exc:
                    conn.rollback()
                    raise _translate(exc) from exc

    def close(self) -> None:
        with self._all_lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()
        self._shared = None

    # ------------------------------------------------------------------ dialect hooks
    def _order(self, table: str, alias: str) -> str:
        return f"{alias}.rowid"

    def _word_search(self, words: list[str]) -> tuple[str, str, str, list[Any]]:
        weights = ", ".join(f"{w:g}" for w in _search.FTS5_WEIGHTS)
        return (
            "experiences_fts JOIN experiences e ON e.id = experiences_fts.id",
            "experiences_fts MATCH ?",
            # bm25 is lower for a better match; the id column's weight is unused.
            f"bm25(experiences_fts, 0, {weights}), e.rowid DESC",
            [_search.fts5_query(words)],
        )

    def _no_limit(self) -> int:
        return -1

    def _location(self) -> str:
        return self.path

    def _timestamp(self, value: datetime | None) -> Any:
        return timestamp_text(value)

    def _lineage(self, cur: Cursor, solution_id: str, *, up: bool) -> list[Row]:
        step = "s.id = c.parent_id" if up else "s.parent_id = c.id"
        order = "c.depth" if up else "c.depth, s.rowid"
        columns = ", ".join(f"s.{c} AS {c}" for c in SOLUTION_COLUMNS)
        return cur.all(
            "WITH RECURSIVE c (id, parent_id, depth) AS ("
            "SELECT id, parent_id, 0 FROM solutions WHERE id = ? "
            f"UNION ALL SELECT s.id, s.parent_id, c.depth + 1 FROM c JOIN solutions s ON {step} "
            f"WHERE c.depth < {LINEAGE_DEPTH_CAP}) "
            f"SELECT {columns} FROM c JOIN solutions s ON s.id = c.id WHERE c.depth > 0 "
            f"ORDER BY {order}",
            (solution_id,),
        )


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _translate(exc: sqlite3.Error) -> StoreError:
    message = str(exc)
    if isinstance(exc, sqlite3.IntegrityError):
        if "FOREIGN KEY" in message:
            return UnknownReferenceError(
                f"a referenced definition, workload, solution or run is not stored ({message})"
            )
        if "UNIQUE" in message:
            return ConflictError(f"the record collides with a stored one ({message})")
        return StoreError(f"the record breaks a rule of the schema ({message})")
    if isinstance(exc, sqlite3.OperationalError) and "locked" in message:
        return StoreUnavailableError(
            f"the SQLite database is locked ({message}); another process holds a long write"
        )
    return StoreError(f"SQLite error: {message}")
