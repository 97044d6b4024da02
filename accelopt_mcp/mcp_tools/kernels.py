"""Kernel-database tools: check it, browse definitions, solutions, lineage and profiles. The
admin tools that write records by hand (insert_*, import_directory) are in kernels_admin.py."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver.tools import Tool
from mcp_types import ToolAnnotations
from pydantic import Field

from accelopt_mcp.engine.lineage import children_of, speedup_between, timed_beside_children
from accelopt_mcp.engine.runs import SpeedupFigure
from accelopt_mcp.engine.selection import SpeedupMeasured
from accelopt_mcp.mcp_tools import ids
from accelopt_mcp.mcp_tools.app import NotFoundError
from accelopt_mcp.mcp_tools.database_check import check_database_url
from accelopt_mcp.mcp_tools.state import ToolContext, state_of
from accelopt_mcp.mcp_tools.views import (
    DEFAULT_PAGE,
    MAX_PAGE,
    SOURCE_CHARS,
    DefinitionSummary,
    PageInfo,
    ProfileSummary,
    SolutionSummary,
    TextSlice,
    TimedFigures,
    Timestamp,
    View,
    WorkloadSummary,
    cut,
    definition_summary,
    page_info,
    profile_summary,
    solution_summary,
    workload_summary,
)
from accelopt_mcp.models import Definition, from_record
from accelopt_mcp.models.evaluation import Verdict
from accelopt_mcp.store.base import (
    KernelStore,
    StoredDefinition,
    StoredMeasurement,
    StoredProfile,
    StoredSolution,
)
from accelopt_mcp.store.detect import StoreCheck, check_store

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True)


Offset = Annotated[int, Field(ge=0, description="Skip this many items (from next_offset).")]
Limit = Annotated[int, Field(ge=1, le=MAX_PAGE, description=f"Items per page (max {MAX_PAGE}).")]


class DefinitionPage(View):
    items: list[DefinitionSummary]
    page: PageInfo


class DefinitionDetail(View):
    definition: Definition
    workloads: list[WorkloadSummary]
    workloads_total: int
    solutions_total: int


class SolutionListing(SolutionSummary):
    """A kernel with its best latency (as list_solutions ranks it) and its speedup over its
    parent: timed in the same rounds where one of its ranked profile's measurements timed the
    parent beside it, else the ratio of the two best latencies timed apart (engine/lineage.py).
    """

    speedup_vs_parent: float | None = None
    """How many times faster than its parent (parent median / its median); null without a
    parent, or when neither a same-round figure nor both best latencies on one hardware are
    known."""
    speedup_vs_parent_ci_low: float | None = None
    """Lower end of its confidence interval (null: none known)."""
    speedup_vs_parent_ci_high: float | None = None
    """Upper end (null with a lower end: unbounded)."""
    speedup_vs_parent_verdict: Verdict | None = None
    """faster / slower when the whole interval is above / below 1, else indistinguishable;
    null without an interval."""
    speedup_vs_parent_measured: SpeedupMeasured | None = None
    """same_rounds: the parent was timed beside it, in the same interleaved rounds (host drift
    cancels); apart: two best latencies measured at different times, a figure to read with
    care (their intervals combined, when both have one)."""


class SolutionPage(View):
    definition_name: str
    items: list[SolutionListing]
    """Fastest correct first (trusted results only, unless include_flagged), then the others."""
    page: PageInfo


class SourceFileSlice(View):
    path: str
    content: TextSlice


class SolutionDetail(View):
    summary: SolutionSummary
    entry_point: str
    target_hardware: list[str]
    evolve_metadata: dict[str, Any]
    solution_hash: str
    sources: list[SourceFileSlice]
    profiles: list[ProfileSummary]
    """Up to 10 profiles of this solution."""
    profiles_total: int


class LineageEntry(SolutionListing):
    """A kernel of the lineage with its best latency (as list_solutions ranks it), its speedup
    over its parent and over the lineage's root, each timed in the same rounds where that was
    measured, else labelled apart."""

    speedup_vs_initial: float | None = None
    """How many times faster than the lineage root (null for the root itself), as
    speedup_vs_parent is had."""
    speedup_vs_initial_ci_low: float | None = None
    speedup_vs_initial_ci_high: float | None = None
    speedup_vs_initial_verdict: Verdict | None = None
    speedup_vs_initial_measured: SpeedupMeasured | None = None


class Lineage(View):
    solution: LineageEntry
    ancestors: list[LineageEntry]
    """Parent first, up to the root (the initial kernel)."""
    descendants: list[LineageEntry]
    """Breadth first."""
    descendants_total: int


class MeasurementSummary(TimedFigures):
    """One measurement behind a profile's pooled figure, as it was taken."""

    created_at: Timestamp = None
    status: str
    flags: list[str] = Field(default_factory=list)


class PooledProfile(ProfileSummary):
    """A profile: latency_ms, speedup, flags and trusted are the pooled figure of every
    measurement (what rankings use); `measurements` are the runs behind it."""

    latency_ci_low_ms: float | None = None
    """Lower end of the pooled latency's confidence interval."""
    latency_ci_high_ms: float | None = None
    speedup_vs_reference_ci_low: float | None = None
    speedup_vs_reference_ci_high: float | None = None
    measurements_total: int
    """How many measurements the profile holds (failed ones included; only passed ones pool)."""
    timed_beside_children: int = 0
    """How many of its children's measurements (same workload, settings and hardware; passed,
    trusted) timed this kernel beside them as their parent, in the same rounds. Those are
    measurements of it too, but they are not pooled into latency_ms: a child's comparison keeps
    this kernel's median, not its interval."""
    measured_total: int = 0
    """Every time this kernel was measured under this profile's conditions: measurements_total
    plus timed_beside_children."""
    measurements: list[MeasurementSummary]
    """The newest measurements_limit of its own, oldest first."""


class ProfilePage(View):
    items: list[PooledProfile]
    page: PageInfo


def _solution(store: KernelStore, solution_id: str) -> StoredSolution:
    """The solution an id or a unique id prefix names."""
    return ids.solution(store, solution_id)


def definition_named(store: KernelStore, name: str) -> StoredDefinition:
    """The stored definition `name` names; a tool error saying how to find or add one."""
    found = store.get_definition(name)
    if found is None:
        raise NotFoundError(
            f"no definition named {name!r}; list_definitions shows the stored ones, and "
            "profile_kernel on a kernel of the task stores its definition"
        )
    return found


def check_database(
    ctx: ToolContext,
    url: Annotated[
        str | None,
        Field(
            description="Database to check: SQLite path, postgresql:// DSN or Supabase "
            "project URL (key from SUPABASE_KEY). Default: the server's own database."
        ),
    ] = None,
) -> StoreCheck:
    """Check that the kernel database answers, accepts the key and has the schema. When it
    does not (e.g. a Supabase URL that does not answer), `ok` is false and `message` and
    `next_steps` say how to set it up: relay them to the user and stop. Another database
    than the server's own is checked without the server's secrets (database_check.py)."""
    state = state_of(ctx)
    if url is None:
        return check_store(state.store_url)
    return check_database_url(url, state.store_url, state.roots)


def list_definitions(
    ctx: ToolContext,
    name_contains: Annotated[
        str | None, Field(description="Only names containing this text (case-insensitive).")
    ] = None,
    offset: Offset = 0,
    limit: Limit = DEFAULT_PAGE,
) -> DefinitionPage:
    """List the kernel definitions (what a kernel must compute) stored in the database."""
    found = state_of(ctx).store().list_definitions()
    if name_contains:
        needle = name_contains.lower()
        found = [d for d in found if needle in d.name.lower()]
    found.sort(key=lambda d: d.name)
    return DefinitionPage(
        items=[definition_summary(d) for d in found[offset : offset + limit]],
        page=page_info(len(found), offset, limit),
    )


def get_definition(
    ctx: ToolContext,
    name: Annotated[str, Field(description="Definition name, from list_definitions.")],
    workloads_limit: Annotated[int, Field(ge=0, le=MAX_PAGE)] = 20,
) -> DefinitionDetail:
    """A definition in full (axes, inputs, outputs, reference code) with its workloads."""
    store = state_of(ctx).store()
    stored = definition_named(store, name)
    workloads = store.list_workloads(name)
    return DefinitionDetail(
        definition=stored.definition,
        workloads=[workload_summary(w) for w in workloads[:workloads_limit]],
        workloads_total=len(workloads),
        solutions_total=len(store.list_solutions(definition_name=name)),
    )


def list_solutions(
    ctx: ToolContext,
    definition_name: Annotated[str, Field(description="Definition name.")],
    hardware: Annotated[
        str | None, Field(description="Rank by profiles on this hardware only.")
    ] = None,
    language: Annotated[
        str | None, Field(description="Only this language: python, nki, triton, cuda, ...")
    ] = None,
    run_id: Annotated[str | None, Field(description="Only kernels made by this run.")] = None,
    include_flagged: Annotated[
        bool,
        Field(
            description="Rank results flagged untrusted too (above_peak, constant_output, ...: "
            "their numbers cannot be believed); by default they rank nothing."
        ),
    ] = False,
    offset: Offset = 0,
    limit: Limit = 20,
) -> SolutionPage:
    """Solutions (kernels) of a definition, fastest correct first, then those that never
    passed (or passed only with a result flagged untrusted, unless include_flagged). Each shows
    the flags of the profile that ranks it and its speedup over its parent: timed in the same
    rounds where that was measured (interval, verdict), else labelled apart. Use get_solution
    for a kernel's source and profiles, solution_lineage for its history."""
    store = state_of(ctx).store()
    definition_named(store, definition_name)
    entries = store.ranked_solutions(
        definition_name,
        hardware=hardware,
        language=language,
        run_id=ids.run_id(store, run_id) if run_id is not None else None,
        include_flagged=include_flagged,
    )
    shown = entries[offset : offset + limit]
    best = {e.solution.id: e.best_profile for e in entries}
    parents = {e.solution.parent_id for e in shown if e.solution.parent_id} - best.keys()
    if parents:
        # Parents left out by the filters (another language or run) still rank.
        best |= {
            e.solution.id: e.best_profile
            for e in store.ranked_solutions(
                definition_name, hardware=hardware, include_flagged=include_flagged
            )
            if e.solution.id in parents
        }
    return SolutionPage(
        definition_name=definition_name,
        items=[
            SolutionListing(
                **solution_summary(e.solution, e.best_profile).model_dump(),
                **_vs_parent(store, e.solution, best),
            )
            for e in shown
        ],
        page=page_info(len(entries), offset, limit),
    )


def _figure_fields(prefix: str, figure: SpeedupFigure | None) -> dict[str, Any]:
    """The flat fields of a speedup figure: prefix, prefix_ci_low, ..., prefix_measured."""
    if figure is None:
        return {}
    return {
        prefix: figure.estimate,
        f"{prefix}_ci_low": figure.low,
        f"{prefix}_ci_high": figure.high,
        f"{prefix}_verdict": figure.verdict,
        f"{prefix}_measured": figure.measured,
    }


def _vs_parent(
    store: KernelStore, s: StoredSolution, best: dict[str, StoredProfile | None]
) -> dict[str, Any]:
    """The speedup_vs_parent fields of a kernel: best holds the ranked profile of each kernel
    (its parent's too, where it has one)."""
    if s.parent_id is None:
        return {}
    figure = speedup_between(store, s, best.get(s.id), s.parent_id, best.get(s.parent_id))
    return _figure_fields("speedup_vs_parent", figure)


def get_solution(
    ctx: ToolContext,
    solution_id: Annotated[str, Field(description="Solution id (or 8+ first characters).")],
    source_offset: Annotated[
        int, Field(ge=0, description="Start of the source text slice (from next_offset).")
    ] = 0,
    source_limit: Annotated[
        int, Field(ge=1, le=60_000, description="Characters of source per file.")
    ] = SOURCE_CHARS,
) -> SolutionDetail:
    """A solution with its source files (long ones sliced: page with source_offset) and its
    most recent profiles, each with its flags. The summary's best is its fastest trusted
    correct profile."""
    store = state_of(ctx).store()
    stored = _solution(store, solution_id)
    profiles = store.list_profiles(solution_id=stored.id)
    passed = [
        p for p in profiles if p.eval_status == "PASSED" and p.latency_ms is not None and p.trusted
    ]
    best = min(passed, key=lambda p: p.latency_ms or 0.0) if passed else None
    spec = stored.solution.spec
    return SolutionDetail(
        summary=solution_summary(stored, best),
        entry_point=spec.entry_point,
        target_hardware=list(spec.target_hardware),
        evolve_metadata=stored.evolve_metadata,
        solution_hash=stored.solution_hash,
        sources=[
            SourceFileSlice(path=f.path, content=cut(f.content, source_offset, source_limit))
            for f in stored.solution.sources
        ],
        profiles=[profile_summary(p) for p in profiles[-10:]],
        profiles_total=len(profiles),
    )


def solution_lineage(
    ctx: ToolContext,
    solution_id: Annotated[str, Field(description="Solution id (or 8+ first characters).")],
    descendants_limit: Annotated[int, Field(ge=0, le=MAX_PAGE)] = 50,
) -> Lineage:
    """Where a kernel came from (its ancestors, parent first, up to the initial kernel) and
    what was derived from it, each with its best latency as list_solutions ranks it and its
    speedup over its parent and over the initial kernel: timed in the same rounds where that
    was measured (with interval and verdict), else labelled apart (`_measured` fields)."""
    store = state_of(ctx).store()
    stored = _solution(store, solution_id)
    up = store.ancestors(stored.id)
    down = store.descendants(stored.id)
    shown = [stored, *up, *down[:descendants_limit]]
    best: dict[str, StoredProfile | None] = {}
    for name in dict.fromkeys(s.definition_name for s in shown):
        best |= {e.solution.id: e.best_profile for e in store.ranked_solutions(name)}
    root = up[-1] if up else stored

    def entry(s: StoredSolution) -> LineageEntry:
        vs_initial = None
        if s.id != root.id:
            vs_initial = speedup_between(store, s, best.get(s.id), root.id, best.get(root.id))
        return LineageEntry(
            **solution_summary(s, best.get(s.id)).model_dump(),
            **_vs_parent(store, s, best),
            **_figure_fields("speedup_vs_initial", vs_initial),
        )

    return Lineage(
        solution=entry(stored),
        ancestors=[entry(s) for s in up],
        descendants=[entry(s) for s in down[:descendants_limit]],
        descendants_total=len(down),
    )


def _measurement_summary(m: StoredMeasurement) -> MeasurementSummary:
    evaluation = m.evaluation
    latency, perf = evaluation.latency_stats, evaluation.performance
    median = latency.median_ms if latency else (perf.latency_ms if perf else None)
    return from_record(
        MeasurementSummary,
        m,
        status=evaluation.status.value,
        median_ms=median,
        ci_low_ms=latency.ci_low_ms if latency else None,
        ci_high_ms=latency.ci_high_ms if latency else None,
        speedup_vs_reference=perf.speedup_factor if perf and perf.speedup_factor > 0 else None,
        speedup_vs_reference_ci_low=perf.speedup_ci_low if perf else None,
        speedup_vs_reference_ci_high=perf.speedup_ci_high if perf else None,
        flags=list(evaluation.flags),
    )


def _pooled_profile(
    store: KernelStore,
    p: StoredProfile,
    measurements_limit: int,
    children: dict[str, list[StoredSolution]],
) -> PooledProfile:
    """children: each solution's children looked up so far (filled in here)."""
    history = store.list_measurements(p.id)
    latency, perf = p.evaluation.latency_stats, p.evaluation.performance
    shown = history[len(history) - measurements_limit :] if measurements_limit else []
    if p.solution_id not in children:
        children[p.solution_id] = children_of(store, p.solution_id)
    beside = timed_beside_children(store, p.solution_id, p, children[p.solution_id])
    return PooledProfile(
        **profile_summary(p).model_dump(),
        latency_ci_low_ms=latency.ci_low_ms if latency else None,
        latency_ci_high_ms=latency.ci_high_ms if latency else None,
        speedup_vs_reference_ci_low=perf.speedup_ci_low if perf else None,
        speedup_vs_reference_ci_high=perf.speedup_ci_high if perf else None,
        measurements_total=len(history),
        timed_beside_children=beside,
        measured_total=len(history) + beside,
        measurements=[_measurement_summary(m) for m in shown],
    )


def query_profiles(
    ctx: ToolContext,
    solution_id: Annotated[str | None, Field(description="Solution id or 8+ prefix.")] = None,
    workload_uuid: str | None = None,
    run_id: Annotated[str | None, Field(description="Profiles of kernels of this run.")] = None,
    hardware: str | None = None,
    status: Annotated[
        str | None,
        Field(description="PASSED, INCORRECT_NUMERICAL, RUNTIME_ERROR, COMPILE_ERROR, ..."),
    ] = None,
    offset: Offset = 0,
    limit: Limit = DEFAULT_PAGE,
    measurements_limit: Annotated[
        int,
        Field(
            ge=0,
            le=MAX_PAGE,
            description="Show at most this many measurements per profile (the newest).",
        ),
    ] = 20,
) -> ProfilePage:
    """Profiles (evaluations: status, latency, speedup, hardware counters, log tail)
    matching every filter given. A profile's latency and speedup are pooled over every
    measurement of it (with their confidence intervals), and each measurement is listed:
    when, status, median and interval, speedup and interval, flags. timed_beside_children
    counts the times its children's measurements timed it beside them (measured_total: both)."""
    store = state_of(ctx).store()
    if solution_id is not None:
        solution_id = _solution(store, solution_id).id
    found = store.list_profiles(
        solution_id=solution_id,
        workload_uuid=workload_uuid,
        run_id=ids.run_id(store, run_id) if run_id is not None else None,
        hardware=hardware,
        status=status,
        limit=limit + 1,
        offset=offset,
    )
    more = len(found) > limit
    total = offset + len(found)
    children: dict[str, list[StoredSolution]] = {}
    return ProfilePage(
        items=[_pooled_profile(store, p, measurements_limit, children) for p in found[:limit]],
        page=PageInfo(
            total=total,
            offset=offset,
            limit=limit,
            next_offset=offset + limit if more else None,
        ),
    )


TOOLS = [
    Tool.from_function(tool, annotations=READ_ONLY)
    for tool in (
        check_database,
        list_definitions,
        get_definition,
        list_solutions,
        get_solution,
        solution_lineage,
        query_profiles,
    )
]
