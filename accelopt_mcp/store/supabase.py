"""The kernel database in a Supabase project, through the official `supabase` client (PostgREST).

Same tables as the PostgreSQL store (schema_v2.txt, applied once in the project), same semantics.
Opening checks the project first (`check_supabase`) and stops with what is wrong and how to fix
it: nothing listening, key rejected, schema not applied, not a Supabase URL. It never falls back
to another store. Requests time out after `timeout_s` (default 10 s), not the client's default
two minutes. A request that fails for now (connection refused, reset or timed out; HTTP 502,
503, 504) is sent again for up to `retry_s` seconds (store/_retry.py; postgrest-py's own
retries are off), then StoreOutageError is raised.

Supabase caps a response at `max_rows` rows (1000 by default), so reads without a limit fetch
page after page; `page_size` must not exceed the project's max_rows.

Over ~600 lines for one reason: it is the whole contract (base.py, some forty methods over
nine tables) for one database reached one way (PostgREST); a split by table would spread its
paging, retries and error mapping over several files that change together.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import httpx
from postgrest.exceptions import APIError
from pydantic import BaseModel
from supabase import Client, ClientOptions, create_client

from accelopt_mcp.models import (
    Definition,
    LlmCallIn,
    Workload,
    pool_evaluations,
)
from accelopt_mcp.redaction import redact
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
    RankedSolution,
    Ranking,
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
    StoreUnavailableError,
    SuiteRecord,
    UnknownReferenceError,
)
from accelopt_mcp.store.detect import (
    SUPABASE_KEY_ENV,
    SUPABASE_URL_ENV,
    check_supabase,
    project_url,
)

Row = dict[str, Any]
Query = Any
"""A postgrest-py request builder (select/insert/update/... chains); untyped upstream."""

PROFILE_KEY = "workload_uuid,solution_id,benchmark_config_hash,eval_hardware"
_POOL_ATTEMPTS = 5
"""Rounds of pooling a profile's measurements while other writers keep adding to it."""
_SCHEMA_CODES = {"PGRST205", "42P01", "PGRST202", "PGRST204", "42703"}
_KEY_CODES = {"PGRST301", "PGRST302", "PGRST303"}
_UNAVAILABLE_STATUSES = frozenset({502, 503, 504, 520})
"""Answers of a gateway or of PostgREST that say the database is out of reach for now
(PostgREST answers 503 PGRST000-PGRST002 when it cannot reach it; 520 is Cloudflare's)."""


class _Unavailable(Exception):
    """An answer with one of _UNAVAILABLE_STATUSES, raised by the HTTP client's hook."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"HTTP {status}" + (f" ({text})" if text else ""))
        self.status = status


def _raise_unavailable(response: httpx.Response) -> None:
    """httpx response hook: turn a 502/503/504 into _Unavailable, whatever its body (a
    gateway's may not be PostgREST's JSON, and postgrest-py would not tell the status)."""
    if response.status_code not in _UNAVAILABLE_STATUSES:
        return
    response.read()
    try:
        body = response.json()
        text = " ".join(str(body.get(k)) for k in ("code", "message") if body.get(k))
    except (ValueError, AttributeError):
        text = response.reason_phrase
    raise _Unavailable(response.status_code, text[:200])


def _doc(record: BaseModel) -> Any:
    """A record as the JSON value stored in a JSONB column (every field, defaults included)."""
    return json.loads(_rows.record_json(record))


class SupabaseStore(KeyedStore):
    """KernelStore on a Supabase project (URL and key default to $SUPABASE_URL / $SUPABASE_KEY)."""

    backend = "supabase"
    page_size = 1000

    def __init__(
        self,
        url: str | None = None,
        *,
        key: str | None = None,
        timeout_s: float = 10,
        retry_s: float | None = None,
    ) -> None:
        self.retry_s = _retry.retry_window(retry_s)
        url = url or os.environ.get(SUPABASE_URL_ENV)
        if not url:
            raise StoreUnavailableError(
                f"no Supabase project URL: pass one (https://<project-ref>.supabase.co) or set "
                f"{SUPABASE_URL_ENV}; it is shown under Project Settings -> API in the dashboard"
            )
        key = key or os.environ.get(SUPABASE_KEY_ENV)
        if not key:
            raise StoreUnavailableError(
                f"no Supabase API key: set {SUPABASE_KEY_ENV} to the project's service_role key "
                "(row level security keeps the anon key out), found in the Supabase dashboard "
                "under Project Settings -> API (`supabase status` for a local project)"
            )
        self._key = key
        self.timeout_s = timeout_s
        check = check_supabase(url, key=key, timeout_s=timeout_s, count_rows=False)
        if not check.ok:
            raise StoreUnavailableError(check.explain())
        self.location = check.location
        self._http = httpx.Client(
            timeout=httpx.Timeout(timeout_s), event_hooks={"response": [_raise_unavailable]}
        )
        options = ClientOptions(
            httpx_client=self._http,
            auto_refresh_token=False,
            persist_session=False,
            postgrest_client_retry=False,  # _run retries, for retry_s (one policy, one place)
        )
        self._client: Client = create_client(project_url(url), key, options=options)
        # Built now, not lazily on first use, so threads sharing the store share one client.
        self._postgrest = self._client.postgrest

    # ------------------------------------------------------------------ plumbing
    def _secrets(self) -> tuple[str | None, ...]:
        return (self._key,)

    def _table(self, name: str) -> Any:
        return self._postgrest.from_(name)

    def _run(
        self,
        query: Query,
        *,
        on_missing_reference: Callable[[str], str] | None = None,
        once: bool = False,
    ) -> Any:
        """Execute one request, again through a short outage (PostgREST runs each request as
        a transaction of its own, so the request is what is retried); translate what goes
        wrong into the store's errors. `once`: an insert under keys chosen before the first
        attempt, so that a retry that collides with them after an attempt whose answer was
        lost takes the stored rows as its own (returns None) instead of a ConflictError."""
        return _retry.run(
            lambda: self._send(query, on_missing_reference, once),
            retry_s=self.retry_s,
            location=self.location,
        )

    def _send(
        self, query: Query, on_missing_reference: Callable[[str], str] | None, once: bool
    ) -> Any:
        try:
            return query.execute()
        except APIError as exc:
            if once and exc.code == "23505" and _retry.uncertain():
                return None
            raise self._translate(exc, on_missing_reference) from None
        except _Unavailable as exc:
            cause = redact(str(exc), [self._key])
            raise _retry.TransientStoreError(
                f"Supabase at {self.location} answers, but its database does not ({cause}); a "
                "paused project must be restored in the dashboard",
                cause=f"{cause}: the database is out of reach",
            ) from None
        except httpx.TimeoutException as exc:
            raise _retry.TransientStoreError(
                f"Supabase at {self.location} did not answer within {self.timeout_s:g} s; "
                "check the project is running (not paused) and reachable",
                cause=f"no answer within {self.timeout_s:g} s ({type(exc).__name__})",
                uncertain=not isinstance(exc, httpx.ConnectTimeout),
            ) from None
        except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            detail = redact(str(exc) or type(exc).__name__, [self._key])
            raise _retry.TransientStoreError(
                f"lost the connection to Supabase at {self.location} ({detail})",
                cause=f"connection lost ({detail})",
                uncertain=not isinstance(exc, httpx.ConnectError),
            ) from None
        except httpx.TransportError as exc:
            raise StoreUnavailableError(
                f"lost the connection to Supabase at {self.location} "
                f"({redact(str(exc) or type(exc).__name__, [self._key])})"
            ) from None

    def _translate(
        self, exc: APIError, on_missing_reference: Callable[[str], str] | None
    ) -> StoreError:
        code = exc.code or ""
        text = redact(" ".join(str(p) for p in (exc.message, exc.details) if p), [self._key])
        if code == "23503":
            detail = str(exc.details or exc.message or "")
            if on_missing_reference is not None:
                return UnknownReferenceError(on_missing_reference(detail))
            return UnknownReferenceError(f"a referenced record is not stored ({text})")
        if code == "23505":
            return _rows.conflict_error(text)
        # 42883 is also "operator does not exist" (a type mismatch), not only a missing function.
        if code in _SCHEMA_CODES or (
            code == "42883" and ("solution_" in text or "search_experiences" in text)
        ):
            return StoreUnavailableError(
                f"the kernel database schema is incomplete in Supabase at {self.location} "
                f"({code}: {text}); apply schema_v2.txt in the project's SQL editor, then run "
                "`accelopt db check`"
            )
        if code == "42501":
            # PostgREST answers 401 (anon) or 403 with it: permission denied, or a row that
            # row level security (schema_v2.txt) does not let this key's role write.
            return StoreUnavailableError(
                f"Supabase at {self.location} refused this key ({text}): the kernel database's "
                "row level security lets only the service_role key and team members in; set "
                f"{SUPABASE_KEY_ENV} to the service_role key (Project Settings -> API), or have "
                "an admin grant team access to the key's role in the SQL editor: "
                "GRANT accelopt_team TO authenticated;"
            )
        if code in _KEY_CODES or code == "401" or "api key" in text.lower():
            return StoreUnavailableError(
                f"Supabase at {self.location} rejected the API key ({text}); copy it again from "
                f"Project Settings -> API into {SUPABASE_KEY_ENV}"
            )
        return StoreError(f"Supabase error {code}: {text}")

    def _rows(self, query: Query, **kwargs: Any) -> list[Row]:
        return list(self._run(query, **kwargs).data)

    def _first(self, query: Query) -> Row | None:
        rows = self._rows(query.limit(1))
        return rows[0] if rows else None

    def _paged(self, make: Callable[[], Query], limit: int | None, offset: int = 0) -> list[Row]:
        """All rows of an ordered query (from `offset`, at most `limit`), page by page."""
        rows: list[Row] = []
        while True:
            want = self.page_size if limit is None else min(self.page_size, limit - len(rows))
            if want <= 0:
                return rows
            start = offset + len(rows)
            page = self._rows(make().range(start, start + want - 1))
            rows += page
            if len(page) < want:
                return rows

    def _row(self, table: str, key: str, value: str, columns: tuple[str, ...]) -> Row | None:
        return self._first(self._table(table).select(",".join(columns)).eq(key, value))

    def _filtered(self, table: str, columns: Sequence[str], filters: dict[str, str]) -> Query:
        """The rows of `table` (these columns) where each filter's column equals its value."""
        query = self._table(table).select(",".join(columns))
        for column, value in filters.items():
            query = query.eq(column, value)
        return query

    @staticmethod
    def _canonical_solution(solution_id: str | None, role: str) -> str | None:
        if solution_id is None:
            return None
        canonical = _rows.canonical_uuid(solution_id)
        if canonical is None:
            raise UnknownReferenceError(_rows.unknown_solution(str(solution_id), role))
        return canonical

    # ------------------------------------------------------------------ definitions
    def upsert_definition(self, definition: Definition) -> str:
        definition = _rows.require(definition, Definition, "definition")
        self._run(
            self._table("definitions").upsert(
                {"definition": _doc(definition)}, on_conflict="name", returning="minimal"
            )
        )
        return definition.name

    def list_definitions(self) -> list[StoredDefinition]:
        columns = ",".join(_rows.DEFINITION_COLUMNS)
        rows = self._paged(lambda: self._table("definitions").select(columns).order("name"), None)
        # Sorted here: the database's ORDER BY follows its collation (pages need one order).
        return sorted((_rows.definition_from_row(r) for r in rows), key=lambda d: d.name)

    # ------------------------------------------------------------------ workloads
    def upsert_workload(self, definition_name: str, workload: Workload) -> str:
        _rows.require_str(definition_name, "definition_name")
        workload = _rows.require(workload, Workload, "workload")
        stored = self._first(
            self._table("workloads").select("definition_name").eq("uuid", workload.uuid)
        )
        if stored is not None:
            _rows.check_workload_definition(workload.uuid, stored, definition_name)
        trace = json.loads(_rows.workload_trace_json(definition_name, workload))
        self._run(
            self._table("workloads").upsert(
                {"definition_name": definition_name, "workload": trace},
                on_conflict="uuid",
                returning="minimal",
            ),
            on_missing_reference=lambda _: _rows.unknown_definition(definition_name),
        )
        return workload.uuid

    def list_workloads(self, definition_name: str) -> list[StoredWorkload]:
        _rows.check_strings(definition_name=definition_name)
        columns = ",".join(_rows.WORKLOAD_COLUMNS)
        rows = self._paged(
            lambda: (
                self._table("workloads")
                .select(columns)
                .eq("definition_name", definition_name)
                .order("created_at")
                .order("uuid")
            ),
            None,
        )
        return [_rows.workload_from_row(r) for r in rows]

    # ------------------------------------------------------------------ solutions
    def _by_hash(self, definition_name: str, digest: str, version: int) -> Query:
        """The solution of one (definition, source) pair: a source may serve several
        definitions, one row each."""
        return (
            self._table("solutions")
            .select(",".join(_rows.SOLUTION_COLUMNS))
            .eq("definition_name", definition_name)
            .eq("solution_hash", digest)
            .eq("hash_version", version)
        )

    def _upsert_solution(self, new: NewSolution) -> str:
        solution, version, digest = new.solution, new.hash_version, new.solution_hash
        parent_id = new.parent_id
        stored = self._first(self._by_hash(solution.definition, digest, version))
        if stored is None:
            parent = self._canonical_solution(parent_id, "parent_id")
            row = {
                "id": _rows.new_uuid(),
                "definition_name": solution.definition,
                "parent_id": parent,
                "solution": _doc(solution),
                "hash_version": version,
                "solution_hash": digest,
                "evolve_metadata": json.loads(new.evolve_metadata),
            }

            def missing(detail: str) -> str:
                if "parent_id" in detail:
                    return _rows.unknown_solution(str(parent_id), "parent_id")
                return _rows.unknown_definition(solution.definition)

            # A concurrent writer may store the same source first: then nothing is inserted
            # and the stored row is read back below.
            inserted = self._rows(
                self._table("solutions").upsert(
                    row,
                    on_conflict="definition_name,solution_hash,hash_version",
                    ignore_duplicates=True,
                ),
                on_missing_reference=missing,
            )
            if inserted:
                return str(inserted[0]["id"])
            stored = self._first(self._by_hash(solution.definition, digest, version))
            if stored is None:
                raise ConflictError(f"solution hash {digest[:12]}... could not be stored; retry")
        return str(stored["id"])

    def _update_solution_links(self, solution_id: str, links: SolutionLinks) -> StoredSolution:
        stored = self.get_solution(solution_id)
        if stored is None:
            raise UnknownReferenceError(_rows.unknown_solution(str(solution_id), "solution_id"))
        changes: dict[str, Any] = {}
        if links.parent_id is not None:
            changes["parent_id"] = self._canonical_solution(links.parent_id, "parent_id")
        if links.name is not None or links.author is not None:
            changes["solution"] = _doc(links.solution(stored))
        if links.evolve_metadata:
            merged = links.metadata(stored)
            changes["evolve_metadata"] = json.loads(_rows.plain_json(merged, "evolve_metadata"))
        if changes:

            def missing(detail: str) -> str:
                return _rows.unknown_solution(str(links.parent_id), "parent_id")

            self._rows(
                self._table("solutions").update(changes).eq("id", stored.id),
                on_missing_reference=missing,
            )
        updated = self.get_solution(stored.id)
        assert updated is not None
        return updated

    def find_solution(
        self, definition_name: str, solution_hash: str, hash_version: int = 1
    ) -> StoredSolution | None:
        _rows.check_strings(definition_name=definition_name, solution_hash=solution_hash)
        row = self._first(self._by_hash(definition_name, solution_hash, hash_version))
        return None if row is None else _rows.solution_from_row(row)

    def _list_solutions(
        self, filters: dict[str, str], limit: int | None, offset: int
    ) -> list[StoredSolution]:
        def query() -> Query:
            return (
                self._filtered("solutions", _rows.SOLUTION_COLUMNS, filters)
                .order("seq")
                .order("id")
            )

        return [_rows.solution_from_row(r) for r in self._paged(query, limit, offset)]

    def ancestors(self, solution_id: str) -> list[StoredSolution]:
        return self._lineage("solution_ancestors", solution_id)

    def descendants(self, solution_id: str) -> list[StoredSolution]:
        return self._lineage("solution_descendants", solution_id)

    def _lineage(self, function: str, solution_id: str) -> list[StoredSolution]:
        canonical = _rows.canonical_uuid(solution_id)
        if canonical is None:
            return []
        columns = ",".join(_rows.SOLUTION_COLUMNS)
        rows = self._rows(self._postgrest.rpc(function, {"sid": canonical}).select(columns))
        return [_rows.solution_from_row(r) for r in rows]

    # ------------------------------------------------------------------ profiles
    def _upsert_profile(self, new: NewProfile) -> str:
        # PostgREST has no transaction across requests, so this is: find or create the
        # profile, insert the measurement, read every measurement, write the pooled figure,
        # and read the measurements again to pool once more if another writer added one
        # meanwhile. What remains racy: until the last write a reader sees the previous
        # pooled figure; a writer that dies between its insert and its write leaves the
        # profile's figure without its measurement until the next one is stored; and after
        # `_POOL_ATTEMPTS` rounds of contention the last write may miss a concurrent
        # measurement (the table keeps it; the next upsert pools it in).
        workload_uuid, solution_id, evaluation = new.workload_uuid, new.solution_id, new.evaluation
        config = json.loads(new.benchmark_config)
        config_hash = new.benchmark_config_hash
        solution = self._canonical_solution(solution_id, "solution_id")
        doc = _doc(evaluation)

        def missing(detail: str) -> str:
            if "solution_id" in detail:
                return _rows.unknown_solution(str(solution_id), "solution_id")
            return _rows.unknown_workload(workload_uuid)

        def find() -> Row | None:
            return self._first(
                self._table("profiles")
                .select("id,evaluation,created_at")
                .eq("workload_uuid", workload_uuid)
                .eq("solution_id", solution)
                .eq("benchmark_config_hash", config_hash)
                .eq("eval_hardware", evaluation.environment.hardware)
            )

        stored = find()
        if stored is None:
            # Insert or nothing: a concurrent writer may store the same profile first, and
            # then its row is read back below.
            inserted = self._rows(
                self._table("profiles").upsert(
                    {
                        "workload_uuid": workload_uuid,
                        "solution_id": solution,
                        "evaluation": doc,
                        "benchmark_config": config,
                        "benchmark_config_hash": config_hash,
                    },
                    on_conflict=PROFILE_KEY,
                    ignore_duplicates=True,
                ),
                on_missing_reference=missing,
            )
            if inserted:
                profile_id = str(inserted[0]["id"])
                self._add_measurement(profile_id, doc)
                self._pool_into(profile_id, config)
                return profile_id
            stored = find()
            if stored is None:
                raise ConflictError(
                    f"the profile of solution {solution_id!r} on workload {workload_uuid!r} "
                    "could not be stored; try again"
                )
        profile_id = str(stored["id"])
        # No copying of the profile's own evaluation as a first measurement here: profiles
        # stored before measurements were kept got theirs when schema_v2.txt was applied, and
        # one without any now is one another writer has just created and not yet filled (it
        # would be counted twice).
        history = self._measurement_rows(profile_id)
        if any(
            _rows.same_measurement(evaluation, _rows.evaluation_from_json(r["evaluation"]))
            for r in history
        ):
            return profile_id
        self._add_measurement(profile_id, doc)
        self._pool_into(profile_id, config)
        return profile_id

    def _add_measurement(self, profile_id: str, doc: Any, created_at: Any = None) -> None:
        # Its own id, so that a retried insert finds the row a lost answer stored (once).
        row = {"id": _rows.new_uuid(), "profile_id": profile_id, "evaluation": doc}
        if created_at is not None:
            row["created_at"] = created_at
        self._run(self._table("measurements").insert(row, returning="minimal"), once=True)

    def _measurement_rows(self, profile_id: str) -> list[Row]:
        columns = ",".join(_rows.MEASUREMENT_COLUMNS)
        return self._paged(
            lambda: (
                self._table("measurements")
                .select(columns)
                .eq("profile_id", profile_id)
                .order("seq")
            ),
            None,
        )

    def _pool_into(self, profile_id: str, config: Any) -> None:
        """Write the pooled figure of the profile's measurements into it; again while the
        measurements change under it (another writer), at most _POOL_ATTEMPTS times."""
        rows = self._measurement_rows(profile_id)
        for _ in range(_POOL_ATTEMPTS):
            pooled = pool_evaluations([_rows.evaluation_from_json(r["evaluation"]) for r in rows])
            self._run(
                self._table("profiles")
                .update({"evaluation": _doc(pooled), "benchmark_config": config})
                .eq("id", profile_id),
            )
            again = self._measurement_rows(profile_id)
            if [r["id"] for r in again] == [r["id"] for r in rows]:
                return
            rows = again

    def list_measurements(self, profile_id: str) -> list[StoredMeasurement]:
        canonical = _rows.canonical_uuid(profile_id)
        if canonical is None:
            return []
        return [_rows.measurement_from_row(r) for r in self._measurement_rows(canonical)]

    def _list_profiles(
        self, filters: dict[str, str], limit: int | None, offset: int
    ) -> list[StoredProfile]:
        def query() -> Query:
            columns = _rows.PROFILE_COLUMNS
            return (
                self._filtered("solution_profiles", columns, filters)
                .order("created_at")
                .order("id")
            )

        return [_rows.profile_from_row(r) for r in self._paged(query, limit, offset)]

    def _best_solutions(self, ranking: Ranking) -> list[RankedSolution]:
        arguments: dict[str, Any] = {
            "p_definition_name": ranking.definition_name,
            "p_hardware": ranking.hardware,
            "p_workload_uuid": ranking.workload_uuid,
            "p_limit": ranking.limit,
            "p_include_flagged": bool(ranking.include_flagged),
        }
        # The schema's best_solutions ranks, as for the PostgreSQL store: one ranking, one tie
        # rule. Then the winners' rows, by id.
        ranked = sorted(
            self._rows(
                self._postgrest.rpc("best_solutions", arguments).select(
                    "solution_id,profile_id,place"
                )
            ),
            key=lambda r: int(r["place"]),
        )
        if not ranked:
            return []
        solutions = {
            str(r["id"]): r
            for r in self._rows(
                self._table("solutions")
                .select(",".join(_rows.SOLUTION_COLUMNS))
                .in_("id", [str(r["solution_id"]) for r in ranked])
            )
        }
        profiles = {
            str(r["id"]): r
            for r in self._rows(
                self._table("solution_profiles")
                .select(",".join(_rows.PROFILE_COLUMNS))
                .in_("id", [str(r["profile_id"]) for r in ranked])
            )
        }
        return [
            RankedSolution(
                solution=_rows.solution_from_row(solutions[str(r["solution_id"])]),
                profile=_rows.profile_from_row(profiles[str(r["profile_id"])]),
            )
            for r in ranked
            # Not deleted between the reads.
            if str(r["solution_id"]) in solutions and str(r["profile_id"]) in profiles
        ]

    # ------------------------------------------------------------------ runs
    def _run_missing(
        self, run: RunRecord | RunUpdate, definition_name: str | None
    ) -> Callable[[str], str]:
        def missing(detail: str) -> str:
            for role in ("initial_solution_id", "best_solution_id"):
                if role in detail:
                    return _rows.unknown_solution(str(getattr(run, role)), role)
            return _rows.unknown_definition(str(definition_name))

        return missing

    def create_run(self, run: RunRecord) -> str:
        run = _rows.require(run, RunRecord, "run")
        _rows.require_str(run.id, "run.id")
        config = json.loads(_rows.plain_json(run.config, "run.config"))
        if self._first(self._table("runs").select("id").eq("id", run.id)) is not None:
            raise ConflictError(
                f"run {run.id!r} exists already; resume it with update_run, or create the "
                "run under a new id"
            )
        row = {
            "id": run.id,
            "definition_name": run.definition_name,
            "status": run.status,
            "config": config,
            "current_iteration": run.current_iteration,
            "initial_solution_id": self._canonical_solution(
                run.initial_solution_id, "initial_solution_id"
            ),
            "best_solution_id": self._canonical_solution(run.best_solution_id, "best_solution_id"),
            "best_latency_ms": run.best_latency_ms,
            "tokens_in": run.tokens_in,
            "tokens_out": run.tokens_out,
            "cost_usd": run.cost_usd,
            "error": _rows.redacted_text(run.error, self._secrets()),
        }
        self._run(
            self._table("runs").insert(row, returning="minimal"),
            on_missing_reference=self._run_missing(run, run.definition_name),
            once=True,
        )
        return run.id

    def update_run(self, run_id: str, update: RunUpdate, *, holder: str | None = None) -> RunRecord:
        _rows.check_strings(run_id=run_id, holder=holder)
        update = _rows.require(update, RunUpdate, "update")
        changes: dict[str, Any] = {k: v for k, v in update.model_dump().items() if v is not None}
        for role in ("initial_solution_id", "best_solution_id"):
            if role in changes:
                changes[role] = self._canonical_solution(changes[role], role)
        if "config" in changes:
            changes["config"] = json.loads(_rows.plain_json(changes["config"], "config"))
        if "error" in changes:
            changes["error"] = _rows.redacted_text(changes["error"], self._secrets())
        # An UPDATE always runs, even with nothing to change, so the trigger stamps updated_at.
        query = self._table("runs").update(changes or {"id": run_id}).eq("id", run_id)
        if holder is not None:
            query = query.eq("worker_id", holder).in_("status", ["pending", "running"])
        rows = self._rows(
            query.select(",".join(_rows.RUN_COLUMNS)),
            on_missing_reference=self._run_missing(update, None),
        )
        if not rows and holder is not None:
            current = self._first(self._table("runs").select("worker_id,status").eq("id", run_id))
            if current is not None:
                raise LeaseLostError(_rows.lease_lost(run_id, holder, current))
        if not rows:
            raise UnknownReferenceError(_rows.unknown_run(run_id))
        return _rows.run_from_row(rows[0])

    def _claim_run(self, claim: Claim) -> RunRecord | None:
        arguments: dict[str, Any] = {f"p_{name}": value for name, value in vars(claim).items()}
        # The schema's claim_run: the one conditional UPDATE, run by the database.
        rows = self._rows(
            self._postgrest.rpc("claim_run", arguments).select(",".join(_rows.RUN_COLUMNS))
        )
        if rows:
            return _rows.run_from_row(rows[0])
        if self._first(self._table("runs").select("id").eq("id", claim.run_id)) is None:
            raise UnknownReferenceError(_rows.unknown_run(claim.run_id))
        return None

    def _renew_run_lease(self, run_id: str, worker_id: str, lease_s: float) -> bool:
        arguments: dict[str, Any] = {
            "p_run_id": run_id,
            "p_worker_id": worker_id,
            "p_lease_s": lease_s,
        }
        return bool(self._rows(self._postgrest.rpc("renew_run_lease", arguments).select("id")))

    def release_run(self, run_id: str, worker_id: str) -> bool:
        _rows.check_strings(run_id=run_id, worker_id=worker_id)
        rows = self._rows(
            self._table("runs")
            .update({"lease_expires_at": None})
            .eq("id", run_id)
            .eq("worker_id", worker_id)
            .select("id")
        )
        return bool(rows)

    def _list_runs(self, filters: dict[str, str], limit: int) -> list[RunRecord]:
        def query() -> Query:
            q = self._filtered("runs", _rows.RUN_COLUMNS, filters)
            return q.order("created_at", desc=True).order("id", desc=True)

        return [_rows.run_from_row(r) for r in self._paged(query, limit)]

    # ------------------------------------------------------------------ optimization memory
    def add_experience(self, item: ExperienceIn) -> str:
        item = _rows.require(item, ExperienceIn, "experience")
        experience_id = _rows.new_text_id()
        row = {
            "id": experience_id,
            "run_id": item.run_id,
            "namespace": item.namespace,
            "definition_name": item.definition_name,
            "slow_solution_id": self._canonical_solution(item.slow_solution_id, "slow_solution_id"),
            "fast_solution_id": self._canonical_solution(item.fast_solution_id, "fast_solution_id"),
            "speedup": item.speedup,
            "title": item.title,
            "strategy": item.strategy,
            "pseudocode": item.pseudocode,
            "iteration": item.iteration,
            "conditions": (
                item.conditions.model_dump(mode="json", exclude_none=True)
                if item.conditions is not None
                else None
            ),
        }

        def missing(detail: str) -> str:
            for role in ("slow_solution_id", "fast_solution_id"):
                if role in detail:
                    return _rows.unknown_solution(str(getattr(item, role)), role)
            return _rows.unknown_run(str(item.run_id))

        self._run(
            self._table("experiences").insert(row, returning="minimal"),
            on_missing_reference=missing,
            once=True,
        )
        return experience_id

    def _recent_experiences(self, filters: dict[str, str], limit: int) -> list[ExperienceRecord]:
        def query() -> Query:
            q = self._filtered("experiences", _rows.EXPERIENCE_COLUMNS, filters)
            return q.eq("removed", False).order("seq", desc=True)

        rows = self._paged(query, limit)
        return [_rows.experience_from_row(r) for r in reversed(rows)]

    def _search_experiences(self, search: MemorySearch) -> list[ExperienceRecord]:
        words = _search.search_words(search.text)
        columns = ",".join(_rows.EXPERIENCE_COLUMNS)

        def query() -> Query:
            if words is None:
                q = self._table("experiences").select(columns)
            else:
                # The schema's function: the same ranking as the PostgreSQL store.
                arguments: dict[str, Any] = {"words": words}  # a JSON array: text[]
                q = self._postgrest.rpc("search_experiences", arguments).select(columns)
            if search.definition_name is not None:
                q = q.eq("definition_name", search.definition_name)
            if search.namespace is not None:
                q = q.eq("namespace", search.namespace)
            if not search.include_removed:
                q = q.eq("removed", False)
            if words is not None:
                q = q.order("search_rank", desc=True)
            return q.order("seq", desc=True)

        return [_rows.experience_from_row(r) for r in self._paged(query, search.limit)]

    def remove_experience(self, experience_id: str) -> bool:
        _rows.check_strings(experience_id=experience_id)
        rows = self._rows(
            self._table("experiences")
            .update({"removed": True})
            .eq("id", experience_id)
            .eq("removed", False)
            .select("id")
        )
        return bool(rows)

    # ------------------------------------------------------------------ run entries
    def put_run_entry(self, run_id: str, kind: str, key: str, data: dict[str, Any]) -> None:
        doc = json.loads(_rows.run_entry_json(run_id, kind, key, data))
        # The row's trigger stamps updated_at when an upsert updates it.
        self._run(
            self._table("run_entries").upsert(
                {"run_id": run_id, "kind": kind, "key": key, "data": doc},
                on_conflict="run_id,kind,key",
                returning="minimal",
            ),
            on_missing_reference=lambda _: _rows.unknown_run(run_id),
        )

    def run_entries(self, run_id: str, kind: str | None = None) -> list[RunEntry]:
        _rows.check_strings(run_id=run_id, kind=kind)

        def query() -> Query:
            q = self._table("run_entries").select(",".join(_rows.RUN_ENTRY_COLUMNS))
            q = q.eq("run_id", run_id)
            if kind is not None:
                q = q.eq("kind", kind)
            return q.order("kind").order("key")

        rows = self._paged(query, None)
        return _rows.sorted_entries([_rows.run_entry_from_row(r) for r in rows])

    # ------------------------------------------------------------------ llm ledger
    def add_llm_call(self, call: LlmCallIn) -> str:
        call = _rows.require(call, LlmCallIn, "llm call")
        row: Row = _rows.llm_call_values(
            call, self._secrets(), timestamp=_rows.timestamp_text, blob=_rows.bytea_text
        )
        # An upsert updates the columns its body names, so a column left None is left out:
        # an update keeps what is stored there, an insert takes the column's default (NULL).
        for column in _rows.LLM_CALL_KEEP_WHEN_NONE:
            if row[column] is None:
                del row[column]
        self._run(
            self._table("llm_calls").upsert(row, on_conflict="id", returning="minimal"),
            on_missing_reference=lambda _: _rows.unknown_run(str(call.run_id)),
        )
        return str(row["id"])

    def _list_llm_calls(
        self, filters: dict[str, str], limit: int | None, offset: int
    ) -> list[LlmCallRecord]:
        def query() -> Query:
            q = self._filtered("llm_calls", _rows.LLM_CALL_COLUMNS, filters)
            return q.order("created_at").order("id")

        return [_rows.llm_call_from_row(r) for r in self._paged(query, limit, offset)]

    def _llm_calls_by_id(self, call_id: str, prefix: str | None) -> list[LlmCallRecord]:
        columns = ",".join(_rows.LLM_CALL_DETAIL_COLUMNS)
        rows = self._rows(self._table("llm_calls").select(columns).eq("id", call_id).limit(1))
        if not rows and prefix is not None:
            rows = self._rows(
                self._table("llm_calls")
                .select(columns)
                .like("id", prefix + "*")
                .order("id")
                .limit(2)
            )
        return [_rows.llm_call_from_row(r, detail=True) for r in rows]

    def mark_interrupted_llm_calls(self, run_id: str) -> int:
        _rows.check_strings(run_id=run_id)
        # In-flight rows carry no error, so setting one loses nothing.
        rows = self._rows(
            self._table("llm_calls")
            .update({"status": "interrupted", "ok": False, "error": _rows.INTERRUPTED_ERROR})
            .eq("run_id", run_id)
            .eq("status", "in_flight")
            .select("id")
        )
        return len(rows)

    def llm_totals(self, run_id: str) -> list[LlmTotals]:
        _rows.check_strings(run_id=run_id)
        rows = self._paged(
            lambda: (
                self._table("llm_calls")
                .select("role,tokens_in,tokens_out,latency_s,cost_usd,status,ok")
                .eq("run_id", run_id)
                .order("created_at")
                .order("id")
            ),
            None,
        )
        counted = ("failed", "interrupted", "in_flight")
        totals: dict[str, dict[str, Any]] = defaultdict(
            lambda: {
                "calls": 0,
                "tokens_in": 0,
                "tokens_out": 0,
                "latency_s": 0.0,
                "cost_usd": 0.0,
                **dict.fromkeys(counted, 0),
            }
        )
        for row in rows:
            total = totals[row["role"]]
            total["calls"] += 1
            for field in ("tokens_in", "tokens_out", "latency_s", "cost_usd"):
                total[field] += row[field]
            if row["status"] in counted:
                total[row["status"]] += 1
        return [LlmTotals(role=role, **totals[role]) for role in sorted(totals)]

    # ------------------------------------------------------------------ ids
    def resolve_id(self, kind: IdKind, id_or_prefix: str) -> str | None:
        table, exact = _ids.id_lookup(kind, id_or_prefix)
        if exact is not None and self._first(self._table(table).select("id").eq("id", exact)):
            return exact
        digits = _ids.prefix_hex(id_or_prefix)
        if digits is None:
            return None
        query = self._table(table).select("id")
        if kind == "solution":
            # A uuid column has no LIKE; the ids starting with the digits are a range.
            low, high = _ids.uuid_bounds(digits)
            query = query.gte("id", low).lte("id", high)
        else:
            # Hex and dashes: plain inside or=(...). ilike: a run id in capitals answers a
            # prefix as it does in the other stores.
            forms = _ids.prefix_forms(digits)
            query = query.or_(",".join(f"id.ilike.{form}*" for form in forms))
        rows = self._rows(query.order("id").limit(_ids.AMBIGUOUS_SHOWN + 1))
        return _ids.one_id(kind, id_or_prefix, [str(r["id"]) for r in rows])

    # ------------------------------------------------------------------ hardware peaks
    def put_hardware_peaks(self, hardware: str, peaks: dict[str, Any]) -> None:
        _rows.require_str(hardware, "hardware")
        doc = json.loads(_rows.plain_json(peaks, "peaks"))
        # The row's trigger stamps measured_at when an upsert replaces it.
        self._run(
            self._table("hardware_peaks").upsert(
                {"hardware": hardware, "peaks": doc},
                on_conflict="hardware",
                returning="minimal",
            )
        )

    # ------------------------------------------------------------------ suites
    def _put_suite(self, record: SuiteRecord, spec: str) -> SuiteRecord:
        row = {
            "id": record.id,
            "name": record.name,
            "source": record.source,
            "backend": record.backend,
            "status": record.status,
            "spec": json.loads(spec),
        }
        # Without created_at and updated_at: the upsert keeps the first write's created_at,
        # and the row's trigger stamps updated_at when it replaces the row.
        rows = self._rows(self._table("suites").upsert(row, on_conflict="id"))
        return _rows.suite_from_row(rows[0])

    def _list_suites(self, limit: int) -> list[SuiteRecord]:
        def query() -> Query:
            q = self._table("suites").select(",".join(_rows.SUITE_COLUMNS))
            return q.order("created_at", desc=True).order("id", desc=True)

        return [_rows.suite_from_row(r) for r in self._paged(query, limit)]

    # ------------------------------------------------------------------ housekeeping
    def stats(self) -> StoreStats:
        counts: dict[str, int] = {}
        for table in _rows.TABLES:
            response = self._run(self._table(table).select("*", count="exact", head=True))
            counts[table] = int(response.count or 0)
        return StoreStats(backend=self.backend, location=self.location, counts=counts)

    def close(self) -> None:
        self._http.close()
