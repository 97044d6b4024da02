"""The kernel database contract: one interface, three stores (SQLite, PostgreSQL, Supabase).

Every store passes the same contract suite (tests/store/test_contract.py). The engine, CLI and
MCP server talk to this interface only.

Over ~600 lines for one reason: the contract is its records and its interface together (every
method's docstring is the specification the three stores and tests/store/test_contract.py
follow); apart, a change to one would be made without seeing the other.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    computed_field,
    field_validator,
)
from pydantic_core import PydanticCustomError

from accelopt_mcp import hashing
from accelopt_mcp.models import (
    Definition,
    Evaluation,
    LlmCallIn,
    MeasuringConditions,
    Solution,
    Workload,
)
from accelopt_mcp.store._checks import (
    canonical_uuid,
    check_lease,
    check_limit,
    check_statuses,
    check_strings,
    id_prefix,
    plain_json,
    require,
    require_str,
)

# --------------------------------------------------------------------------- errors


class StoreError(Exception):
    """Base of every store error; its message says what went wrong and what to do.

    StoreError
      StoreUnavailableError   can't use the database: unreachable, key or password
                              rejected, schema missing; raised at once, nothing retried
        StoreOutageError      it stopped answering mid-use and kept failing for the
                              whole retry window: wait, then resume
      LeaseLostError, UnknownReferenceError, ConflictError, AmbiguousIdError,
      UnsearchableTextError   the request itself is wrong; retrying will not help
    """


class StoreUnavailableError(StoreError):
    """The database could not be reached, the key was rejected or the schema is missing."""


class StoreOutageError(StoreUnavailableError):
    """A transient failure (connection lost or refused, server restarting, HTTP 502/503/504)
    lasted the whole retry window (ACCELOPT_STORE_RETRY_S, 30 s by default; store/_retry.py).
    Nothing is wrong with the request or the set-up: what was stored before is kept, and the
    same call can succeed once the database is back, so a run should be left interrupted and
    resumed rather than failed. `location` is the store's masked address, `retry_s` the
    window."""

    def __init__(self, message: str, *, location: str = "", retry_s: float = 0.0) -> None:
        super().__init__(message)
        self.location = location
        self.retry_s = retry_s


class LeaseLostError(StoreError):
    """A write fenced by a worker's lease found the run held by another worker (or no longer
    running): this worker must stop touching the run."""


class UnknownReferenceError(StoreError):
    """A record points at a definition, workload or solution that is not stored."""


class ConflictError(StoreError):
    """The record collides with a stored one in a way an upsert cannot settle."""


class AmbiguousIdError(StoreError, LookupError):
    """An id prefix matches more than one record; give more of the id. From resolve_id it
    also says what was looked for: `kind`, the `given` prefix and the first `matches` (sorted;
    `more` when there are others), for a front end that words it its own way."""

    def __init__(
        self,
        message: str,
        *,
        kind: str | None = None,
        given: str | None = None,
        matches: tuple[str, ...] = (),
        more: bool = False,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.given = given
        self.matches = matches
        self.more = more


class UnsearchableTextError(StoreError, ValueError):
    """A memory search text holds no word to look for (only stop words or punctuation)."""


# --------------------------------------------------------------------------- memory namespaces

DEFAULT_BACKEND = "cpu"
"""The backend a run uses when none is named (OptimizeConfig.backend)."""


def default_namespace(backend: str) -> str:
    """The memory namespace of a backend: its name ("cpu", "nki", "flashinfer"). A run files
    its lessons there and, with seed_from_namespace, starts from there, unless it is given a
    namespace; the memory tools and `accelopt memory` file and list there when given none.
    The backend, not the host, since a lesson about writing kernels for a backend (vectorize
    the row loop, stay in float32) holds on every machine it runs on, and a run's hardware is
    in each item's profiles anyway."""
    return backend


DEFAULT_NAMESPACE = default_namespace(DEFAULT_BACKEND)
"""Where an item goes that names no namespace: what a run on the default backend reads."""


# --------------------------------------------------------------------------- rows


class Row(BaseModel):
    """Base of the store's records: a field's docstring is its description in JSON schemas
    (the MCP tools' input and output schemas among them)."""

    model_config = ConfigDict(use_attribute_docstrings=True)


class StoredDefinition(Row):
    name: str
    definition: Definition
    created_at: datetime | None = None


class StoredWorkload(Row):
    uuid: str
    definition_name: str
    workload: Workload
    created_at: datetime | None = None


class StoredSolution(Row):
    id: str
    definition_name: str
    parent_id: str | None
    solution: Solution
    hash_version: int
    solution_hash: str
    evolve_metadata: dict[str, Any] = Field(default_factory=dict)
    spec_language: str
    author: str
    created_at: datetime | None = None


class StoredProfile(Row):
    id: str
    workload_uuid: str
    solution_id: str
    evaluation: Evaluation
    benchmark_config: dict[str, Any]
    benchmark_config_hash: str
    eval_status: str
    eval_hardware: str
    latency_ms: float | None
    reference_latency_ms: float | None
    speedup: float | None
    created_at: datetime | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def trusted(self) -> bool:
        """False when the evaluation carries a flag saying its numbers cannot be believed
        (e.g. above_peak, constant_output); such a profile ranks nothing unless asked."""
        return self.evaluation.trusted

    @property
    def flags(self) -> list[str]:
        return list(self.evaluation.flags)


class StoredMeasurement(Row):
    """One evaluation of a profile as it was taken; the profile's own evaluation pools them
    (accelopt_mcp.models.pool_evaluations)."""

    id: str
    profile_id: str
    evaluation: Evaluation
    """What this measurement found, log redacted as in the profile."""
    created_at: datetime | None = None


class RankedSolution(Row):
    """A correct solution with the profile that ranks it."""

    solution: StoredSolution
    profile: StoredProfile


class RankedEntry(Row):
    """A solution in a definition's ranking, with its fastest correct profile if it has one."""

    solution: StoredSolution
    best_profile: StoredProfile | None = None
    """Its fastest correct (and, unless flagged ones were asked for, trusted) profile; None
    when none qualifies."""


RunStatus = Literal[
    "pending",
    "running",
    "completed",
    "failed",
    "cancelled",
    "budget_exhausted",
    "llm_unavailable",
]


class RunRecord(Row):
    id: str
    definition_name: str
    status: RunStatus = "pending"
    config: dict[str, Any] = Field(default_factory=dict)
    current_iteration: int = 0
    initial_solution_id: str | None = None
    best_solution_id: str | None = None
    best_latency_ms: float | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    error: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    worker_id: str | None = None
    """The worker that holds (or last held) the run: host|pid|start token."""
    lease_expires_at: datetime | None = None
    """Until when the worker's claim holds unless renewed; None: released (or never
    claimed). A run stored as running whose lease has passed is free for any worker."""


class RunUpdate(Row):
    """Fields of a run to change; None means leave as is."""

    status: RunStatus | None = None
    config: dict[str, Any] | None = None
    current_iteration: int | None = None
    initial_solution_id: str | None = None
    best_solution_id: str | None = None
    best_latency_ms: float | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost_usd: float | None = None
    error: str | None = None


class ExperienceIn(Row):
    """An item of optimization memory: what turned a slow kernel into a fast one."""

    definition_name: str
    """The definition whose kernels it was learned on."""
    title: str = Field(min_length=1)
    """A short title."""
    strategy: str = Field(min_length=1)
    """The generalizable strategy: what changed and why it is faster."""
    pseudocode: str = ""
    """The changed code segment, before -> after."""
    run_id: str | None = None
    """The run that learned it; none for an item added by hand."""
    namespace: str = DEFAULT_NAMESPACE
    """Shared memory pool; default: the backend's name ("cpu"), which a run on that backend
    files into and seeds from unless started with another namespace."""
    slow_solution_id: str | None = None
    """The slower kernel of the pair it was learned from."""
    fast_solution_id: str | None = None
    """The faster kernel of the pair."""
    speedup: float | None = None
    """Slow latency / fast latency."""
    iteration: int | None = None
    """The run's iteration that learned it."""
    conditions: MeasuringConditions | None = None
    """What the measurement behind `speedup` was taken under (cores and which, BLAS threads,
    host load, evaluations at once): a lesson may hold only there. None for an item added by
    hand, or stored before conditions were kept."""

    @field_validator("title", "strategy", mode="before")
    @classmethod
    def _not_blank(cls, value: object, info: ValidationInfo) -> object:
        # Every writer (the engine, `accelopt memory add`, the add_memory tool, a traceset
        # import) builds this record, so the rule lives here: stripped, and never blank.
        if isinstance(value, str):
            value = value.strip()
            if not value:
                raise PydanticCustomError(
                    "blank_text",
                    "{field} must not be empty or only whitespace",
                    {"field": info.field_name},
                )
        return value


class ExperienceRecord(ExperienceIn):
    """A stored memory item, read back as it was stored: rows written before a rule of
    ExperienceIn was added still load."""

    id: str
    removed: bool = False
    """True once taken out of the working memory (the row stays as history)."""
    created_at: datetime | None = None

    @field_validator("title", "strategy", mode="before")
    @classmethod
    def _not_blank(cls, value: object, info: ValidationInfo) -> object:
        return value  # replaces ExperienceIn's check of the same name


class LlmCallRecord(LlmCallIn):
    """A stored ledger row. Listings (list_llm_calls) leave `messages` and `reply` None;
    get_llm_call fills them in."""

    id: str
    created_at: datetime | None = None


class LlmTotals(Row):
    """A role's calls in a run. In-flight and interrupted calls count with their estimates
    (prompt tokens and prompt cost), so a resumed run's budget includes what a dead worker's
    calls were billed."""

    role: str
    calls: int
    tokens_in: int
    tokens_out: int
    latency_s: float
    cost_usd: float
    failed: int = 0
    """Calls that failed (no reply)."""
    interrupted: int = 0
    """Calls whose worker died waiting for the reply."""
    in_flight: int = 0
    """Calls sent and not answered yet (or whose worker died, until the run is taken over)."""


class RunEntry(Row):
    """One piece of a run's state (an attempt, a plan, ...), stored apart from the run's
    config so that a change rewrites one small row."""

    run_id: str
    kind: str
    """What it is, e.g. "slot" or "plan"."""
    key: str
    """Which one of its kind, e.g. "2/0/1/1"."""
    data: dict[str, Any] = Field(default_factory=dict)
    updated_at: datetime | None = None


class HardwarePeaksRecord(Row):
    """The measured peak rates of one hardware id (a cache: measured once, read by every
    profile on it)."""

    hardware: str
    """The hardware id, as an evaluation's environment.hardware names it."""
    peaks: dict[str, Any]
    """The figures, e.g. {"fp32_gflops": 150.2, "dram_gbps": 18.5}; JSON values only."""
    measured_at: datetime
    """When they were stored (the database's clock), UTC."""


class SuiteRecord(Row):
    """One benchmark campaign: an optimization run per task case of a benchmark directory
    (e.g. NKIBench's tasks) under one settings preset, ending in a percent-of-peak table. The
    suite runner writes the whole record again as runs start and finish (put_suite), so what
    it knows lives in `spec`, not in columns of its own: a new figure needs no schema change."""

    id: str = Field(min_length=1)
    """The suite's id: the text of a uuid4, made by the caller (get_suite takes a unique prefix
    of it, as resolve_id does)."""
    name: str = Field(min_length=1)
    """A short name, e.g. "cpu-nkibench"."""
    source: str = Field(min_length=1)
    """What was run: a benchmark directory's path, or a built-in's name such as
    "builtin:cpu-nkibench"."""
    backend: str = Field(min_length=1)
    """The backend the runs use: "cpu", "nki", "flashinfer"."""
    status: str = Field(min_length=1)
    """Where the campaign stands: "running", "completed", "cancelled", "failed",
    "interrupted"; free text (the runner's words), never empty."""
    spec: dict[str, Any] = Field(default_factory=dict)
    """Everything else, as JSON values only (no NaN or infinity): the settings, hardware,
    peaks, models and code version, and the cases with their run ids and results."""
    created_at: datetime | None = None
    """When the suite was first stored (the database's clock), UTC; set by the store, kept
    when the record is replaced."""
    updated_at: datetime | None = None
    """When it was last stored (the database's clock), UTC; set by the store on every write."""


IdKind = Literal["solution", "run", "experience", "suite"]
"""The records resolve_id finds by id prefix."""


class StoreStats(Row):
    backend: str
    location: str
    """Where the data lives, with any secret left out."""
    counts: dict[str, int]


# --------------------------------------------------------------------------- interface


def _given(filters: dict[str, str | None]) -> dict[str, str]:
    """The filters that were given (not None)."""
    return {column: value for column, value in filters.items() if value is not None}


@dataclasses.dataclass(frozen=True)
class Ranking:
    """What best_solutions was asked, checked: the arguments of the ranking query."""

    definition_name: str
    hardware: str | None
    workload_uuid: str | None
    limit: int
    include_flagged: bool


@dataclasses.dataclass(frozen=True)
class NewSolution:
    """What upsert_solution was asked, checked: the row to find or insert. `parent_id` is as
    given (the store checks that it is stored); `evolve_metadata` is JSON text."""

    solution: Solution
    parent_id: str | None
    evolve_metadata: str
    hash_version: int
    solution_hash: str


@dataclasses.dataclass(frozen=True)
class SolutionLinks:
    """What update_solution_links was asked: the fields to set, None for those to keep."""

    parent_id: str | None
    name: str | None
    author: str | None
    evolve_metadata: dict[str, Any] | None

    def solution(self, stored: StoredSolution) -> Solution:
        """The stored Solution document with the name and author given."""
        changes = {
            key: value
            for key, value in (("name", self.name), ("author", self.author))
            if value is not None
        }
        return stored.solution.model_copy(update=changes) if changes else stored.solution

    def metadata(self, stored: StoredSolution) -> dict[str, Any]:
        """The stored evolve_metadata with the given keys set."""
        return {**stored.evolve_metadata, **(self.evolve_metadata or {})}


@dataclasses.dataclass(frozen=True)
class NewProfile:
    """What upsert_profile was asked, checked: the evaluation redacted with the store's
    secrets, the benchmark config as JSON text and its hash. `solution_id` is as given (the
    store checks that it is stored)."""

    workload_uuid: str
    solution_id: str
    evaluation: Evaluation
    benchmark_config: str
    benchmark_config_hash: str


@dataclasses.dataclass(frozen=True)
class MemorySearch:
    """What search_experiences was asked, checked (the text not yet split into words)."""

    text: str | None
    definition_name: str | None
    namespace: str | None
    include_removed: bool
    limit: int


@dataclasses.dataclass(frozen=True)
class Claim:
    """What claim_run was asked, checked: the arguments of the claiming update."""

    run_id: str
    worker_id: str
    lease_s: float
    statuses: list[str]
    steal_from: str | None
    set_status: RunStatus | None


class KernelStore(abc.ABC):
    """The kernel database. Upserts are idempotent: storing the same record twice yields one row
    and returns its key. Methods are thread-safe; a store is used from worker threads."""

    backend: str
    schema_changes: Sequence[str] = ()
    """What opening the store changed in its database's schema (created it, or brought an
    older one up to date), one line each; empty when there was nothing to do."""

    # definitions ---------------------------------------------------------
    @abc.abstractmethod
    def upsert_definition(self, definition: Definition) -> str:
        """Store (or replace) a definition; returns its name."""

    @abc.abstractmethod
    def get_definition(self, name: str) -> StoredDefinition | None: ...

    @abc.abstractmethod
    def list_definitions(self) -> list[StoredDefinition]:
        """Every definition, by name in code-point order ("B" before "a"), the same in every
        store whatever the database's collation."""

    # workloads -----------------------------------------------------------
    @abc.abstractmethod
    def upsert_workload(self, definition_name: str, workload: Workload) -> str:
        """Store a workload of a stored definition; returns its uuid.
        Raises UnknownReferenceError when the definition is not stored."""

    @abc.abstractmethod
    def get_workload(self, uuid: str) -> StoredWorkload | None: ...

    @abc.abstractmethod
    def list_workloads(self, definition_name: str) -> list[StoredWorkload]: ...

    # solutions -----------------------------------------------------------
    def upsert_solution(
        self,
        solution: Solution,
        *,
        parent_id: str | None = None,
        evolve_metadata: dict[str, Any] | None = None,
    ) -> str:
        """Store a solution of a stored definition; returns its id. A solution is one
        (definition, source) pair: a source already stored for this definition returns the
        existing id and leaves that row (its lineage and metadata) as it was, while the same
        source under another definition is another solution, with an id, lineage and profiles
        of its own (a shape-generic kernel serving several definitions). Raises
        UnknownReferenceError for an unknown definition or parent."""
        solution = require(solution, Solution, "solution")
        metadata = plain_json(evolve_metadata, "evolve_metadata")
        version = hashing.CURRENT_HASH_VERSION
        digest = hashing.solution_hash(solution, version)
        return self._upsert_solution(NewSolution(solution, parent_id, metadata, version, digest))

    @abc.abstractmethod
    def _upsert_solution(self, new: NewSolution) -> str:
        """upsert_solution's find-or-insert, its arguments checked."""

    @abc.abstractmethod
    def get_solution(self, solution_id: str) -> StoredSolution | None: ...

    def update_solution_links(
        self,
        solution_id: str,
        *,
        parent_id: str | None = None,
        name: str | None = None,
        author: str | None = None,
        evolve_metadata: dict[str, Any] | None = None,
    ) -> StoredSolution:
        """Set what is given (not None) on a stored solution, in one write, and return it:
        its parent (UnknownReferenceError when that is not stored), the name and author in its
        Solution document (the source, and so its hash, stay), and evolve_metadata merged into
        the stored one (the given keys set, the others kept). No policy here: the caller
        (accelopt_mcp.linking) decides what may be filled. UnknownReferenceError for an
        unknown solution id."""
        links = SolutionLinks(parent_id, name, author, evolve_metadata)
        return self._update_solution_links(solution_id, links)

    @abc.abstractmethod
    def _update_solution_links(self, solution_id: str, links: SolutionLinks) -> StoredSolution:
        """update_solution_links' write."""

    @abc.abstractmethod
    def find_solution(
        self, definition_name: str, solution_hash: str, hash_version: int = 1
    ) -> StoredSolution | None:
        """The solution of this definition with this source hash, if stored (the same source
        may be stored under other definitions too, as other solutions)."""

    def list_solutions(
        self,
        *,
        definition_name: str | None = None,
        run_id: str | None = None,
        language: str | None = None,
        author: str | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[StoredSolution]:
        """Oldest first. `run_id` matches evolve_metadata.run_id."""
        check_limit(limit, offset)
        check_strings(
            definition_name=definition_name, run_id=run_id, language=language, author=author
        )
        filters = {
            "definition_name": definition_name,
            "run_id": run_id,
            "spec_language": language,
            "author": author,
        }
        return self._list_solutions(_given(filters), limit, offset)

    @abc.abstractmethod
    def _list_solutions(
        self, filters: dict[str, str], limit: int | None, offset: int
    ) -> list[StoredSolution]:
        """list_solutions' query, its arguments checked: `filters` maps a column of the
        solutions table to the value it must equal (only the filters given)."""

    @abc.abstractmethod
    def ancestors(self, solution_id: str) -> list[StoredSolution]:
        """Parent, grandparent, ... up to the root (nearest first)."""

    @abc.abstractmethod
    def descendants(self, solution_id: str) -> list[StoredSolution]:
        """Every solution derived from this one, breadth first."""

    # profiles ------------------------------------------------------------
    def upsert_profile(
        self,
        workload_uuid: str,
        solution_id: str,
        evaluation: Evaluation,
        benchmark_config: dict[str, Any],
    ) -> str:
        """Store an evaluation as a new measurement of the profile keyed by (workload,
        solution, benchmark-config hash, hardware) and return the profile's id. The profile
        keeps every measurement (list_measurements) and its own evaluation becomes their
        pooled figure (pool_evaluations), so the promoted columns and every ranking use it:
        a re-run refines the figure instead of replacing it. An evaluation equal to one the
        profile already holds is the same measurement sent again and adds nothing (upserts
        are idempotent). Logs are stored redacted (Evaluation.redacted)."""
        require_str(workload_uuid, "workload_uuid")
        evaluation = require(evaluation, Evaluation, "evaluation").redacted(self._secrets())
        config = plain_json(benchmark_config, "benchmark_config")
        config_hash = hashing.benchmark_config_hash(dict(benchmark_config or {}))
        return self._upsert_profile(
            NewProfile(workload_uuid, solution_id, evaluation, config, config_hash)
        )

    @abc.abstractmethod
    def _upsert_profile(self, new: NewProfile) -> str:
        """upsert_profile's find-or-insert and pooling, its arguments checked."""

    @abc.abstractmethod
    def get_profile(self, profile_id: str) -> StoredProfile | None: ...

    @abc.abstractmethod
    def list_measurements(self, profile_id: str) -> list[StoredMeasurement]:
        """Every measurement of a profile, oldest first (empty for an unknown id)."""

    def list_profiles(
        self,
        *,
        solution_id: str | None = None,
        workload_uuid: str | None = None,
        run_id: str | None = None,
        hardware: str | None = None,
        status: str | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[StoredProfile]:
        """Oldest first; each filter given must match (`run_id`: the solution's run)."""
        check_limit(limit, offset)
        check_strings(workload_uuid=workload_uuid, run_id=run_id, hardware=hardware, status=status)
        if solution_id is not None:
            solution_id = canonical_uuid(solution_id)
            if solution_id is None:
                return []
        filters = {
            "solution_id": solution_id,
            "workload_uuid": workload_uuid,
            "run_id": run_id,
            "eval_hardware": hardware,
            "eval_status": status,
        }
        return self._list_profiles(_given(filters), limit, offset)

    @abc.abstractmethod
    def _list_profiles(
        self, filters: dict[str, str], limit: int | None, offset: int
    ) -> list[StoredProfile]:
        """list_profiles' query, its arguments checked: `filters` maps a column of the
        profiles table (run_id: the solution's) to the value it must equal."""

    def best_solutions(
        self,
        definition_name: str,
        *,
        hardware: str | None = None,
        workload_uuid: str | None = None,
        limit: int = 10,
        include_flagged: bool = False,
    ) -> list[RankedSolution]:
        """Correct (PASSED) solutions, fastest first, one entry per solution (its best profile).
        A profile whose evaluation carries an untrusted flag (models/evaluation.py: above_peak,
        constant_output, any flag not informational) ranks nothing unless include_flagged."""
        check_limit(limit)
        check_strings(
            definition_name=definition_name, hardware=hardware, workload_uuid=workload_uuid
        )
        if limit == 0:
            return []
        return self._best_solutions(
            Ranking(definition_name, hardware, workload_uuid, limit, bool(include_flagged))
        )

    @abc.abstractmethod
    def _best_solutions(self, ranking: Ranking) -> list[RankedSolution]:
        """best_solutions' query, its arguments checked (limit at least 1)."""

    def ranked_solutions(
        self,
        definition_name: str,
        *,
        hardware: str | None = None,
        language: str | None = None,
        run_id: str | None = None,
        include_flagged: bool = False,
    ) -> list[RankedEntry]:
        """Every solution of a definition, best first: correct ones by latency, then the rest
        (never passed, passed only with untrusted flags unless include_flagged, or not on this
        hardware) oldest first."""
        solutions = self.list_solutions(
            definition_name=definition_name, run_id=run_id, language=language
        )
        wanted = {s.id for s in solutions}
        # best_solutions ranks every solution of the definition, not only the filtered ones:
        # its limit must cover them all, or faster kernels of other runs or languages push
        # the wanted ones off the end (and they would read as never passed).
        every = solutions
        if run_id is not None or language is not None:
            every = self.list_solutions(definition_name=definition_name)
        ranked = self.best_solutions(
            definition_name,
            hardware=hardware,
            limit=max(len(every), 1),
            include_flagged=include_flagged,
        )
        entries = [
            RankedEntry(solution=r.solution, best_profile=r.profile)
            for r in ranked
            if r.solution.id in wanted
        ]
        seen = {e.solution.id for e in entries}
        entries += [RankedEntry(solution=s) for s in solutions if s.id not in seen]
        return entries

    # runs ----------------------------------------------------------------
    @abc.abstractmethod
    def create_run(self, run: RunRecord) -> str: ...

    @abc.abstractmethod
    def update_run(self, run_id: str, update: RunUpdate, *, holder: str | None = None) -> RunRecord:
        """Change the fields the update sets (not None); the others, config among them, stay
        as stored. updated_at becomes now. holder: write only while that worker holds the run
        and it is pending or running, else raise LeaseLostError (a worker that lost its lease
        cannot overwrite the one that took the run over)."""

    def claim_run(
        self,
        run_id: str,
        worker_id: str,
        *,
        lease_s: float,
        statuses: Sequence[str],
        steal_from: str | None = None,
        set_status: RunStatus | None = None,
    ) -> RunRecord | None:
        """Take the run for `worker_id` in one conditional update, atomic across processes
        and hosts: it succeeds when the run's status is one of `statuses` and nobody holds it
        (no worker, a released or expired lease, this worker already, or `steal_from`, a
        holder the caller has seen dead). Sets the worker, a lease of lease_s seconds by the
        database's clock and, when given, the status (a worker taking a stopped run marks it
        running in the same update); returns the run as now stored, or None when it is not
        free. Raises UnknownReferenceError for an unknown run."""
        check_strings(
            run_id=run_id, worker_id=worker_id, steal_from=steal_from, set_status=set_status
        )
        lease, wanted = check_lease(lease_s), check_statuses(statuses)
        return self._claim_run(Claim(run_id, worker_id, lease, wanted, steal_from, set_status))

    @abc.abstractmethod
    def _claim_run(self, claim: Claim) -> RunRecord | None:
        """claim_run's update, its arguments checked."""

    def renew_run_lease(self, run_id: str, worker_id: str, *, lease_s: float) -> bool:
        """Extend the worker's lease by lease_s seconds from now; False when the worker no
        longer holds the run or the run is no longer pending or running (cancelled by someone
        else): the worker must stop."""
        check_strings(run_id=run_id, worker_id=worker_id)
        return self._renew_run_lease(run_id, worker_id, check_lease(lease_s))

    @abc.abstractmethod
    def _renew_run_lease(self, run_id: str, worker_id: str, lease_s: float) -> bool:
        """renew_run_lease's update, its arguments checked."""

    @abc.abstractmethod
    def release_run(self, run_id: str, worker_id: str) -> bool:
        """End the worker's lease at once (the run stays as it is); False when it did not
        hold it."""

    @abc.abstractmethod
    def get_run(self, run_id: str) -> RunRecord | None: ...

    def list_runs(
        self, *, definition_name: str | None = None, status: str | None = None, limit: int = 50
    ) -> list[RunRecord]:
        """Newest first."""
        check_limit(limit)
        check_strings(definition_name=definition_name, status=status)
        return self._list_runs(
            _given({"definition_name": definition_name, "status": status}), limit
        )

    @abc.abstractmethod
    def _list_runs(self, filters: dict[str, str], limit: int) -> list[RunRecord]:
        """list_runs' query, its arguments checked: `filters` maps a column of the runs table
        to the value it must equal."""

    @abc.abstractmethod
    def put_run_entry(self, run_id: str, kind: str, key: str, data: dict[str, Any]) -> None:
        """Store (or replace) the entry (run_id, kind, key) of a stored run; its updated_at
        becomes now. Raises UnknownReferenceError for an unknown run. Entries go when their
        run goes (deleting a definition deletes its runs)."""

    @abc.abstractmethod
    def run_entries(self, run_id: str, kind: str | None = None) -> list[RunEntry]:
        """A run's entries (of one kind, or all), sorted by kind, then key (code-point order,
        the same in every store); empty for an unknown run."""

    # optimization memory -------------------------------------------------
    @abc.abstractmethod
    def add_experience(self, item: ExperienceIn) -> str: ...

    @abc.abstractmethod
    def get_experience(self, experience_id: str) -> ExperienceRecord | None: ...

    def recent_experiences(
        self, *, run_id: str | None = None, namespace: str | None = None, limit: int
    ) -> list[ExperienceRecord]:
        """The working memory: the newest `limit` items not removed, returned oldest first
        (queue order)."""
        check_limit(limit)
        check_strings(run_id=run_id, namespace=namespace)
        return self._recent_experiences(_given({"run_id": run_id, "namespace": namespace}), limit)

    @abc.abstractmethod
    def _recent_experiences(self, filters: dict[str, str], limit: int) -> list[ExperienceRecord]:
        """recent_experiences' query, its arguments checked: `filters` maps a column of the
        experiences table to the value it must equal."""

    def search_experiences(
        self,
        *,
        text: str | None = None,
        definition_name: str | None = None,
        namespace: str | None = None,
        include_removed: bool = False,
        limit: int = 50,
    ) -> list[ExperienceRecord]:
        """Items whose title, strategy or pseudocode hold any word of `text`, in any order,
        each as the start of a word after English stemming; stop words and punctuation in
        `text` are ignored (store/_search.py). Ranked best first: by how many of the words an
        item holds, then where (title words count most, then strategy, then pseudocode),
        ties newest first. No text: every item, newest
        first. Raises UnsearchableTextError for a text with no word left to look for."""
        check_limit(limit)
        check_strings(text=text, definition_name=definition_name, namespace=namespace)
        return self._search_experiences(
            MemorySearch(text, definition_name, namespace, include_removed, limit)
        )

    @abc.abstractmethod
    def _search_experiences(self, search: MemorySearch) -> list[ExperienceRecord]:
        """search_experiences' query, its arguments checked."""

    @abc.abstractmethod
    def remove_experience(self, experience_id: str) -> bool:
        """Take an item out of the working memory; the row stays as history."""

    # llm ledger ----------------------------------------------------------
    @abc.abstractmethod
    def add_llm_call(self, call: LlmCallIn) -> str:
        """Store a ledger row and return its id (call.id, or a new one when None). A call
        whose id is stored already updates that row: the client writes each call twice, in
        flight before it sends the request and with its outcome when it ends. The update
        replaces every field but run_id, except that purpose, started_at, finished_at,
        messages and reply left None keep what is stored. Messages, reply and error are
        stored redacted, messages and reply compressed (zlib). Raises UnknownReferenceError
        for an unknown run."""

    def list_llm_calls(
        self,
        run_id: str,
        *,
        role: str | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[LlmCallRecord]:
        """A run's calls (of one role, or all) in the order they started, oldest first;
        metadata only (messages and reply None). `limit` None: all from `offset`."""
        check_limit(limit, offset)
        check_strings(run_id=run_id, role=role)
        if run_id is None:  # a run's calls: no run, no calls (never every run's)
            return []
        return self._list_llm_calls(_given({"run_id": run_id, "role": role}), limit, offset)

    @abc.abstractmethod
    def _list_llm_calls(
        self, filters: dict[str, str], limit: int | None, offset: int
    ) -> list[LlmCallRecord]:
        """list_llm_calls' query, its arguments checked: `filters` maps a column of the
        llm_calls table to the value it must equal (run_id always)."""

    def get_llm_call(self, call_id: str) -> LlmCallRecord | None:
        """One call with its prompt and reply (decompressed). `call_id` is the id or a unique
        prefix of it (at least 8 hexadecimal characters); None when nothing matches. Raises
        AmbiguousIdError when a prefix matches more than one call."""
        check_strings(call_id=call_id)
        calls = self._llm_calls_by_id(call_id, id_prefix(call_id))
        if len(calls) > 1:
            raise AmbiguousIdError(
                f"call id prefix {call_id!r} matches more than one call; give more of the id"
            )
        return calls[0] if calls else None

    @abc.abstractmethod
    def _llm_calls_by_id(self, call_id: str, prefix: str | None) -> list[LlmCallRecord]:
        """get_llm_call's query, with prompt and reply: the call whose id is `call_id` or,
        when there is none and `prefix` is not None, the first two (by id) whose id starts
        with `prefix`."""

    @abc.abstractmethod
    def _secrets(self) -> tuple[str | None, ...]:
        """Secrets of this store (a password, a key) masked in what it stores, besides the
        usual."""

    @abc.abstractmethod
    def mark_interrupted_llm_calls(self, run_id: str) -> int:
        """Turn a run's in-flight calls into interrupted ones and return how many. Call it
        when a worker takes a run over (it holds the run's lock, so no live worker is waiting
        on them); their estimated tokens and cost stay and count in llm_totals."""

    @abc.abstractmethod
    def llm_totals(self, run_id: str) -> list[LlmTotals]:
        """One row per role, sorted by role; every status counts (in-flight and interrupted
        calls with their estimates)."""

    # ids -----------------------------------------------------------------
    @abc.abstractmethod
    def resolve_id(self, kind: IdKind, id_or_prefix: str) -> str | None:
        """The full id of the stored solution, run, experience (memory item) or suite that
        `id_or_prefix` names: its whole id, or a prefix of it of at least 8 hexadecimal digits
        (any case, dashes optional: "1a2b3c4d", "1A2B3C4D-5e" and "1a2b3c4d5e" alike); None
        when nothing matches. Raises AmbiguousIdError when a prefix matches more than one
        (the message shows a few), ValueError for an unknown kind."""

    # hardware peaks ------------------------------------------------------
    @abc.abstractmethod
    def put_hardware_peaks(self, hardware: str, peaks: dict[str, Any]) -> None:
        """Store (or replace) the peaks of a hardware id; measured_at becomes now. `peaks`
        must hold JSON values only (no NaN or infinity)."""

    @abc.abstractmethod
    def get_hardware_peaks(self, hardware: str) -> HardwarePeaksRecord | None:
        """The stored peaks of a hardware id, or None."""

    # suites --------------------------------------------------------------
    def put_suite(self, record: SuiteRecord) -> SuiteRecord:
        """Store (or replace, by id) a whole suite record and return it as stored: created_at
        from its first write, updated_at now (both the database's clock; the record's own are
        ignored). `spec` must hold JSON values only (no NaN or infinity). A suite refers to
        its runs by id inside `spec` only, so it stays when they go."""
        record = require(record, SuiteRecord, "suite")
        return self._put_suite(record, plain_json(record.spec, "spec"))

    @abc.abstractmethod
    def _put_suite(self, record: SuiteRecord, spec: str) -> SuiteRecord:
        """put_suite's upsert, its argument checked: `spec` is the record's spec as JSON
        text."""

    def get_suite(self, suite_id: str) -> SuiteRecord | None:
        """The stored suite that `suite_id` names: its whole id, or a unique prefix of it of
        at least 8 hexadecimal digits, as resolve_id takes it (a shorter one matches only a
        whole id); None when nothing matches. Raises AmbiguousIdError when a prefix matches
        more than one suite."""
        check_strings(suite_id=suite_id)
        if not suite_id:
            return None
        found = self.resolve_id("suite", suite_id)
        return None if found is None else self._get_suite(found)

    @abc.abstractmethod
    def _get_suite(self, suite_id: str) -> SuiteRecord | None:
        """The suite whose id is exactly `suite_id`, or None."""

    def list_suites(self, limit: int = 50) -> list[SuiteRecord]:
        """Newest first: created_at descending, then id descending (two suites stored in the
        same instant come in one order in every store)."""
        check_limit(limit)
        if limit is None:
            raise ValueError("limit must be a non-negative integer, got None")
        return self._list_suites(limit)

    @abc.abstractmethod
    def _list_suites(self, limit: int) -> list[SuiteRecord]:
        """list_suites' query, its argument checked."""

    # housekeeping --------------------------------------------------------
    @abc.abstractmethod
    def stats(self) -> StoreStats:
        """Row counts of the record tables (the hardware-peaks cache is not counted)."""

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Many writes in a row (an import): the calls this thread makes inside share
        transactions, a commit per few hundred calls and one as the block ends, instead of one
        per call. Each call keeps its checks and dedup, and reads inside see the writes before
        them. A call that fails rolls back the calls since the last commit and ends the batch
        (what was committed before stays, as without a batch: run the rest again). The SQL
        stores refresh the query planner's statistics after a large batch. Here (the Supabase
        store, one HTTP request per call) each call stays on its own."""
        yield

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""

    def __enter__(self) -> KernelStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
