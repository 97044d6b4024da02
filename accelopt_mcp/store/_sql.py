"""The store logic both SQL databases share; SQLite and PostgreSQL differ only in the hooks.

Statements are written once with `?` for a parameter and `?j` for a JSON parameter; a dialect
rewrites them (psycopg: `%s`, `%s::jsonb`). References are checked inside the write
transaction before inserting, so an unknown definition, parent or workload gets a message
that names it instead of a bare foreign-key failure.

Over ~600 lines for one reason: it is the one implementation of the whole contract (base.py,
some forty methods over nine tables) that SQLite and PostgreSQL share; a split by table would
spread one transaction helper and one dialect over several files that change together.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any, Protocol

from accelopt_mcp.models import (
    Definition,
    Evaluation,
    LlmCallIn,
    Workload,
    pool_evaluations,
)
from accelopt_mcp.store import _ids, _retry, _rows, _search
from accelopt_mcp.store._keyed import KeyedStore
from accelopt_mcp.store.base import (
    Claim,
    ConflictError,
    ExperienceIn,
    ExperienceRecord,
    IdKind,
    LeaseLostError,
    LlmCallRecord,
    LlmTotals,
    MemorySearch,
    NewProfile,
    NewSolution,
    RunEntry,
    RunRecord,
    RunUpdate,
    SolutionLinks,
    StoredDefinition,
    StoredMeasurement,
    StoredProfile,
    StoredSolution,
    StoredWorkload,
    StoreError,
    StoreStats,
    SuiteRecord,
    UnknownReferenceError,
)

Row = Mapping[str, Any]
LINEAGE_DEPTH_CAP = 10000


class Cursor(Protocol):
    """What a dialect's transaction hands out: run one statement, read its rows."""

    known: set[tuple[str, str, Any]] | None
    """Inside a batch: the (table, key column, value) rows found to exist by earlier calls of
    the batch, so that each is looked up once (None outside a batch)."""

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]: ...

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None: ...


BATCH_CALLS = 500
"""Store calls per transaction inside a batch (SqlKernelStore.batch): a few hundred rows share
one commit, and a SQLite batch holds the file's write lock for a fraction of a second at a time,
so other writers wait briefly rather than for the whole import."""
BATCH_STATISTICS_CALLS = 1000
"""A batch of at least this many calls refreshes the planner's statistics as it ends."""


class Batch:
    """A batch open in one thread: the dialect's connection (and cursor) its calls share."""

    def __init__(self, conn: Any, cursor: Any = None) -> None:
        self.conn = conn
        self.cursor = cursor
        self.pipeline: Any = None
        """PostgreSQL: the connection's pipeline."""
        self.pending = 0
        """Calls in the open transaction (0: none open)."""
        self.calls = 0
        self.known: set[tuple[str, str, Any]] = set()
        self.failed: str | None = None
        """Why a call failed: the open transaction was rolled back, and the batch is over."""


# The batch each store has open, per thread (a store's calls from other threads do not join it).
_open_batches = threading.local()


def _cols(alias: str, columns: tuple[str, ...], prefix: str = "") -> str:
    return ", ".join(f"{alias}.{c} AS {prefix}{c}" for c in columns)


class SqlKernelStore(KeyedStore, abc.ABC):
    """KernelStore over schema_v2's tables; subclasses supply a connection and a dialect."""

    generated_keys: bool
    """True where definitions.name and workloads.uuid are generated from the JSON (PostgreSQL)."""
    now_sql: str
    """The database's current time, as an SQL expression."""

    # ------------------------------------------------------------------ dialect hooks
    @contextmanager
    def _tx(self, *, write: bool) -> Iterator[Cursor]:
        """One transaction; commits on success, rolls back on error, translates errors. Inside
        a batch, the batch's open transaction instead (_batch_call)."""
        batch = self._batch()
        if batch is None:
            with self._transaction(write=write) as cur:
                yield cur
        else:
            with self._batch_call(batch) as cur:
                yield cur

    @abc.abstractmethod
    def _transaction(self, *, write: bool) -> AbstractContextManager[Cursor]:
        """_tx outside a batch: a transaction of its own."""

    @abc.abstractmethod
    def _order(self, table: str, alias: str) -> str:
        """An expression that sorts a table's rows in insertion order."""

    @abc.abstractmethod
    def _word_search(self, words: list[str]) -> tuple[str, str, str, list[Any]]:
        """The memory items holding every word (store/_search.py): a FROM clause that names
        them `e`, a condition to AND with the other filters, an ORDER BY list putting the best
        match first (ties newest first), and the parameters of the FROM clause and the
        condition, in that order."""

    @abc.abstractmethod
    def _lineage(self, cur: Cursor, solution_id: str, *, up: bool) -> list[Row]:
        """Solutions above (nearest first) or below (breadth first) one solution."""

    @abc.abstractmethod
    def _location(self) -> str: ...

    def _no_limit(self) -> int | None:
        return None

    def _for_update(self) -> str:
        """What locks the rows a SELECT reads until the transaction ends (PostgreSQL: FOR
        UPDATE); nothing where a write transaction holds the whole database (SQLite)."""
        return ""

    def _secrets(self) -> tuple[str | None, ...]:
        return ()  # a DSN password where there is one (PostgreSQL)

    def _timestamp(self, value: datetime | None) -> Any:
        """A timestamp as a statement parameter (PostgreSQL: the datetime itself)."""
        return value

    # ------------------------------------------------------------------ helpers
    def _limit(self, limit: int | None) -> int | None:
        return self._no_limit() if limit is None else limit

    @staticmethod
    def _exists(cur: Cursor, table: str, key: str, value: Any) -> bool:
        # A row found once stays (the store deletes none of these), so a batch asks once.
        if cur.known is not None and (table, key, value) in cur.known:
            return True
        found = cur.one(f"SELECT 1 AS x FROM {table} WHERE {key} = ?", (value,)) is not None
        if found and cur.known is not None:
            cur.known.add((table, key, value))
        return found

    # ------------------------------------------------------------------ batches
    def _batch(self) -> Batch | None:
        """The batch this thread has open on this store, if any."""
        batches: dict[int, Batch] = getattr(_open_batches, "by_store", {})
        return batches.get(id(self))

    @contextmanager
    def batch(self) -> Iterator[None]:
        batches: dict[int, Batch] = _open_batches.__dict__.setdefault("by_store", {})
        if id(self) in batches:  # nested: the outer batch holds the transaction
            yield
            return
        with self._batch_connection() as state:
            batches[id(self)] = state
            try:
                yield
                if state.failed is not None:
                    # The caller went on after a failed call: what that call rolled back must
                    # not pass for stored.
                    raise StoreError(
                        f"a call in this batch failed ({state.failed}), which rolled back the "
                        "calls since the batch's last commit; run them again"
                    )
                self._batch_finish(state, commit=True)
            except BaseException:
                if state.pending:
                    self._batch_finish(state, commit=False)
                raise
            finally:
                del batches[id(self)]
        if state.calls >= BATCH_STATISTICS_CALLS:
            self._refresh_statistics(state.calls)

    @abc.abstractmethod
    def _batch_connection(self) -> AbstractContextManager[Batch]:
        """A connection held for a batch, as a Batch (no transaction open yet)."""

    @contextmanager
    def _batch_call(self, state: Batch) -> Iterator[Cursor]:
        """One call of a batch: in the batch's open transaction (begun if none is), committed
        with the BATCH_CALLS-th call; a call that fails rolls the transaction back and ends
        the batch."""
        if state.failed is not None:
            raise StoreError(
                f"an earlier call in this batch failed ({state.failed}); leave the batch and "
                "run the calls since its last commit again"
            )
        try:
            if not state.pending:
                self._batch_begin(state)
            yield self._batch_cursor(state)
        except BaseException as exc:
            error = self._batch_abort(state, exc)
            state.failed = str(error) or type(error).__name__
            if error is exc:
                raise
            raise error from exc
        state.pending += 1
        state.calls += 1
        if state.pending >= BATCH_CALLS:
            self._batch_finish(state, commit=True)
            self._batch_committed(state)

    @abc.abstractmethod
    def _batch_begin(self, state: Batch) -> None:
        """Open the batch's next transaction."""

    @abc.abstractmethod
    def _batch_cursor(self, state: Batch) -> Cursor:
        """The cursor a call of the batch runs its statements on."""

    @abc.abstractmethod
    def _batch_abort(self, state: Batch, exc: BaseException) -> BaseException:
        """A call of the batch raised `exc`: roll the open transaction back (state.pending
        becomes 0) and return the error to raise (`exc` itself, or the store's error for a
        database's)."""

    @abc.abstractmethod
    def _batch_finish(self, state: Batch, *, commit: bool) -> None:
        """Commit (or roll back) the batch's open transaction; state.pending becomes 0."""

    def _batch_committed(self, state: Batch) -> None:
        """After the commit of a full transaction (BATCH_CALLS calls) inside the batch."""

    def _refresh_statistics(self, written: int) -> None:
        """Bring the query planner's table statistics up to date after a batch of `written`
        calls, where they are out of date."""

    def _row(self, table: str, key: str, value: str, columns: tuple[str, ...]) -> Row | None:
        t = table[0]
        with self._tx(write=False) as cur:
            return cur.one(
                f"SELECT {_cols(t, columns)} FROM {table} {t} WHERE {t}.{key} = ?", (value,)
            )

    def _require_definition(self, cur: Cursor, name: str) -> None:
        if not self._exists(cur, "definitions", "name", name):
            raise UnknownReferenceError(_rows.unknown_definition(name))

    def _require_solution(self, cur: Cursor, solution_id: str | None, role: str) -> str | None:
        if solution_id is None:
            return None
        canonical = _rows.canonical_uuid(solution_id)
        if canonical is None or not self._exists(cur, "solutions", "id", canonical):
            raise UnknownReferenceError(_rows.unknown_solution(str(solution_id), role))
        return canonical

    def _require_run(self, cur: Cursor, run_id: str | None) -> None:
        if run_id is not None and not self._exists(cur, "runs", "id", run_id):
            raise UnknownReferenceError(_rows.unknown_run(run_id))

    # ------------------------------------------------------------------ definitions
    def upsert_definition(self, definition: Definition) -> str:
        definition = _rows.require(definition, Definition, "definition")
        doc = _rows.record_json(definition)
        with self._tx(write=True) as cur:
            if self.generated_keys:
                cur.one(
                    "INSERT INTO definitions (definition) VALUES (?j) ON CONFLICT (name) "
                    "DO UPDATE SET definition = excluded.definition",
                    (doc,),
                )
            else:
                cur.one(
                    "INSERT INTO definitions (name, definition) VALUES (?, ?j) ON CONFLICT (name) "
                    "DO UPDATE SET definition = excluded.definition",
                    (definition.name, doc),
                )
        return definition.name

    def list_definitions(self) -> list[StoredDefinition]:
        with self._tx(write=False) as cur:
            rows = cur.all(f"SELECT {_cols('d', _rows.DEFINITION_COLUMNS)} FROM definitions d")
        # Sorted here: PostgreSQL's ORDER BY follows the database's collation.
        return sorted((_rows.definition_from_row(r) for r in rows), key=lambda d: d.name)

    # ------------------------------------------------------------------ workloads
    def upsert_workload(self, definition_name: str, workload: Workload) -> str:
        _rows.require_str(definition_name, "definition_name")
        workload = _rows.require(workload, Workload, "workload")
        doc = _rows.workload_trace_json(definition_name, workload)
        with self._tx(write=True) as cur:
            stored = cur.one(
                "SELECT definition_name FROM workloads WHERE uuid = ?", (workload.uuid,)
            )
            if stored is not None:
                _rows.check_workload_definition(workload.uuid, stored, definition_name)
            self._require_definition(cur, definition_name)
            columns, values = ("definition_name, workload", "?, ?j")
            params: tuple[Any, ...] = (definition_name, doc)
            if not self.generated_keys:
                columns, values = "uuid, " + columns, "?, " + values
                params = (workload.uuid, *params)
            cur.one(
                f"INSERT INTO workloads ({columns}) VALUES ({values}) ON CONFLICT (uuid) "
                "DO UPDATE SET workload = excluded.workload",
                params,
            )
        return workload.uuid

    def list_workloads(self, definition_name: str) -> list[StoredWorkload]:
        _rows.check_strings(definition_name=definition_name)
        with self._tx(write=False) as cur:
            rows = cur.all(
                f"SELECT {_cols('w', _rows.WORKLOAD_COLUMNS)} FROM workloads w "
                f"WHERE w.definition_name = ? ORDER BY {self._order('workloads', 'w')}, w.uuid",
                (definition_name,),
            )
        return [_rows.workload_from_row(r) for r in rows]

    # ------------------------------------------------------------------ solutions
    def _upsert_solution(self, new: NewSolution) -> str:
        solution, version, digest = new.solution, new.hash_version, new.solution_hash
        doc = _rows.record_json(solution)
        # One row per (definition, source): the same source under another definition is
        # another solution.
        find = (
            "SELECT id FROM solutions WHERE definition_name = ? AND solution_hash = ? "
            "AND hash_version = ?"
        )
        key = (solution.definition, digest, version)
        with self._tx(write=True) as cur:
            for attempt in range(2):
                stored = cur.one(find, key)
                if stored is not None:
                    return str(stored["id"])
                if attempt:
                    break
                self._require_definition(cur, solution.definition)
                parent = self._require_solution(cur, new.parent_id, "parent_id")
                row = cur.one(
                    "INSERT INTO solutions (id, definition_name, parent_id, solution, "
                    "hash_version, solution_hash, evolve_metadata) VALUES (?, ?, ?, ?j, ?, ?, ?j) "
                    "ON CONFLICT (definition_name, solution_hash, hash_version) DO NOTHING "
                    "RETURNING id",
                    (
                        _rows.new_uuid(),
                        solution.definition,
                        parent,
                        doc,
                        version,
                        digest,
                        new.evolve_metadata,
                    ),
                )
                if row is not None:
                    return str(row["id"])
        raise ConflictError(f"solution hash {digest[:12]}... could not be stored; try again")

    def _update_solution_links(self, solution_id: str, links: SolutionLinks) -> StoredSolution:
        canonical = _rows.canonical_uuid(solution_id)
        with self._tx(write=True) as cur:
            row = (
                None
                if canonical is None
                else cur.one(self._solution_where("s.id = ?"), (canonical,))
            )
            if row is None:
                raise UnknownReferenceError(_rows.unknown_solution(str(solution_id), "solution_id"))
            stored = _rows.solution_from_row(row)
            parent = self._require_solution(cur, links.parent_id, "parent_id")
            cur.all(
                "UPDATE solutions SET parent_id = ?, solution = ?j, evolve_metadata = ?j "
                "WHERE id = ? RETURNING id",
                (
                    parent if parent is not None else stored.parent_id,
                    _rows.record_json(links.solution(stored)),
                    _rows.plain_json(links.metadata(stored), "evolve_metadata"),
                    stored.id,
                ),
            )
            updated = cur.one(self._solution_where("s.id = ?"), (stored.id,))
        assert updated is not None
        return _rows.solution_from_row(updated)

    def _solution_where(self, where: str) -> str:
        return f"SELECT {_cols('s', _rows.SOLUTION_COLUMNS)} FROM solutions s WHERE {where}"

    def find_solution(
        self, definition_name: str, solution_hash: str, hash_version: int = 1
    ) -> StoredSolution | None:
        _rows.check_strings(definition_name=definition_name, solution_hash=solution_hash)
        with self._tx(write=False) as cur:
            row = cur.one(
                self._solution_where(
                    "s.definition_name = ? AND s.solution_hash = ? AND s.hash_version = ?"
                ),
                (definition_name, solution_hash, hash_version),
            )
        return None if row is None else _rows.solution_from_row(row)

    def _list_solutions(
        self, filters: dict[str, str], limit: int | None, offset: int
    ) -> list[StoredSolution]:
        where, params = _equal({f"s.{col}": value for col, value in filters.items()})
        sql = (
            self._solution_where(where)
            + f" ORDER BY {self._order('solutions', 's')}, s.id LIMIT ? OFFSET ?"
        )
        with self._tx(write=False) as cur:
            rows = cur.all(sql, (*params, self._limit(limit), offset))
        return [_rows.solution_from_row(r) for r in rows]

    def ancestors(self, solution_id: str) -> list[StoredSolution]:
        return self._lineage_of(solution_id, up=True)

    def descendants(self, solution_id: str) -> list[StoredSolution]:
        return self._lineage_of(solution_id, up=False)

    def _lineage_of(self, solution_id: str, *, up: bool) -> list[StoredSolution]:
        canonical = _rows.canonical_uuid(solution_id)
        if canonical is None:
            return []
        with self._tx(write=False) as cur:
            rows = self._lineage(cur, canonical, up=up)
        return [_rows.solution_from_row(r) for r in rows]

    # ------------------------------------------------------------------ profiles
    def _upsert_profile(self, new: NewProfile) -> str:
        workload_uuid, evaluation = new.workload_uuid, new.evaluation
        config = new.benchmark_config
        doc = _rows.record_json(evaluation)
        # One write transaction, the profile row locked (SQLite: BEGIN IMMEDIATE holds the
        # database; PostgreSQL: FOR UPDATE), so that two writers of the same profile queue and
        # the second pools over the first's measurement too.
        with self._tx(write=True) as cur:
            if not self._exists(cur, "workloads", "uuid", workload_uuid):
                raise UnknownReferenceError(_rows.unknown_workload(workload_uuid))
            solution = self._require_solution(cur, new.solution_id, "solution_id")
            key = (
                workload_uuid,
                solution,
                new.benchmark_config_hash,
                evaluation.environment.hardware,
            )
            stored = self._lock_profile(cur, key)
            if stored is None:
                row = cur.one(
                    "INSERT INTO profiles (id, workload_uuid, solution_id, evaluation, "
                    "benchmark_config, benchmark_config_hash) VALUES (?, ?, ?, ?j, ?j, ?) "
                    "ON CONFLICT (workload_uuid, solution_id, benchmark_config_hash, "
                    "eval_hardware) DO NOTHING RETURNING id",
                    (
                        _rows.new_uuid(),
                        workload_uuid,
                        solution,
                        doc,
                        config,
                        new.benchmark_config_hash,
                    ),
                )
                if row is not None:
                    profile_id = str(row["id"])
                    self._add_measurement(cur, profile_id, doc)
                    pooled = pool_evaluations([evaluation])
                    if pooled is not evaluation:
                        self._set_evaluation(cur, profile_id, pooled, config)
                    return profile_id
                # PostgreSQL: another transaction stored this profile first; it is committed
                # now (the insert waited for it), so lock it and add to it.
                stored = self._lock_profile(cur, key)
                assert stored is not None
            profile_id = str(stored["id"])
            history = [
                _rows.evaluation_from_json(r["evaluation"])
                for r in cur.all(
                    "SELECT m.evaluation FROM measurements m WHERE m.profile_id = ? "
                    f"ORDER BY {self._order('measurements', 'm')}",
                    (profile_id,),
                )
            ]
            if not history:
                # Stored before measurements were kept: its evaluation was its one measurement.
                history = [_rows.evaluation_from_json(stored["evaluation"])]
                cur.one(
                    "INSERT INTO measurements (id, profile_id, evaluation, created_at) "
                    "VALUES (?, ?, ?j, ?)",
                    (
                        _rows.new_uuid(),
                        profile_id,
                        _rows.record_json(history[0]),
                        stored["created_at"],
                    ),
                )
            if any(_rows.same_measurement(evaluation, e) for e in history):
                return profile_id
            self._add_measurement(cur, profile_id, doc)
            self._set_evaluation(cur, profile_id, pool_evaluations([*history, evaluation]), config)
        return profile_id

    def _lock_profile(self, cur: Cursor, key: tuple[str, str | None, str, str]) -> Row | None:
        return cur.one(
            "SELECT p.id, p.evaluation, p.created_at FROM profiles p WHERE p.workload_uuid = ? "
            "AND p.solution_id = ? AND p.benchmark_config_hash = ? AND p.eval_hardware = ?"
            + self._for_update(),
            key,
        )

    @staticmethod
    def _add_measurement(cur: Cursor, profile_id: str, doc: str) -> None:
        cur.one(
            "INSERT INTO measurements (id, profile_id, evaluation) VALUES (?, ?, ?j)",
            (_rows.new_uuid(), profile_id, doc),
        )

    @staticmethod
    def _set_evaluation(cur: Cursor, profile_id: str, pooled: Evaluation, config: str) -> None:
        cur.one(
            "UPDATE profiles SET evaluation = ?j, benchmark_config = ?j WHERE id = ?",
            (_rows.record_json(pooled), config, profile_id),
        )

    def list_measurements(self, profile_id: str) -> list[StoredMeasurement]:
        canonical = _rows.canonical_uuid(profile_id)
        if canonical is None:
            return []
        with self._tx(write=False) as cur:
            rows = cur.all(
                f"SELECT {_cols('m', _rows.MEASUREMENT_COLUMNS)} FROM measurements m "
                f"WHERE m.profile_id = ? ORDER BY {self._order('measurements', 'm')}",
                (canonical,),
            )
        return [_rows.measurement_from_row(r) for r in rows]

    def _list_profiles(
        self, filters: dict[str, str], limit: int | None, offset: int
    ) -> list[StoredProfile]:
        # run_id is the solution's; every other filter is a column of profiles.
        where, params = _equal(
            {("s." if col == "run_id" else "p.") + col: value for col, value in filters.items()}
        )
        sql = (
            f"SELECT {_cols('p', _rows.PROFILE_COLUMNS)} FROM profiles p "
            f"JOIN solutions s ON s.id = p.solution_id WHERE {where} "
            f"ORDER BY {self._order('profiles', 'p')}, p.id LIMIT ? OFFSET ?"
        )
        with self._tx(write=False) as cur:
            rows = cur.all(sql, (*params, self._limit(limit), offset))
        return [_rows.profile_from_row(r) for r in rows]

    # ------------------------------------------------------------------ runs
    def create_run(self, run: RunRecord) -> str:
        run = _rows.require(run, RunRecord, "run")
        _rows.require_str(run.id, "run.id")
        config = _rows.plain_json(run.config, "run.config")
        error = _rows.redacted_text(run.error, self._secrets())
        with self._tx(write=True) as cur:
            stored = cur.one("SELECT definition_name FROM runs WHERE id = ?", (run.id,))
            if stored is not None:
                if _retry.uncertain() and stored["definition_name"] == run.definition_name:
                    # A retry: the attempt whose COMMIT lost its answer stored it after all.
                    return run.id
                raise ConflictError(
                    f"run {run.id!r} exists already; resume it with update_run, or create the "
                    "run under a new id"
                )
            self._require_definition(cur, run.definition_name)
            initial = self._require_solution(cur, run.initial_solution_id, "initial_solution_id")
            best = self._require_solution(cur, run.best_solution_id, "best_solution_id")
            cur.one(
                "INSERT INTO runs (id, definition_name, status, config, current_iteration, "
                "initial_solution_id, best_solution_id, best_latency_ms, tokens_in, tokens_out, "
                "cost_usd, error) VALUES (?, ?, ?, ?j, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run.id,
                    run.definition_name,
                    run.status,
                    config,
                    run.current_iteration,
                    initial,
                    best,
                    run.best_latency_ms,
                    run.tokens_in,
                    run.tokens_out,
                    run.cost_usd,
                    error,
                ),
            )
        return run.id

    def update_run(self, run_id: str, update: RunUpdate, *, holder: str | None = None) -> RunRecord:
        _rows.check_strings(run_id=run_id, holder=holder)
        update = _rows.require(update, RunUpdate, "update")
        changes = {k: v for k, v in update.model_dump().items() if v is not None}
        if "error" in changes:
            changes["error"] = _rows.redacted_text(changes["error"], self._secrets())
        with self._tx(write=True) as cur:
            for key in ("initial_solution_id", "best_solution_id"):
                if key in changes:
                    changes[key] = self._require_solution(cur, changes[key], key)
            sets = [f"{k} = {'?j' if k == 'config' else '?'}" for k in changes]
            sets.append(f"updated_at = {self.now_sql}")
            params = [
                _rows.plain_json(v, "config") if k == "config" else v for k, v in changes.items()
            ]
            fence, fenced = "", []
            if holder is not None:
                fence = " AND worker_id = ? AND status IN ('pending', 'running')"
                fenced = [holder]
            row = cur.one(
                f"UPDATE runs SET {', '.join(sets)} WHERE id = ?{fence} "
                f"RETURNING {', '.join(_rows.RUN_COLUMNS)}",
                (*params, run_id, *fenced),
            )
            if row is None and holder is not None:
                current = cur.one("SELECT worker_id, status FROM runs WHERE id = ?", (run_id,))
                if current is not None:
                    raise LeaseLostError(_rows.lease_lost(run_id, holder, current))
        if row is None:
            raise UnknownReferenceError(_rows.unknown_run(run_id))
        return _rows.run_from_row(row)

    # The lease algorithm, a dialect's: claim the run if it is free (one conditional UPDATE,
    # so that of several claimers exactly one sees the run free and takes it) and return its
    # row, else None; renew a holder's lease (False: it holds the run no longer).
    @abc.abstractmethod
    def _claim(self, cur: Cursor, claim: Claim) -> Row | None: ...

    @abc.abstractmethod
    def _renew(self, cur: Cursor, run_id: str, worker_id: str, lease_s: float) -> bool: ...

    def _claim_run(self, claim: Claim) -> RunRecord | None:
        with self._tx(write=True) as cur:
            row = self._claim(cur, claim)
            if row is None and not self._exists(cur, "runs", "id", claim.run_id):
                raise UnknownReferenceError(_rows.unknown_run(claim.run_id))
        return None if row is None else _rows.run_from_row(row)

    def _renew_run_lease(self, run_id: str, worker_id: str, lease_s: float) -> bool:
        with self._tx(write=True) as cur:
            return self._renew(cur, run_id, worker_id, lease_s)

    def release_run(self, run_id: str, worker_id: str) -> bool:
        _rows.check_strings(run_id=run_id, worker_id=worker_id)
        with self._tx(write=True) as cur:
            row = cur.one(
                "UPDATE runs SET lease_expires_at = NULL WHERE id = ? AND worker_id = ? "
                "RETURNING id",
                (run_id, worker_id),
            )
        return row is not None

    def _list_runs(self, filters: dict[str, str], limit: int) -> list[RunRecord]:
        where, params = _equal({f"r.{col}": value for col, value in filters.items()})
        with self._tx(write=False) as cur:
            rows = cur.all(
                f"SELECT {_cols('r', _rows.RUN_COLUMNS)} FROM runs r WHERE {where} "
                f"ORDER BY {self._order('runs', 'r')} DESC, r.id DESC LIMIT ?",
                (*params, limit),
            )
        return [_rows.run_from_row(r) for r in rows]

    # ------------------------------------------------------------------ optimization memory
    def add_experience(self, item: ExperienceIn) -> str:
        item = _rows.require(item, ExperienceIn, "experience")
        experience_id = _rows.new_text_id()
        with self._tx(write=True) as cur:
            self._require_run(cur, item.run_id)
            slow = self._require_solution(cur, item.slow_solution_id, "slow_solution_id")
            fast = self._require_solution(cur, item.fast_solution_id, "fast_solution_id")
            cur.one(
                "INSERT INTO experiences (id, run_id, namespace, definition_name, "
                "slow_solution_id, fast_solution_id, speedup, title, strategy, pseudocode, "
                "iteration, conditions) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?j) "
                # The id is the same on a retry (_retry.replayed_id): the row is there if an
                # attempt whose COMMIT lost its answer stored it.
                "ON CONFLICT (id) DO NOTHING",
                (
                    experience_id,
                    item.run_id,
                    item.namespace,
                    item.definition_name,
                    slow,
                    fast,
                    item.speedup,
                    item.title,
                    item.strategy,
                    item.pseudocode,
                    item.iteration,
                    _rows.conditions_json(item.conditions),
                ),
            )
        return experience_id

    def _recent_experiences(self, filters: dict[str, str], limit: int) -> list[ExperienceRecord]:
        where, params = _equal({f"e.{col}": value for col, value in filters.items()})
        with self._tx(write=False) as cur:
            rows = cur.all(
                f"SELECT {_cols('e', _rows.EXPERIENCE_COLUMNS)}, "
                f"{self._order('experiences', 'e')} AS queue_position "
                f"FROM experiences e WHERE e.removed = FALSE AND {where} "
                "ORDER BY queue_position DESC LIMIT ?",
                (*params, limit),
            )
        return [_rows.experience_from_row(r) for r in reversed(rows)]

    def _search_experiences(self, search: MemorySearch) -> list[ExperienceRecord]:
        words = _search.search_words(search.text)
        source, order = "experiences e", f"{self._order('experiences', 'e')} DESC"
        where: list[str] = []
        params: list[Any] = []
        if words is not None:
            source, condition, order, params = self._word_search(words)
            where.append(condition)
        for col, value in (
            ("e.definition_name", search.definition_name),
            ("e.namespace", search.namespace),
        ):
            if value is not None:
                where.append(f"{col} = ?")
                params.append(value)
        if not search.include_removed:
            where.append("e.removed = FALSE")
        with self._tx(write=False) as cur:
            rows = cur.all(
                f"SELECT {_cols('e', _rows.EXPERIENCE_COLUMNS)} FROM {source} "
                f"WHERE {' AND '.join(where) or '1 = 1'} ORDER BY {order} LIMIT ?",
                (*params, search.limit),
            )
        return [_rows.experience_from_row(r) for r in rows]

    def remove_experience(self, experience_id: str) -> bool:
        _rows.check_strings(experience_id=experience_id)
        with self._tx(write=True) as cur:
            row = cur.one(
                "UPDATE experiences SET removed = TRUE WHERE id = ? AND removed = FALSE "
                "RETURNING id",
                (experience_id,),
            )
        return row is not None

    # ------------------------------------------------------------------ run entries
    def put_run_entry(self, run_id: str, kind: str, key: str, data: dict[str, Any]) -> None:
        doc = _rows.run_entry_json(run_id, kind, key, data)
        with self._tx(write=True) as cur:
            self._require_run(cur, run_id)
            cur.one(
                "INSERT INTO run_entries (run_id, kind, key, data) VALUES (?, ?, ?, ?j) "
                "ON CONFLICT (run_id, kind, key) DO UPDATE SET data = excluded.data, "
                f"updated_at = {self.now_sql}",
                (run_id, kind, key, doc),
            )

    def run_entries(self, run_id: str, kind: str | None = None) -> list[RunEntry]:
        _rows.check_strings(run_id=run_id, kind=kind)
        where, params = "e.run_id = ?", [run_id]
        if kind is not None:
            where += " AND e.kind = ?"
            params.append(kind)
        with self._tx(write=False) as cur:
            rows = cur.all(
                f"SELECT {_cols('e', _rows.RUN_ENTRY_COLUMNS)} FROM run_entries e WHERE {where}",
                params,
            )
        return _rows.sorted_entries([_rows.run_entry_from_row(r) for r in rows])

    # ------------------------------------------------------------------ llm ledger
    def add_llm_call(self, call: LlmCallIn) -> str:
        call = _rows.require(call, LlmCallIn, "llm call")
        values = _rows.llm_call_values(
            call, self._secrets(), timestamp=self._timestamp, blob=lambda data: data
        )
        updates = ", ".join(
            f"{c} = COALESCE(excluded.{c}, llm_calls.{c})"
            if c in _rows.LLM_CALL_KEEP_WHEN_NONE
            else f"{c} = excluded.{c}"
            for c in values
            if c not in ("id", "run_id")
        )
        with self._tx(write=True) as cur:
            self._require_run(cur, call.run_id)
            cur.one(
                f"INSERT INTO llm_calls ({', '.join(values)}) "
                f"VALUES ({', '.join('?' for _ in values)}) "
                f"ON CONFLICT (id) DO UPDATE SET {updates}",
                tuple(values.values()),
            )
        return str(values["id"])

    def _list_llm_calls(
        self, filters: dict[str, str], limit: int | None, offset: int
    ) -> list[LlmCallRecord]:
        where, params = _equal({f"l.{col}": value for col, value in filters.items()})
        columns = _cols("l", _rows.LLM_CALL_COLUMNS)
        with self._tx(write=False) as cur:
            rows = cur.all(
                f"SELECT {columns} FROM llm_calls l WHERE {where} "
                f"ORDER BY {self._order('llm_calls', 'l')}, l.id LIMIT ? OFFSET ?",
                (*params, self._limit(limit), offset),
            )
        return [_rows.llm_call_from_row(r) for r in rows]

    def _llm_calls_by_id(self, call_id: str, prefix: str | None) -> list[LlmCallRecord]:
        columns = _cols("l", _rows.LLM_CALL_DETAIL_COLUMNS)
        with self._tx(write=False) as cur:
            rows = cur.all(f"SELECT {columns} FROM llm_calls l WHERE l.id = ?", (call_id,))
            if not rows and prefix is not None:
                rows = cur.all(
                    f"SELECT {columns} FROM llm_calls l WHERE l.id LIKE ? ORDER BY l.id LIMIT 2",
                    (prefix + "%",),
                )
        return [_rows.llm_call_from_row(r, detail=True) for r in rows]

    def mark_interrupted_llm_calls(self, run_id: str) -> int:
        _rows.check_strings(run_id=run_id)
        with self._tx(write=True) as cur:
            rows = cur.all(
                "UPDATE llm_calls SET status = 'interrupted', ok = FALSE, "
                "error = COALESCE(error, ?) WHERE run_id = ? AND status = 'in_flight' "
                "RETURNING id",
                (_rows.INTERRUPTED_ERROR, run_id),
            )
        return len(rows)

    def llm_totals(self, run_id: str) -> list[LlmTotals]:
        _rows.check_strings(run_id=run_id)
        counts = "".join(
            f", SUM(CASE WHEN status = '{status}' THEN 1 ELSE 0 END) AS {status}"
            for status in ("failed", "interrupted", "in_flight")
        )
        with self._tx(write=False) as cur:
            rows = cur.all(
                "SELECT role, COUNT(*) AS calls, CAST(SUM(tokens_in) AS BIGINT) AS tokens_in, "
                "CAST(SUM(tokens_out) AS BIGINT) AS tokens_out, SUM(latency_s) AS latency_s, "
                f"SUM(cost_usd) AS cost_usd{counts} FROM llm_calls WHERE run_id = ? "
                "GROUP BY role ORDER BY role",
                (run_id,),
            )
        return [LlmTotals.model_validate(dict(r)) for r in rows]

    # ------------------------------------------------------------------ ids
    def resolve_id(self, kind: IdKind, id_or_prefix: str) -> str | None:
        table, exact = _ids.id_lookup(kind, id_or_prefix)
        digits = _ids.prefix_hex(id_or_prefix)
        with self._tx(write=False) as cur:
            if exact is not None and self._exists(cur, table, "id", exact):
                return exact
            if digits is None:
                return None
            forms = _ids.prefix_forms(digits)
            # Hex digits and dashes only: nothing in a form is a LIKE wildcard. Lower-cased on
            # both sides, so that a run id in capitals (run ids are free text) answers in every
            # store alike: SQLite's LIKE ignores ASCII case, PostgreSQL's does not.
            rows = cur.all(
                f"SELECT CAST(t.id AS TEXT) AS id FROM {table} t WHERE "
                + " OR ".join("LOWER(CAST(t.id AS TEXT)) LIKE ?" for _ in forms)
                + " ORDER BY 1 LIMIT ?",
                (*(form + "%" for form in forms), _ids.AMBIGUOUS_SHOWN + 1),
            )
        return _ids.one_id(kind, id_or_prefix, [str(r["id"]) for r in rows])

    # ------------------------------------------------------------------ hardware peaks
    def put_hardware_peaks(self, hardware: str, peaks: dict[str, Any]) -> None:
        _rows.require_str(hardware, "hardware")
        doc = _rows.plain_json(peaks, "peaks")
        with self._tx(write=True) as cur:
            cur.one(
                "INSERT INTO hardware_peaks (hardware, peaks) VALUES (?, ?j) "
                "ON CONFLICT (hardware) DO UPDATE SET peaks = excluded.peaks, "
                f"measured_at = {self.now_sql}",
                (hardware, doc),
            )

    # ------------------------------------------------------------------ suites
    def _put_suite(self, record: SuiteRecord, spec: str) -> SuiteRecord:
        # created_at is left out of the update: a replaced suite keeps its first write's.
        with self._tx(write=True) as cur:
            row = cur.one(
                "INSERT INTO suites (id, name, source, backend, status, spec) "
                "VALUES (?, ?, ?, ?, ?, ?j) ON CONFLICT (id) DO UPDATE SET "
                "name = excluded.name, source = excluded.source, backend = excluded.backend, "
                f"status = excluded.status, spec = excluded.spec, updated_at = {self.now_sql} "
                f"RETURNING {', '.join(_rows.SUITE_COLUMNS)}",
                (record.id, record.name, record.source, record.backend, record.status, spec),
            )
        assert row is not None, "an upsert returns its row"
        return _rows.suite_from_row(row)

    def _list_suites(self, limit: int) -> list[SuiteRecord]:
        with self._tx(write=False) as cur:
            rows = cur.all(
                f"SELECT {_cols('s', _rows.SUITE_COLUMNS)} FROM suites s "
                "ORDER BY s.created_at DESC, s.id DESC LIMIT ?",
                (limit,),
            )
        return [_rows.suite_from_row(r) for r in rows]

    # ------------------------------------------------------------------ housekeeping
    def stats(self) -> StoreStats:
        counts = ", ".join(f"(SELECT COUNT(*) FROM {t}) AS {t}" for t in _rows.TABLES)
        with self._tx(write=False) as cur:
            row = cur.one(f"SELECT {counts}")
        assert row is not None
        return StoreStats(
            backend=self.backend,
            location=self._location(),
            counts={t: int(row[t]) for t in _rows.TABLES},
        )


def _equal(filters: Mapping[str, str]) -> tuple[str, list[str]]:
    """A WHERE condition that each column equals its value (always true when there are none),
    and its parameters."""
    where = " AND ".join(f"{col} = ?" for col in filters) or "1 = 1"
    return where, list(filters.values())
