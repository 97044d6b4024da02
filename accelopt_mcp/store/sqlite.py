"""The embedded default store: one SQLite file, shared safely by threads and processes.

WAL lets readers run beside the one writer; every write transaction starts with
BEGIN IMMEDIATE, so two writers queue on the busy timeout instead of failing on a lock
upgrade. Each thread (and each process after a fork) opens its own connection.

Over ~600 lines for one reason: the SQLite dialect of _sql.py plus what only an embedded file
has (its own schema migrations, the ranking walk and the lease UPDATE that PostgreSQL does in
stored functions); they change together when the schema does.
"""

from __future__ import annotations

import math
import os
import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager, suppress
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

from accelopt_mcp.store import _rows, _search
from accelopt_mcp.store._rows import SOLUTION_COLUMNS, new_uuid, timestamp_text
from accelopt_mcp.store._sql import (
    LINEAGE_DEPTH_CAP,
    Batch,
    Cursor,
    Row,
    SqlKernelStore,
    _cols,
)
from accelopt_mcp.store.base import (
    Claim,
    RankedSolution,
    Ranking,
    StoreError,
    StoreUnavailableError,
)

SCHEMA_VERSION = 7
"""2 -> 3: the measurements table (a profile's history). An older accelopt refuses a version-3
file: it would overwrite profiles without recording the measurement, and the pooled figure
would then disagree with the history.
3 -> 4: the LLM audit trail (llm_calls gains status, purpose, started_at, finished_at,
messages, reply; a stored failed call becomes status 'failed') and the run_entries table. An
older accelopt refuses a version-4 file: its ledger rows would carry no status, prompt or
reply.
4 -> 5: word search over the memory (the experiences_fts table and the triggers that keep it
in step; the store indexes the items already there) and the hardware_peaks cache. An older
accelopt refuses a version-5 file, as it refuses any newer one.
5 -> 6: a solution is one (definition, source) pair: solutions' UNIQUE (solution_hash,
hash_version) becomes UNIQUE (definition_name, solution_hash, hash_version), so the same source
may serve several definitions. SQLite cannot change a constraint in place: the store rebuilds
the table (_rebuild_solutions), keeping every row, its rowid and every reference to it.
6 -> 7: the suites table (benchmark campaigns), which the schema script creates in an older
file; there is nothing to fill. An older accelopt refuses a version-7 file, as it refuses any
newer one."""
BUSY_TIMEOUT_MS = 30_000
_NOW = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
# A lease's end: now plus ? seconds, in the stored timestamp form.
_LEASE_UNTIL = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+' || ? || ' seconds')"


def sqlite_schema() -> str:
    """The DDL, shipped as package data next to this module."""
    return resources.files("accelopt_mcp.store").joinpath("sqlite_schema.sql").read_text("utf-8")


# Columns added to the schema after files were written with it: (table, column); the column's
# definition is the schema's own (from its name to its closing keyword), added with ALTER TABLE
# to a file that lacks it. Generated VIRTUAL columns only: computed for the rows already there.
_ADDED_COLUMNS = (("profiles", "trusted"),)
# Plain columns added the same way (version 4), each defined on a line of its own in its
# table's CREATE TABLE; a NOT NULL one has a constant default, as ALTER TABLE requires.
_ADDED_PLAIN_COLUMNS = (
    *(
        ("llm_calls", column)
        for column in ("status", "purpose", "started_at", "finished_at", "messages", "reply")
    ),
    ("runs", "worker_id"),
    ("runs", "lease_expires_at"),
    # Without a version change: an older accelopt reads and writes such a file as before (it
    # names the columns it knows), its items simply carry no conditions.
    ("experiences", "conditions"),
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


def _solutions_unique_per_source(conn: sqlite3.Connection) -> bool:
    """Whether the file's solutions table still has the UNIQUE (solution_hash, hash_version)
    of schema versions up to 5 (one row per source, whatever its definition)."""
    for _, name, unique, origin, *_ in conn.execute("PRAGMA index_list(solutions)").fetchall():
        if unique and origin == "u":
            quoted = '"' + name.replace('"', '""') + '"'
            columns = [r[2] for r in conn.execute(f"PRAGMA index_info({quoted})")]
            if columns == ["solution_hash", "hash_version"]:
                return True
    return False


def _rebuild_solutions(conn: sqlite3.Connection, schema: str) -> None:
    """Give an older file's solutions table the schema's definition (version 6: unique per
    definition and source), by SQLite's documented procedure for a change ALTER TABLE cannot
    make (https://www.sqlite.org/lang_altertable.html#otheralter): in the caller's write
    transaction, begun with foreign keys off (the pragma does nothing inside a transaction), a
    new table takes every row, with its rowid (insertion order), the old one is dropped, the new
    one renamed, the old one's indexes and triggers made again, and the references from
    profiles, runs and experiences checked. Raises StoreUnavailableError when a reference does
    not resolve (the caller rolls back: the file stays as it was)."""
    block = re.search(r"CREATE TABLE IF NOT EXISTS solutions \((.*?)\n\);", schema, re.S)
    if block is None:
        raise RuntimeError("sqlite_schema.sql defines no table 'solutions'")
    kept = [
        r[0]
        for r in conn.execute(
            "SELECT sql FROM sqlite_master WHERE tbl_name = 'solutions' "
            "AND type IN ('index', 'trigger', 'view') AND sql IS NOT NULL ORDER BY rowid"
        )
    ]
    # table_xinfo's `hidden` is 0 for a stored column, 2 or 3 for a generated one.
    old = {r[1] for r in conn.execute("PRAGMA table_xinfo(solutions)") if r[6] == 0}
    # parent_id keeps naming `solutions`: once renamed, the new table refers to itself.
    conn.execute(f"CREATE TABLE solutions_v6 ({block.group(1)}\n)")
    new = [r[1] for r in conn.execute("PRAGMA table_xinfo(solutions_v6)") if r[6] == 0]
    copied = ", ".join(c for c in new if c in old)
    conn.execute(
        f"INSERT INTO solutions_v6 (rowid, {copied}) SELECT rowid, {copied} FROM solutions "
        "ORDER BY rowid"
    )
    conn.execute("DROP TABLE solutions")
    conn.execute("ALTER TABLE solutions_v6 RENAME TO solutions")
    for sql in kept:
        conn.execute(sql)
    broken = conn.execute("PRAGMA foreign_key_check").fetchall()
    if broken:
        where = ", ".join(f"{r[0]} row {r[1]} -> {r[2]}" for r in broken[:5])
        raise StoreUnavailableError(
            f"cannot bring the solutions table up to schema version 6: {len(broken)} row(s) "
            f"refer to records that are not stored ({where}); the file was left as it was. "
            "Fix or delete those rows with the sqlite3 shell, then open it again"
        )


def another_programs_tables(conn: sqlite3.Connection) -> list[str]:
    """The tables of a SQLite file that holds tables but none of the kernel database's (so
    another program's file), sorted; empty for a kernel database or a file with no table."""
    tables = [
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' "
            "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name"
        )
    ]
    return [] if set(_rows.SCHEMA_TABLES).intersection(tables) else tables


def another_programs_file(location: str, tables: list[str]) -> str:
    """Why a file that another_programs_tables found is refused."""
    shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
    return (
        f"{location} is a SQLite database of another program (its tables: {shown}), not a "
        "kernel database"
    )


def _refuse_another_programs_file(path: str) -> None:
    """Raise StoreUnavailableError when `path` is another program's SQLite file, named by a
    typo in --store: opening it would switch it to WAL and write our tables and user_version
    (by which that program may count its own migrations) into it. Read-only and before any
    other connection; a file that cannot be read so is left to the usual opening, which says
    what is wrong with it."""
    file = Path(path)
    if not file.is_file() or file.stat().st_size == 0:
        return
    try:
        with closing(sqlite3.connect(f"{file.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            tables = another_programs_tables(conn)
    except sqlite3.DatabaseError:
        return
    if tables:
        raise StoreUnavailableError(
            f"{another_programs_file(path, tables)}; it was left as it was. Point --store at a "
            "kernel database or at a new path"
        )


def _index_experiences(conn: sqlite3.Connection) -> None:
    """A file from before word search: index every stored item (the triggers index new ones)."""
    conn.execute("DELETE FROM experiences_fts")
    conn.execute(
        "INSERT INTO experiences_fts (id, title, strategy, pseudocode) "
        "SELECT id, title, strategy, pseudocode FROM experiences ORDER BY rowid"
    )


def _schema_objects(conn: sqlite3.Connection) -> set[tuple[str, str]]:
    """The schema's tables and indexes that the file holds, as (type, name)."""
    schema = sqlite_schema()
    declared = {("table", t) for t in re.findall(r"TABLE IF NOT EXISTS (\w+)", schema)}
    declared |= {("index", i) for i in re.findall(r"INDEX IF NOT EXISTS (\w+)", schema)}
    present = conn.execute("SELECT type, name FROM sqlite_master WHERE type IN ('table', 'index')")
    return {(r[0], r[1]) for r in present} & declared


def _schema_changes(
    before: set[tuple[str, str]], after: set[tuple[str, str]], columns: list[str], version: int
) -> list[str]:
    """What opening the file changed in its schema, one line each."""
    if not any(kind == "table" for kind, _ in before):
        return [f"created the schema (version {SCHEMA_VERSION})"]
    changes = [f"schema version {version} -> {SCHEMA_VERSION}"] if version < SCHEMA_VERSION else []
    for kind in ("table", "index"):
        new = sorted(name for k, name in after - before if k == kind)
        if new:
            changes.append(f"added {'indexes' if kind == 'index' else 'tables'}: {', '.join(new)}")
    if columns:
        changes.append(f"added columns: {', '.join(columns)}")
    return changes


class _SqliteCursor:
    def __init__(
        self, conn: sqlite3.Connection, known: set[tuple[str, str, Any]] | None = None
    ) -> None:
        self._conn = conn
        self.known = known

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return self._conn.execute(sql.replace("?j", "?"), tuple(params)).fetchall()

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        row: Row | None = self._conn.execute(sql.replace("?j", "?"), tuple(params)).fetchone()
        return row


# The query planner's statistics (sqlite_stat1). Without them SQLite guesses, and with 100k
# profiles it guessed wrong: ranking a definition's kernels sorted every one of its profiles
# (1.3 s; benchmarks/bench_store.py) and the per-attempt lookup read every profile of the
# workload (87 ms). The rule is PRAGMA optimize=0x10002's (analyze a table whose
# size changed tenfold since its last analysis), kept here rather than left to that pragma:
# before SQLite 3.46 (Debian 12 ships 3.40) it only looks at tables queried on the connection,
# and run on close it writes one-row figures for a new file's first rows, which mislead the
# planner once the tables fill. So: a table is analyzed once it holds ANALYZE_MIN_ROWS rows
# and whenever it has grown or shrunk tenfold since, checked as a store opens, every
# STATISTICS_CHECK_WRITES writes and after a batch; in full, not sampled (analysis_limit, or
# the pragma's own limit from 3.46): with sampled figures the planner still chose the sort.
ANALYZE_MIN_ROWS = 1000
STATISTICS_CHECK_WRITES = 1000


def _analyzed_tables(conn: sqlite3.Connection) -> dict[str, int]:
    """The tables sqlite_stat1 has figures for, with the row count it recorded."""
    recorded: dict[str, int] = {}
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat1'").fetchone():
        for table, stat in conn.execute("SELECT tbl, stat FROM sqlite_stat1").fetchall():
            rows = int(str(stat).split()[0]) if stat else 0
            recorded[table] = max(recorded.get(table, 0), rows)
    return recorded


def _stale_tables(conn: sqlite3.Connection) -> list[str]:
    """Our tables whose statistics are missing or ten times off their size (max(rowid): a
    seek, where count(*) reads the whole table)."""
    recorded = _analyzed_tables(conn)
    stale = []
    for table in _rows.TABLES:  # our own constant names, never input
        size = conn.execute(f"SELECT max(rowid) FROM {table}").fetchone()[0] or 0
        known = recorded.get(table)
        if size >= ANALYZE_MIN_ROWS and (known is None or not known / 10 <= size <= known * 10):
            stale.append(table)
    return stale


# Ranking a definition's kernels walks passed profiles in latency order and keeps the trusted
# ones of that definition: with `trusted` and `solution_id` in the index, the walk reads no
# profile row (computing `trusted` from each row's JSON made it three times slower). Made
# after the schema script, not in it: an older file gets `trusted` by ALTER TABLE only after
# the script has run (_init_schema), so there the script's CREATE INDEX would fail.
_RANKING_INDEXES = {
    "profiles_rank_idx": "profiles (latency_ms, trusted, solution_id)",
    "profiles_rank_hw_idx": "profiles (eval_hardware, latency_ms, trusted, solution_id)",
}


def _add_ranking_indexes(conn: sqlite3.Connection, path: str) -> None:
    present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    missing = [name for name in _RANKING_INDEXES if name not in present]
    if not missing:
        return
    _begin(conn, path, write=True)
    try:
        for name in missing:
            conn.execute(
                f"CREATE INDEX IF NOT EXISTS {name} ON {_RANKING_INDEXES[name]} "
                "WHERE eval_status = 'PASSED'"
            )
        # A new index on a table with figures has none of its own: the planner would guess.
        if "profiles" in _analyzed_tables(conn):
            conn.execute("ANALYZE profiles")
        conn.execute("COMMIT")
    except BaseException:
        conn.rollback()
        raise


def _begin(conn: sqlite3.Connection, path: str, *, write: bool) -> None:
    try:
        conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
    except sqlite3.OperationalError as exc:
        raise StoreUnavailableError(
            f"the SQLite database {path} stayed locked for {BUSY_TIMEOUT_MS // 1000} s: {exc}; "
            "another process holds a long write"
        ) from exc


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
        self.schema_changes: list[str] = []
        if not self.memory:
            try:
                # Every kernel, LLM prompt and reply lands here: a folder made for it, and a new
                # file (its -wal and -shm take the file's mode), are this user's alone, as the
                # viewer's and the HTTP server's tokens keep the same rows from other users.
                Path(self.path).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                if not os.path.lexists(self.path):
                    with suppress(FileExistsError):
                        os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            except OSError as exc:
                raise StoreUnavailableError(
                    f"cannot create the SQLite database {self.path} or its folder: {exc}; "
                    "choose a writable location (e.g. --store ~/kernels.db)"
                ) from exc
            _refuse_another_programs_file(self.path)
        self._init_schema()
        with self._memory_lock:
            try:
                _add_ranking_indexes(self._connection(), self.path)
            except sqlite3.DatabaseError as exc:
                raise StoreUnavailableError(
                    f"cannot set up the SQLite database {self.path}: {exc}; check that the "
                    "file is writable and was written by accelopt"
                ) from exc
        self._writes = 0
        self._refresh_statistics()

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
            rebuild = False
            try:
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if version > SCHEMA_VERSION:
                    raise StoreUnavailableError(
                        f"the SQLite database {self.path} has schema version {version}, newer "
                        f"than this accelopt knows ({SCHEMA_VERSION}); upgrade accelopt-mcp"
                    )
                schema = sqlite_schema()
                # Rebuilding solutions (version 6) needs foreign keys off, which only a
                # connection outside a transaction can set; checked again inside it, since
                # another process may have rebuilt it meanwhile.
                rebuild = version < 6 and _solutions_unique_per_source(conn)
                if rebuild:
                    conn.execute("PRAGMA foreign_keys = OFF")
                before = _schema_objects(conn)
                # One write transaction: the script, then the columns an older file lacks.
                conn.executescript("BEGIN IMMEDIATE;\n" + schema)
                added: list[str] = []
                for table, column in _ADDED_COLUMNS:
                    present = {r[1] for r in conn.execute(f"PRAGMA table_xinfo({table})")}
                    if column not in present:
                        conn.execute(
                            f"ALTER TABLE {table} ADD COLUMN {added_column_sql(schema, column)}"
                        )
                        added.append(f"{table}.{column}")
                for table, column in _ADDED_PLAIN_COLUMNS:
                    present = {r[1] for r in conn.execute(f"PRAGMA table_xinfo({table})")}
                    if column not in present:
                        definition = table_column_sql(schema, table, column)
                        conn.execute(f"ALTER TABLE {table} ADD COLUMN {definition}")
                        added.append(f"{table}.{column}")
                if version < 3:
                    _backfill_measurements(conn)
                if version < 4:
                    # Rows from before `status`: a failed call said so with ok = 0 only.
                    conn.execute("UPDATE llm_calls SET status = 'failed' WHERE ok = 0")
                if version < 5:
                    _index_experiences(conn)
                rebuilt = rebuild and _solutions_unique_per_source(conn)
                if rebuilt:
                    _rebuild_solutions(conn, schema)
                changes = _schema_changes(before, _schema_objects(conn), added, version)
                if rebuilt:
                    changes.append(_rows.SOLUTIONS_PER_DEFINITION)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
                self.schema_changes = changes
            except StoreUnavailableError:
                if conn.in_transaction:
                    conn.rollback()
                raise
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
                if "readonly" in str(exc).lower():
                    raise StoreUnavailableError(
                        f"cannot write the SQLite database {self.path} ({exc}): this user may "
                        "not write the file or its folder (SQLite keeps -wal and -shm files "
                        "beside it); make both writable, or copy the file somewhere writable "
                        "and point --store at the copy"
                    ) from exc
                raise StoreUnavailableError(
                    f"cannot set up the SQLite database {self.path}: {exc}; is it a SQLite file "
                    "written by accelopt?"
                ) from exc
            finally:
                if rebuild:
                    conn.execute("PRAGMA foreign_keys = ON")

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[Cursor]:
        if write:
            self._writes += 1  # a lost count under threads only shifts the next check
            if self._writes % STATISTICS_CHECK_WRITES == 0:
                self._refresh_statistics()
        with self._memory_lock if self.memory else _NoLock():
            conn = self._connection()
            _begin(conn, self.path, write=write)
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

    @contextmanager
    def _batch_connection(self) -> Iterator[Batch]:
        with self._memory_lock if self.memory else _NoLock():
            yield Batch(self._connection())

    def _batch_begin(self, state: Batch) -> None:
        _begin(state.conn, self.path, write=True)

    def _batch_cursor(self, state: Batch) -> Cursor:
        return _SqliteCursor(state.conn, state.known)

    def _batch_abort(self, state: Batch, exc: BaseException) -> BaseException:
        state.conn.rollback()
        state.pending = 0
        return _translate(exc) if isinstance(exc, sqlite3.Error) else exc

    def _batch_finish(self, state: Batch, *, commit: bool) -> None:
        conn: sqlite3.Connection = state.conn
        state.pending = 0
        try:
            if commit:
                conn.commit()
            else:
                conn.rollback()
        except sqlite3.Error as exc:
            conn.rollback()
            raise _translate(exc) from exc

    def _refresh_statistics(self, written: int = 0) -> None:
        """ANALYZE the tables whose statistics are missing or stale (_stale_tables; what a
        batch wrote shows in their sizes). Best effort: statistics only make queries faster,
        so a locked file goes without."""
        with self._memory_lock if self.memory else _NoLock():
            conn = self._connection()
            try:
                stale = _stale_tables(conn)
                if stale:
                    conn.execute("BEGIN IMMEDIATE")
                    for table in stale:
                        conn.execute(f"ANALYZE {table}")
                    conn.execute("COMMIT")
            except sqlite3.Error:
                if conn.in_transaction:
                    conn.rollback()

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
        # How many of the words each item holds: one FTS5 lookup per word (at most MAX_WORDS),
        # counted per item. bm25 alone would not do: it can rank an item with one word many
        # times above one with every word once.
        per_word = " UNION ALL ".join(
            "SELECT id FROM experiences_fts WHERE experiences_fts MATCH ?" for _ in words
        )
        return (
            "experiences_fts JOIN experiences e ON e.id = experiences_fts.id "
            f"JOIN (SELECT id, count(*) AS hits FROM ({per_word}) GROUP BY id) h ON h.id = e.id",
            "experiences_fts MATCH ?",
            # bm25 is lower for a better match; the id column's weight is unused.
            f"h.hits DESC, bm25(experiences_fts, 0, {weights}), e.rowid DESC",
            [*(_search.fts5_term(w) for w in words), _search.fts5_query(words)],
        )

    def _no_limit(self) -> int:
        return -1

    def _best_solutions(self, ranking: Ranking) -> list[RankedSolution]:
        # The PostgreSQL and Supabase stores call the schema's function best_solutions; SQLite
        # has no stored functions, and its planner would sort every profile of the definition
        # for the one query (see _ranking_source), so it walks the latency index in batches,
        # ranking by the same rule.
        where = ["s.definition_name = ?", "p.eval_status = 'PASSED'", "p.latency_ms IS NOT NULL"]
        if not ranking.include_flagged:
            where.append("p.trusted = TRUE")
        params: list[Any] = [ranking.definition_name]
        if ranking.hardware is not None:
            where.append("p.eval_hardware = ?")
            params.append(ranking.hardware)
        if ranking.workload_uuid is not None:
            where.append("p.workload_uuid = ?")
            params.append(ranking.workload_uuid)
        # Profiles in ranking order, ids only; the first row of each solution is its fastest
        # profile. Reading in batches lets the database walk the latency index and stop early
        # instead of ranking every profile of the definition, and only the winners' records
        # are read in full and decoded (at 100k profiles the decoding of the rows passed over
        # cost more than the query).
        batch = 2 * ranking.limit + 4
        # The tie rule of every store (schema_v2.txt's best_solutions): lower latency, then
        # the solution stored first, then the profile stored first (created_at, then id).
        order = "p.latency_ms, s.rowid, p.created_at, p.id"
        chosen: dict[str, str] = {}  # solution id -> its fastest profile's id, in rank order
        offset = 0
        with self._tx(write=False) as cur:
            sql = (
                f"SELECT s.id AS s_id, p.id AS p_id "
                f"FROM {self._ranking_source(cur, ranking.definition_name, batch)} "
                f"WHERE {' AND '.join(where)} ORDER BY {order} LIMIT ? OFFSET ?"
            )
            while len(chosen) < ranking.limit:
                rows = cur.all(sql, (*params, batch, offset))
                for r in rows:
                    if len(chosen) < ranking.limit:
                        chosen.setdefault(str(r["s_id"]), str(r["p_id"]))
                if len(rows) < batch:
                    break
                offset += batch
                batch *= 2
            full = (
                cur.all(
                    f"SELECT {_cols('s', _rows.SOLUTION_COLUMNS, 's_')}, "
                    f"{_cols('p', _rows.PROFILE_COLUMNS, 'p_')} "
                    "FROM profiles p JOIN solutions s ON s.id = p.solution_id "
                    f"WHERE p.id IN ({', '.join('?' for _ in chosen)})",
                    list(chosen.values()),
                )
                if chosen
                else []
            )
        by_profile = {str(r["p_id"]): r for r in full}
        return [
            _rows.ranked_from_row(by_profile[profile_id])
            for profile_id in chosen.values()
            if profile_id in by_profile
        ]

    def _ranking_source(self, cur: Cursor, definition_name: str, batch: int) -> str:
        # SQLite's planner does not weigh LIMIT against a filter: with ten definitions of 2k
        # kernels, statistics and all, it sorted all of one definition's profiles (60-110 ms,
        # more for bigger definitions) rather than walk the latency index until `batch` of
        # them came up (2 ms). Walking reads about batch / share rows, share being the
        # definition's part of all solutions; sorting reads its c solutions' profiles, at about
        # twice the cost per row. So walk (CROSS JOIN keeps profiles outermost) once c passes
        # sqrt(batch * total / 2), counted no further than that.
        top = cur.one("SELECT max(rowid) AS n FROM solutions")
        total = int(top["n"] or 0) if top is not None else 0
        enough = math.isqrt(batch * total // 2) + 1
        found = cur.one(
            "SELECT count(*) AS n FROM (SELECT 1 FROM solutions WHERE definition_name = ? LIMIT ?)",
            (definition_name, enough),
        )
        if found is not None and int(found["n"]) >= enough:
            return "profiles p CROSS JOIN solutions s ON s.id = p.solution_id"
        return "profiles p JOIN solutions s ON s.id = p.solution_id"

    # SQLite has no stored functions, so it cannot call the schema's claim_run and
    # renew_run_lease (schema_v2.txt) as the PostgreSQL and Supabase stores do: here is the
    # same algorithm as one conditional UPDATE each, taken under the file's write lock. Keep
    # the two in step.
    def _claim(self, cur: Cursor, claim: Claim) -> Row | None:
        marks = ", ".join("?" for _ in claim.statuses)
        return cur.one(
            f"UPDATE runs SET worker_id = ?, lease_expires_at = {_LEASE_UNTIL}, "
            f"status = COALESCE(?, status) WHERE id = ? AND status IN ({marks}) "
            "AND (worker_id IS NULL OR worker_id = ? OR worker_id = ? "
            f"OR lease_expires_at IS NULL OR lease_expires_at < {self.now_sql}) "
            f"RETURNING {', '.join(_rows.RUN_COLUMNS)}",
            (
                claim.worker_id,
                claim.lease_s,
                claim.set_status,
                claim.run_id,
                *claim.statuses,
                claim.worker_id,
                claim.steal_from,
            ),
        )

    def _renew(self, cur: Cursor, run_id: str, worker_id: str, lease_s: float) -> bool:
        row = cur.one(
            f"UPDATE runs SET lease_expires_at = {_LEASE_UNTIL} WHERE id = ? "
            "AND worker_id = ? AND status IN ('pending', 'running') RETURNING id",
            (lease_s, run_id, worker_id),
        )
        return row is not None

    def _location(self) -> str:
        return self.path

    def _timestamp(self, value: datetime | None) -> Any:
        return timestamp_text(value)

    def _lineage(self, cur: Cursor, solution_id: str, *, up: bool) -> list[Row]:
        step = "s.id = c.parent_id" if up else "s.parent_id = c.id"
        order = "c.depth" if up else "c.depth, s.rowid"
        columns = ", ".join(f"s.{c} AS {c}" for c in SOLUTION_COLUMNS)
        # A cycle (a hand-edited row, or update_solution_links called without linking.py's
        # check) is walked once, as schema_v2.txt's functions walk it with their path: the
        # walk stops at the solution it started from, and an ancestor loop that does not hold
        # it (the only other cycle a one-parent walk can meet) is cut at its first repeat.
        # No path column: building one costs time quadratic in the depth on every walk.
        rows = cur.all(
            "WITH RECURSIVE c (id, parent_id, depth) AS ("
            "SELECT id, parent_id, 0 FROM solutions WHERE id = ? "
            f"UNION ALL SELECT s.id, s.parent_id, c.depth + 1 FROM c JOIN solutions s ON {step} "
            f"WHERE s.id <> ? AND c.depth < {LINEAGE_DEPTH_CAP}) "
            f"SELECT {columns} FROM c JOIN solutions s ON s.id = c.id WHERE c.depth > 0 "
            f"ORDER BY {order}",
            (solution_id, solution_id),
        )
        seen: set[str] = set()
        walked: list[Row] = []
        for row in rows:
            if row["id"] in seen:
                break
            seen.add(row["id"])
            walked.append(row)
        return walked


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _translate(exc: sqlite3.Error) -> StoreError:
    message = str(exc)
    if isinstance(exc, sqlite3.IntegrityError):
        if "FOREIGN KEY" in message:
            return _rows.reference_error(message)
        if "UNIQUE" in message:
            return _rows.conflict_error(message)
        return StoreError(f"the record breaks a rule of the schema ({message})")
    if isinstance(exc, sqlite3.OperationalError) and "locked" in message:
        return StoreUnavailableError(
            f"the SQLite database is locked ({message}); another process holds a long write"
        )
    return StoreError(f"SQLite error: {message}")
