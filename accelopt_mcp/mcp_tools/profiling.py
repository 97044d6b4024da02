"""Profiling tools: which backends run here, and profile (and link) one kernel of a task, or a
round of candidates of one parent in one interleaved evaluation."""

from __future__ import annotations

import inspect
from typing import Annotated, Any

from mcp.server.mcpserver.tools import Tool
from mcp_types import ToolAnnotations
from pydantic import Field

from accelopt_mcp import profiling as profiler
from accelopt_mcp.backends import registry as backends
from accelopt_mcp.backends.base import Availability
from accelopt_mcp.backends.cluster import NodeReport, cluster_address, describe_nodes
from accelopt_mcp.comparing import figures_text, shown_counters, speedup_text
from accelopt_mcp.engine.contract import contract_text
from accelopt_mcp.linking import short
from accelopt_mcp.mcp_tools import ids
from accelopt_mcp.mcp_tools.compare import PairResult, pair_result
from accelopt_mcp.mcp_tools.roots import KERNEL_SUFFIXES
from accelopt_mcp.mcp_tools.state import ToolContext, state_of
from accelopt_mcp.mcp_tools.views import ClusterArg, View, clip
from accelopt_mcp.models import BenchmarkConfig, Evaluation, Task
from accelopt_mcp.models.evaluation import BreakdownEntry, Verdict
from accelopt_mcp.tasks.kernels import SOURCE_ORIGIN, kernel_solution
from accelopt_mcp.tasks.loader import load_task


class BackendList(View):
    backends: list[Availability]
    """This host's backends (the server's)."""
    cluster: str | None = None
    """The Ray cluster asked about, if any."""
    nodes: list[NodeReport] | None = None
    """Its live nodes: devices, and the backends each can run."""


class ProfileReport(View):
    status: str
    """PASSED, or why it failed (COMPILE_ERROR, ...)."""
    correct: bool
    definition_name: str
    workload_uuid: str
    backend: str
    hardware: str
    solution_id: str | None = None
    """Set when stored."""
    solution_name: str
    parent_id: str | None = None
    """The kernel it derives from (given, or stored with this source)."""
    stored: str | None = None
    """How it was stored: as a new solution, or already stored (and what was filled in)."""
    filled: list[str] = Field(default_factory=list)
    """Fields of an already stored row filled in by this call."""
    notes: list[str] = Field(default_factory=list)
    latency_ms: float | None = None
    """The median latency."""
    latency_ci_low_ms: float | None = None
    latency_ci_high_ms: float | None = None
    confidence: float | None = None
    """Level of the intervals."""
    reference_latency_ms: float | None = None
    speedup_vs_reference: float | None = None
    """Reference median / this median (same rounds)."""
    speedup_vs_reference_ci_low: float | None = None
    speedup_vs_reference_ci_high: float | None = None
    """null with a lower end given: no upper bound (too few samples, or
    a latency interval reaching 0)."""
    parent_latency_ms: float | None = None
    speedup_vs_parent: float | None = None
    """Parent median / this median; null when the parent has no comparable figure."""
    speedup_vs_parent_ci_low: float | None = None
    """The interval, when the parent was timed in the same rounds."""
    speedup_vs_parent_ci_high: float | None = None
    """null with a lower end given: no upper bound (too few samples, or
    a latency interval reaching 0)."""
    speedup_vs_parent_verdict: Verdict | None = None
    """From the interval, when the parent was timed in the same rounds: faster / slower when
    the whole interval is above / below 1, else indistinguishable (a tie: neither is shown
    faster; re-measure or keep the simpler)."""
    parent_timing: str | None = None
    """interleaved (timed in the same rounds) or stored (the parent's stored profile on the
    same workload, settings and hardware)."""
    initial_solution_id: str | None = None
    """Where the lineage starts: its run's initial kernel, else the oldest ancestor."""
    initial_latency_ms: float | None = None
    speedup_vs_initial: float | None = None
    initial_timing: str | None = None
    summary: str = ""
    """E.g. '0.412 ms [0.405, 0.419] (95% CI); 1.31x [1.27, 1.35] over the reference; 1.12x
    [1.05, 1.19] over the parent (faster)'; for a failure, its status and first log line."""
    max_relative_error: float | None = None
    max_absolute_error: float | None = None
    hardware_counters: dict[str, float] = Field(default_factory=dict)
    flags: list[str] = Field(default_factory=list)
    log: str = ""
    """The tail of the run log (errors are here)."""
    breakdown: list[BreakdownEntry] = Field(default_factory=list)
    """Where one call spends its time, largest first (asked for with breakdown: true; empty
    where the backend has none)."""
    profile_id: str | None = None
    measurements: int | None = None
    """How many measurements of this kernel the stored profile pools (this one too)."""
    pooled_summary: str | None = None
    """The pooled figure over every measurement, with its interval."""


class CandidateRound(View):
    """Several candidates of one parent, timed with it in one evaluation."""

    definition_name: str
    workload_uuid: str
    backend: str
    hardware: str
    parent_id: str
    parent_latency_ms: float | None = None
    """The parent's median in these rounds (null when it did not pass)."""
    interleaved: bool
    """True: the parent, the candidates and the reference were timed in the same rounds;
    false: one by one, intervals combined (wider), and no candidate stores a same-round
    figure against its parent."""
    confidence: float
    """Level of the intervals."""
    candidates: list[ProfileReport]
    """One per candidate, in the order given, each as a single profile_kernel call reports it
    (stored and linked, speedup_vs_parent with interval and verdict)."""
    best: str | None = None
    """The solution id of the fastest candidate whose verdict against the parent is faster;
    null when none is."""
    pairs: list[PairResult]
    """Every pair that passed (candidates by name, the parent as 'parent'), once, with a
    verdict."""
    summary: str
    """One line per candidate: name, id, verdict against the parent."""


class CandidateInput(View):
    """One candidate: exactly one of kernel_path and kernel_source."""

    kernel_path: str | None = None
    """A kernel .py or solution .json."""
    kernel_source: str | None = None
    """Or its Python source."""
    name: str | None = None
    """Default: <task>-<source hash>, or the file's stem."""
    evolve_metadata: dict[str, Any] | None = None
    """Stored with it, e.g. {'plan': ...}."""


def list_backends(
    cluster: Annotated[
        str | None,
        Field(description="Also list this Ray cluster's nodes (default: none; 'auto': local)."),
    ] = None,
) -> BackendList:
    """Every profiling backend and whether it can run on this host; when it cannot, `reason`
    says what is missing and where it would run. With `cluster`: the cluster's nodes, their
    devices and the backends each can run."""
    address = cluster_address(cluster) if cluster is not None else None
    return BackendList(
        backends=backends.list_backends(),
        cluster=address,
        nodes=describe_nodes(address) if address is not None else None,
    )


def _summary(outcome: profiler.ProfileOutcome) -> str:
    ev = outcome.evaluation
    if not ev.passed:
        first = next((line for line in ev.log.splitlines() if line.strip()), "")
        return f"{ev.status.value}: {first}" if first else ev.status.value
    parts = [figures_text(ev)]
    parent = outcome.versus_parent
    if parent is not None and parent.timing == "stored":
        parts.append(
            speedup_text(parent.speedup, None, None, f"the parent {short(parent.solution_id)}")
            + " (its stored profile)"
        )
    initial = outcome.versus_initial
    if initial is not None and initial.solution_id != outcome.parent_id:
        parts.append(
            speedup_text(
                initial.speedup, None, None, f"the initial kernel {short(initial.solution_id)}"
            )
            + " (its stored profile)"
        )
    return "; ".join(p for p in parts if p)


def profile_kernel(
    ctx: ToolContext,
    task_path: Annotated[
        str,
        Field(
            description="The task: a definition .json (FlashInfer-Trace), an NKIBench task "
            ".py, or a directory holding one."
        ),
    ],
    kernel_path: Annotated[
        str | None,
        Field(description="Kernel file: a .py with `kernel`/`run`, or a solution .json."),
    ] = None,
    kernel_source: Annotated[
        str | None, Field(description="Or the kernel's Python source itself.")
    ] = None,
    name: Annotated[
        str | None,
        Field(description="Its name (default: the file's stem, or <task>-<source hash>)."),
    ] = None,
    parent_id: Annotated[
        str | None,
        Field(
            description="The solution it was derived from: stored as its parent, and timed "
            "beside it for speedup_vs_parent."
        ),
    ] = None,
    evolve_metadata: Annotated[
        dict[str, Any] | None,
        Field(description="Notes stored with it, e.g. {'plan': ..., 'notes': ...}."),
    ] = None,
    candidates: Annotated[
        list[CandidateInput] | None,
        Field(
            description=f"Instead of one kernel: 1-{profiler.MAX_CANDIDATES} candidates of "
            "parent_id (needed), timed with it in ONE interleaved evaluation; each is stored "
            "and linked, with speedup_vs_parent and its verdict, plus every pair's verdict."
        ),
    ] = None,
    workload: Annotated[
        str | None, Field(description="Workload uuid or index; default the first.")
    ] = None,
    backend: Annotated[str, Field(description=f"One of: {backends.backend_help()}.")] = "cpu",
    store: Annotated[bool, Field(description="Store the kernel (linked) and its profile.")] = True,
    time_parent: Annotated[
        bool, Field(description="Time the parent in the same rounds (where the backend can).")
    ] = True,
    breakdown: Annotated[
        bool, Field(description="Also return where one call spends its time (per operation).")
    ] = False,
    iterations: Annotated[int, Field(ge=1, le=1000, description="Timed runs.")] = 10,
    timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = 60.0,
    benchmark: Annotated[
        dict[str, Any] | None,
        Field(
            description="Other profiling settings, e.g. {'seeds': [0, 1], 'max_timing_seconds': 5}."
        ),
    ] = None,
    cluster: ClusterArg = None,
) -> ProfileReport | CandidateRound:
    """Check a kernel against the task's reference (several seeds), time it, and store it
    with its lineage: one call profiles and links a candidate. Speedups are labelled by what
    they are against (reference, parent, initial kernel). A kernel that does not compile,
    crashes, is wrong or times out is reported in `status` and `log`, not as an error. A
    source already stored gets a missing parent or name filled in; a contradicting one is
    refused. With `candidates`: a whole round of one parent in one call."""
    if backend not in backends.backend_names():
        raise ValueError(
            f"unknown backend {backend!r}; choose one of {', '.join(backends.backend_names())} "
            "(list_backends says which run here)"
        )
    roots = state_of(ctx).roots
    task = load_task(
        roots.file_or_dir(task_path, "task_path"), workload=workload, within=roots.contains
    )
    fields: dict[str, Any] = {"iterations": iterations, "timeout_seconds": timeout_seconds}
    if breakdown:
        fields["breakdown"] = True
    config = BenchmarkConfig.model_validate({**fields, **(benchmark or {})})
    if candidates is not None:
        given: dict[str, Any] = {
            "kernel_path": kernel_path,
            "kernel_source": kernel_source,
            "name": name,
            "evolve_metadata": evolve_metadata,
        }
        clash = [k for k, v in given.items() if v is not None]
        if clash:
            raise ValueError(
                f"give {', '.join(clash)} per candidate (in candidates), not beside them"
            )
        if parent_id is None or not store:
            raise ValueError(
                "candidates are timed beside their parent and stored linked to it: give "
                "parent_id (and leave store on)"
            )
        if config.breakdown:
            # The interleaved round takes no breakdown of any kernel; saying so beats an
            # answer whose breakdowns are silently empty.
            raise ValueError(profiler.CANDIDATES_NO_BREAKDOWN)
        return _round(ctx, task, candidates, parent_id, backend, config, cluster)
    solution = kernel_solution(
        task,
        kernel_path=(
            roots.file(kernel_path, "kernel_path", suffixes=KERNEL_SUFFIXES)
            if kernel_path is not None
            else None
        ),
        kernel_source=kernel_source,
        name=name,
        target_hardware=list(backends.backend_info(backend).target_hardware),
    )
    db = state_of(ctx).store() if store or parent_id is not None else None
    parent = ids.solution_id(db, parent_id) if db is not None and parent_id is not None else None
    outcome = profiler.profile_kernel(
        task,
        solution,
        backend=backend,
        config=config,
        store=db,
        save=store,
        parent_id=parent,
        evolve_metadata=evolve_metadata,
        name_given=name is not None,
        time_parent=time_parent,
        origin=kernel_path if kernel_path is not None else SOURCE_ORIGIN,
        cluster=cluster,
    )
    return _report(outcome, backend)


def _round(
    ctx: ToolContext,
    task: Task,
    given: list[CandidateInput],
    parent_id: str,
    backend: str,
    config: BenchmarkConfig,
    cluster: str | None,
) -> CandidateRound:
    """profile_kernel with candidates: one evaluation of the parent and every candidate."""
    state = state_of(ctx)
    hardware = list(backends.backend_info(backend).target_hardware)
    chosen = []
    for index, item in enumerate(given):
        where = f"candidates[{index}]"
        if (item.kernel_path is None) == (item.kernel_source is None):
            raise ValueError(f"{where}: give exactly one of kernel_path and kernel_source")
        path = None
        if item.kernel_path is not None:
            path = state.roots.file(
                item.kernel_path, f"{where}.kernel_path", suffixes=KERNEL_SUFFIXES
            )
        solution = kernel_solution(
            task,
            kernel_path=path,
            kernel_source=item.kernel_source,
            name=item.name,
            target_hardware=hardware,
        )
        chosen.append(
            profiler.Candidate(
                solution=solution,
                evolve_metadata=item.evolve_metadata,
                name_given=item.name is not None,
                origin=item.kernel_path if item.kernel_path is not None else where,
            )
        )
    db = state.store()
    found = profiler.profile_candidates(
        task,
        chosen,
        parent_id=ids.solution_id(db, parent_id),
        store=db,
        backend=backend,
        config=config,
        cluster=cluster,
    )
    reports = [_report(o, backend) for o in found.outcomes]
    comparison = found.comparison
    parent_ev = None
    if comparison is not None:
        parent_ev = next(
            (k.evaluation for k in comparison.kernels if k.label == found.parent_label), None
        )
    faster = [
        r
        for r in reports
        if r.speedup_vs_parent_verdict == "faster" and r.speedup_vs_parent is not None
    ]
    best = max(faster, key=lambda r: r.speedup_vs_parent or 0.0) if faster else None
    lines = []
    for label, report in zip(found.labels, reports, strict=True):
        if not report.correct:
            lines.append(f"{label} ({short(report.solution_id or '')}): {report.summary}")
            continue
        against = "n/a"
        if report.speedup_vs_parent is not None:
            against = speedup_text(
                report.speedup_vs_parent,
                report.speedup_vs_parent_ci_low,
                report.speedup_vs_parent_ci_high,
                "the parent",
            ) + (
                f" ({report.speedup_vs_parent_verdict})" if report.speedup_vs_parent_verdict else ""
            )
        lines.append(f"{label} ({short(report.solution_id or '')}): {against}")
    first = reports[0]
    return CandidateRound(
        definition_name=first.definition_name,
        workload_uuid=first.workload_uuid,
        backend=backend,
        hardware=first.hardware,
        parent_id=found.parent_id,
        parent_latency_ms=(
            parent_ev.performance.latency_ms
            if parent_ev is not None and parent_ev.passed and parent_ev.performance
            else None
        ),
        interleaved=comparison.interleaved if comparison is not None else False,
        confidence=comparison.confidence if comparison is not None else config.confidence,
        candidates=reports,
        best=best.solution_id if best is not None else None,
        pairs=[pair_result(p) for p in comparison.pairs] if comparison is not None else [],
        summary="; ".join(lines),
    )


def _report(outcome: profiler.ProfileOutcome, backend: str) -> ProfileReport:
    """What profile_kernel returns for one kernel."""
    ev = outcome.evaluation
    perf, stats = ev.performance, ev.latency_stats
    vs_parent, vs_initial = outcome.versus_parent, outcome.versus_initial
    linked = outcome.stored
    beside = next((c for c in ev.comparisons if c.baseline == profiler.PARENT_LABEL), None)
    return ProfileReport(
        status=ev.status.value,
        correct=ev.passed,
        definition_name=outcome.definition_name,
        workload_uuid=outcome.workload_uuid,
        backend=backend,
        hardware=ev.environment.hardware,
        solution_id=outcome.solution_id,
        solution_name=outcome.solution_name,
        parent_id=outcome.parent_id,
        stored=linked.describe() if linked is not None else None,
        filled=linked.filled if linked is not None else [],
        notes=linked.notes if linked is not None else [],
        latency_ms=perf.latency_ms if perf else None,
        latency_ci_low_ms=stats.ci_low_ms if stats and perf else None,
        latency_ci_high_ms=stats.ci_high_ms if stats and perf else None,
        confidence=stats.confidence if stats and perf else None,
        reference_latency_ms=perf.reference_latency_ms if perf else None,
        speedup_vs_reference=perf.speedup_factor if perf and perf.speedup_factor > 0 else None,
        speedup_vs_reference_ci_low=perf.speedup_ci_low if perf else None,
        speedup_vs_reference_ci_high=perf.speedup_ci_high if perf else None,
        parent_latency_ms=vs_parent.baseline_latency_ms if vs_parent else None,
        speedup_vs_parent=vs_parent.speedup if vs_parent else None,
        speedup_vs_parent_ci_low=vs_parent.ci_low if vs_parent else None,
        speedup_vs_parent_ci_high=vs_parent.ci_high if vs_parent else None,
        speedup_vs_parent_verdict=(
            beside.verdict
            if beside is not None and vs_parent is not None and vs_parent.timing == "interleaved"
            else None
        ),
        parent_timing=vs_parent.timing if vs_parent else None,
        initial_solution_id=outcome.initial_solution_id,
        initial_latency_ms=vs_initial.baseline_latency_ms if vs_initial else None,
        speedup_vs_initial=vs_initial.speedup if vs_initial else None,
        initial_timing=vs_initial.timing if vs_initial else None,
        summary=_summary(outcome),
        max_relative_error=ev.correctness.max_relative_error if ev.correctness else None,
        max_absolute_error=ev.correctness.max_absolute_error if ev.correctness else None,
        # Harness internals are not properties of the kernel; never hand them to an agent.
        hardware_counters=shown_counters(ev),
        flags=list(ev.flags),
        log=clip(ev.log, 2000) or "",
        breakdown=sorted(ev.breakdown, key=lambda e: -e.ms),
        profile_id=outcome.profile_id,
        measurements=pooled_count(outcome.pooled),
        pooled_summary=(
            (figures_text(outcome.pooled) or None) if outcome.pooled is not None else None
        ),
    )


def pooled_count(pooled: Evaluation | None) -> int | None:
    if pooled is None or pooled.latency_stats is None:
        return None
    return pooled.latency_stats.measurements


TOOLS = [
    Tool.from_function(
        list_backends, annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True)
    ),
    Tool.from_function(
        profile_kernel,
        # The contract the harness holds every kernel to, from the text the prompts use, so an
        # agent writing kernels by hand reads the same rule as the executor LLM.
        description=f"{inspect.getdoc(profile_kernel)}\n\nThe contract on cpu (default "
        f"settings; nki and flashinfer apply their own):\n{contract_text('cpu')}",
        annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True),
    ),
]
