"""Profile a kernel and keep the result: the one path the CLI and the MCP server share.

A kernel is profiled against the task's reference (the backend times both) and, given a
database, against its lineage: its parent (timed in the same interleaved rounds where the
backend can, else from the parent's stored profile on the same workload, settings and hardware)
and the initial kernel it descends from (its run's initial kernel, else the root of its
lineage; from a stored profile). A kernel that is not valid Python is a COMPILE_ERROR
evaluation naming the line as its author knows it, without starting the backend.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Literal, TypedDict

from pydantic import BaseModel

from accelopt_mcp.backends.base import Backend, Baseline
from accelopt_mcp.backends.cluster import cluster_address
from accelopt_mcp.backends.placement import local_backend, local_options_only
from accelopt_mcp.backends.registry import backend_class
from accelopt_mcp.comparing import MAX_KERNELS, compare_kernels, unique_labels
from accelopt_mcp.hashing import CURRENT_HASH_VERSION, benchmark_config_hash, solution_hash
from accelopt_mcp.linking import StoredKernel, plan_links, short, store_kernel
from accelopt_mcp.models import (
    BenchmarkConfig,
    Comparison,
    Environment,
    Evaluation,
    EvaluationStatus,
    KernelComparison,
    Solution,
    Task,
)
from accelopt_mcp.models.evaluation import Verdict
from accelopt_mcp.stats import finite_or_none
from accelopt_mcp.store.base import KernelStore, StoredSolution, UnknownReferenceError
from accelopt_mcp.tasks.inputs import stress_signature
from accelopt_mcp.tasks.kernels import syntax_problem

PARENT_LABEL = "parent"
"""The label the parent is timed under (Evaluation.comparisons)."""


class Relative(BaseModel):
    """This kernel against another kernel of its lineage."""

    solution_id: str
    baseline_latency_ms: float
    """The other kernel's median latency."""
    speedup: float
    """Its median / this kernel's median (above 1: this kernel is faster)."""
    ci_low: float | None = None
    """The speedup's interval, when both were timed in the same rounds."""
    ci_high: float | None = None
    """None with ci_low given: no upper bound (too few samples, or
    a latency interval reaching 0)."""
    timing: Literal["interleaved", "stored"]
    """interleaved: timed in the same rounds as this kernel (noise cancels); stored: from the
    other kernel's stored profile on the same workload, settings and hardware."""


class _Links(TypedDict):
    """A stored kernel's links as profiling asks for them (linking.plan_links and
    linking.store_kernel take the same): the author is never taken as chosen here."""

    parent_id: str | None
    evolve_metadata: dict[str, Any] | None
    name_given: bool
    author_given: bool


def _links(
    parent_id: str | None, evolve_metadata: dict[str, Any] | None, name_given: bool
) -> _Links:
    return _Links(
        parent_id=parent_id,
        evolve_metadata=evolve_metadata,
        name_given=name_given,
        author_given=False,
    )


class ProfileOutcome(BaseModel):
    evaluation: Evaluation
    definition_name: str
    workload_uuid: str
    solution_name: str
    solution_id: str | None = None
    """Set when the result was stored."""
    profile_id: str | None = None
    pooled: Evaluation | None = None
    """When stored: the profile's figure pooled over every measurement of this kernel on this
    workload, settings and hardware (this one included)."""
    stored: StoredKernel | None = None
    """When stored: whether the row is new, and what was filled in on an existing one."""
    parent_id: str | None = None
    """The kernel's parent (given, or stored with its source)."""
    versus_parent: Relative | None = None
    initial_solution_id: str | None = None
    """The kernel its lineage starts from: its run's initial kernel, else its oldest
    ancestor."""
    versus_initial: Relative | None = None


def profile_kernel(
    task: Task,
    solution: Solution,
    *,
    backend: str = "cpu",
    config: BenchmarkConfig | None = None,
    store: KernelStore | None = None,
    save: bool = True,
    parent_id: str | None = None,
    evolve_metadata: dict[str, Any] | None = None,
    name_given: bool = False,
    time_parent: bool = True,
    origin: str | None = None,
    backend_options: dict[str, Any] | None = None,
    cluster: str | None = None,
    breakdown: bool | None = None,
) -> ProfileOutcome:
    """Evaluate `solution` on `task` and, given a store (and `save`), record the definition,
    workload, solution (linked: accelopt_mcp.linking.store_kernel) and profile. The kernel
    runs in a child process; its failures come back as the evaluation's status, never as an
    exception. The evaluation's log comes back (and is stored) redacted: a kernel's output
    may hold a secret of the environment it ran in.

    parent_id (a full id; needs a store): the kernel it was derived from. With time_parent,
    the parent is timed in the same rounds where the backend interleaves. A link that
    contradicts the stored row of this source raises ConflictError before anything runs.
    name_given: whether solution.name was chosen by the caller, so that a stored name that
    differs is a conflict (see linking.plan_links); by default a name only replaces a
    placeholder. The author is never taken as chosen here.
    origin: how a syntax error names the kernel (tasks.kernels.syntax_problem).
    cluster: evaluate on a node of this Ray cluster (backends/cluster.py; None reads
    ACCELOPT_RAY_ADDRESS, else this host); ClusterError when it cannot be used.
    breakdown: also take where one call spends its time (Evaluation.breakdown, stored with the
    profile); None leaves config.breakdown as it is."""
    config = config or BenchmarkConfig()
    if breakdown is not None and breakdown != config.breakdown:
        config = config.model_copy(update={"breakdown": breakdown})
    if parent_id is not None and store is None:
        raise ValueError("parent_id needs a database to find the parent in")
    links = _links(parent_id, evolve_metadata, name_given)
    parent = _parent(store, solution, links, save=save)
    local_options_only(backend_options, cluster_address(cluster))
    options = dict(backend_options or {})
    if store is not None:
        options = backend_class(backend).options_from_store(store) | options
    engine = local_backend(backend, options)
    # One evaluation alone, on the cores the backend pins it to (a cpu one: all when None).
    key = config.profile_key(
        cores=engine.cores_per_evaluation, stress=stress_signature(task.definition.reference)
    )
    problem = syntax_problem(solution, origin)
    if problem is not None:
        evaluation = _compile_error(engine, problem)
    else:
        baselines = []
        if time_parent and parent is not None and parent.definition_name == task.definition.name:
            baselines = [Baseline(label=PARENT_LABEL, solution=parent.solution)]
        evaluation = evaluate_somewhere(engine, task, solution, config, baselines, cluster)
        if baselines and parent is not None:
            # Stored with the comparison: which kernel the 'parent' was (engine/lineage.py).
            evaluation = evaluation.with_baseline_id(PARENT_LABEL, parent.id)
    evaluation = evaluation.redacted()
    outcome = ProfileOutcome(
        evaluation=evaluation,
        definition_name=task.definition.name,
        workload_uuid=task.workload.uuid,
        solution_name=solution.name,
        parent_id=parent.id if parent is not None else None,
    )
    if store is None:
        return outcome
    if save:
        store.upsert_definition(task.definition)
        store.upsert_workload(task.definition.name, task.workload)
        outcome.stored = store_kernel(store, solution, **links)
        outcome.solution_id = outcome.stored.solution_id
        outcome.solution_name = outcome.stored.name
        outcome.profile_id = store.upsert_profile(
            task.workload.uuid, outcome.solution_id, evaluation, key
        )
        pooled = store.get_profile(outcome.profile_id)
        outcome.pooled = pooled.evaluation if pooled is not None else None
    _relate(outcome, store, task, key, parent, evolve_metadata)
    return outcome


def evaluate_somewhere(
    engine: Backend,
    task: Task,
    solution: Solution,
    config: BenchmarkConfig,
    baselines: list[Baseline],
    cluster: str | None,
) -> Evaluation:
    """engine.evaluate here, or the same backend on a node of the cluster when one is named."""
    address = cluster_address(cluster)
    if address is None:
        return engine.evaluate(task, solution, config, baselines)
    from accelopt_mcp.backends.ray_pool import RayPool

    with RayPool(address, engine.info, workers=1) as pool:
        return pool.submit(type(engine), task, solution, config, baselines).result().evaluation


def _parent(
    store: KernelStore | None, solution: Solution, links: _Links, *, save: bool
) -> StoredSolution | None:
    """The kernel's parent: the one given, else the one stored with this source. When the
    kernel is to be stored, the links are checked first (a conflict raises here, before the
    backend runs)."""
    if store is None:
        return None
    if save:
        effective = plan_links(store, solution, **links).parent_id
    elif links["parent_id"] is not None:
        effective = links["parent_id"]
    else:
        existing = store.find_solution(
            solution.definition, solution_hash(solution), CURRENT_HASH_VERSION
        )
        effective = existing.parent_id if existing is not None else None
    if effective is None:
        return None
    found = store.get_solution(effective)
    if found is None:
        raise UnknownReferenceError(f"no solution with id {effective!r} to be the parent")
    return found


def _hardware(engine: Backend) -> str:
    hardware = getattr(engine, "hardware", None)
    if isinstance(hardware, str) and hardware:
        return hardware
    return engine.availability().hardware or engine.name


def _compile_error(engine: Backend, problem: str) -> Evaluation:
    """The evaluation of a kernel that does not parse: nothing ran."""
    return Evaluation(
        status=EvaluationStatus.COMPILE_ERROR,
        environment=Environment(hardware=_hardware(engine)),
        timestamp=datetime.now(UTC).isoformat(),
        log=f"syntax error in {problem}",
    )


def _median(evaluation: Evaluation) -> float | None:
    perf = evaluation.performance
    if not evaluation.passed or perf is None or perf.latency_ms <= 0:
        return None
    return perf.latency_ms


def stored_latency(
    store: KernelStore, solution_id: str, task: Task, key: dict[str, Any], hardware: str
) -> float | None:
    """The pooled median of a solution's stored profile on this workload, settings and
    hardware, filed under `key` (BenchmarkConfig.profile_key), when it passed with a trusted
    result; None otherwise."""
    wanted = benchmark_config_hash(key)
    for profile in store.list_profiles(
        solution_id=solution_id, workload_uuid=task.workload.uuid, hardware=hardware
    ):
        if profile.benchmark_config_hash == wanted and profile.trusted:
            return _median(profile.evaluation)
    return None


def _relate(
    outcome: ProfileOutcome,
    store: KernelStore,
    task: Task,
    key: dict[str, Any],
    parent: StoredSolution | None,
    evolve_metadata: dict[str, Any] | None,
) -> None:
    """Fill in the speedups over the parent and the initial kernel, where known."""
    evaluation = outcome.evaluation
    mine = _median(evaluation)
    hardware = evaluation.environment.hardware

    def from_store(solution_id: str) -> Relative | None:
        theirs = stored_latency(store, solution_id, task, key, hardware)
        if mine is None or theirs is None:
            return None
        return Relative(
            solution_id=solution_id,
            baseline_latency_ms=theirs,
            speedup=theirs / mine,
            timing="stored",
        )

    if parent is not None:
        beside = next((c for c in evaluation.comparisons if c.baseline == PARENT_LABEL), None)
        if beside is not None and mine is not None:
            outcome.versus_parent = Relative(
                solution_id=parent.id,
                baseline_latency_ms=beside.baseline_latency_ms,
                speedup=beside.speedup,
                ci_low=finite_or_none(beside.ci_low),
                ci_high=finite_or_none(beside.ci_high),
                timing="interleaved",
            )
        else:
            outcome.versus_parent = from_store(parent.id)
    initial = _initial(store, parent, evolve_metadata, outcome.solution_id)
    outcome.initial_solution_id = initial
    if initial is None:
        return
    if parent is not None and initial == parent.id:
        outcome.versus_initial = outcome.versus_parent
    else:
        outcome.versus_initial = from_store(initial)


def _initial(
    store: KernelStore,
    parent: StoredSolution | None,
    evolve_metadata: dict[str, Any] | None,
    solution_id: str | None,
) -> str | None:
    """The run's initial kernel (evolve_metadata.run_id, or the parent's run), else the root
    of the lineage; None for a kernel without a parent that belongs to no run (it is its own
    starting point)."""
    run_ids = [(evolve_metadata or {}).get("run_id")]
    if parent is not None:
        run_ids.append(parent.evolve_metadata.get("run_id"))
    for run_id in run_ids:
        if isinstance(run_id, str) and run_id:
            run = store.get_run(run_id)
            if run is not None and run.initial_solution_id not in (None, solution_id):
                return run.initial_solution_id
    if parent is None:
        return None
    ancestors = store.ancestors(parent.id)
    return (ancestors[-1] if ancestors else parent).id


# --------------------------------------------------------------------------- several candidates


MAX_CANDIDATES = MAX_KERNELS - 1
"""Candidates one call times beside their parent (the parent takes one of the kernels a
comparison holds)."""
CANDIDATES_NO_BREAKDOWN = (
    "breakdown is not taken in a round of candidates (they are timed interleaved, with no "
    "traced call): profile the candidate you want broken down on its own, with breakdown"
)
"""Why profile_candidates refuses a config with breakdown on (one line, for every front end)."""


class Candidate(BaseModel):
    """One candidate of a round: its solution and how it is to be stored."""

    solution: Solution
    evolve_metadata: dict[str, Any] | None = None
    name_given: bool = False
    """Whether solution.name was chosen by the caller (see profile_kernel)."""
    origin: str | None = None
    """How a syntax error names it (tasks.kernels.syntax_problem)."""


class CandidatesOutcome(BaseModel):
    """Several candidates of one parent, timed in one evaluation."""

    outcomes: list[ProfileOutcome]
    """One per candidate, in the order given, each as profile_kernel would return it."""
    labels: list[str]
    """How the comparison names each candidate (its name, made unique), in the same order."""
    parent_id: str
    parent_label: str
    """How the comparison names the parent."""
    comparison: KernelComparison | None = None
    """The parent and every candidate that could run, timed against each other (None when
    none could: each failed before the backend started)."""


def profile_candidates(
    task: Task,
    candidates: Sequence[Candidate],
    *,
    parent_id: str,
    store: KernelStore,
    backend: str = "cpu",
    config: BenchmarkConfig | None = None,
    save: bool = True,
    backend_options: dict[str, Any] | None = None,
    cluster: str | None = None,
) -> CandidatesOutcome:
    """Evaluate 1 to MAX_CANDIDATES candidates derived from one parent in ONE comparison
    (Backend.compare: the parent, every candidate and the reference in the same interleaved
    rounds where the backend can), and record each as profile_kernel records one: linked to
    the parent, its profile stored with the parent's figure in those rounds as its
    'parent' comparison (so lineage views read it as timed in the same rounds). A candidate
    that fails never fails the others. parent_id: a full id. Links are checked for every
    candidate before anything runs (ConflictError, UnknownReferenceError)."""
    if not 1 <= len(candidates) <= MAX_CANDIDATES:
        raise ValueError(
            f"give 1 to {MAX_CANDIDATES} candidates (the parent is timed beside them, "
            f"{MAX_KERNELS} kernels at most), got {len(candidates)}"
        )
    config = config or BenchmarkConfig()
    if config.breakdown:
        raise ValueError(CANDIDATES_NO_BREAKDOWN)
    parent: StoredSolution | None = None
    for candidate in candidates:
        found = _parent(
            store,
            candidate.solution,
            _links(parent_id, candidate.evolve_metadata, candidate.name_given),
            save=save,
        )
        parent = parent or found
    assert parent is not None  # parent_id is given: _parent found it or raised
    if parent.definition_name != task.definition.name:
        raise ValueError(
            f"the parent {short(parent.id)} is a kernel of {parent.definition_name!r}, not of "
            f"the task's {task.definition.name!r}: give a parent of this task"
        )
    local_options_only(backend_options, cluster_address(cluster))
    options = backend_class(backend).options_from_store(store) | dict(backend_options or {})
    engine = local_backend(backend, options)
    key = config.profile_key(
        cores=engine.cores_per_evaluation, stress=stress_signature(task.definition.reference)
    )
    labelled = unique_labels(
        [Baseline(label=PARENT_LABEL, solution=parent.solution)]
        + [Baseline(label=c.solution.name, solution=c.solution) for c in candidates]
    )
    parent_label, labels = labelled[0].label, [b.label for b in labelled[1:]]
    evaluations: dict[int, Evaluation] = {}
    runnable: list[int] = []
    for index, candidate in enumerate(candidates):
        problem = syntax_problem(candidate.solution, candidate.origin)
        if problem is not None:
            evaluations[index] = _compile_error(engine, problem)
        else:
            runnable.append(index)
    comparison = None
    if runnable:
        comparison = compare_kernels(
            task,
            [labelled[0], *(labelled[i + 1] for i in runnable)],
            backend=backend,
            config=config,
            backend_options=options,
            cluster=cluster,
        )
        timed = {k.label: k.evaluation for k in comparison.kernels}
        for index in runnable:
            evaluation = timed[labels[index]]
            beside = (
                versus_baseline(comparison, labels[index], parent_label, timed[parent_label])
                if comparison.interleaved
                else None
            )
            if beside is not None:
                # Stored as profile_kernel stores a parent timed in the same rounds.
                beside = beside.model_copy(
                    update={"baseline": PARENT_LABEL, "baseline_id": parent.id}
                )
                evaluation = evaluation.model_copy(update={"comparisons": [beside]})
            evaluations[index] = evaluation
    outcomes = []
    for index, candidate in enumerate(candidates):
        outcome = ProfileOutcome(
            evaluation=evaluations[index].redacted(),
            definition_name=task.definition.name,
            workload_uuid=task.workload.uuid,
            solution_name=candidate.solution.name,
            parent_id=parent.id,
        )
        if save:
            _save(outcome, store, task, candidate, parent.id, key)
        _relate(outcome, store, task, key, parent, candidate.evolve_metadata)
        outcomes.append(outcome)
    return CandidatesOutcome(
        outcomes=outcomes,
        labels=labels,
        parent_id=parent.id,
        parent_label=parent_label,
        comparison=comparison,
    )


TURNED: dict[Verdict, Verdict] = {
    "faster": "slower",
    "slower": "faster",
    "indistinguishable": "indistinguishable",
}
"""A verdict read the other way round."""


def versus_baseline(
    comparison: KernelComparison, kernel: str, baseline: str, baseline_evaluation: Evaluation
) -> Comparison | None:
    """`kernel` against `baseline` as a Comparison (speedup = baseline median / kernel
    median), from the pair of a comparison that timed both, whichever of the two it lists
    first; None when the comparison holds no such pair (one of them did not pass)."""
    perf = baseline_evaluation.performance
    for pair in comparison.pairs:
        if {pair.kernel, pair.baseline} != {kernel, baseline} or perf is None:
            continue
        speedup, low, high, verdict = pair.speedup, pair.ci_low, pair.ci_high, pair.verdict
        if pair.kernel == baseline:  # the baseline was the faster: turn the pair around
            speedup = 1.0 / speedup if speedup > 0 else math.inf
            low, high = (1.0 / high if high > 0 else 0.0), (1.0 / low if low > 0 else math.inf)
            verdict = TURNED[verdict]
        return Comparison(
            baseline=baseline,
            baseline_latency_ms=perf.latency_ms,
            speedup=speedup,
            ci_low=low,
            ci_high=high,
            verdict=verdict,
        )
    return None


def _save(
    outcome: ProfileOutcome,
    store: KernelStore,
    task: Task,
    candidate: Candidate,
    parent_id: str,
    key: dict[str, Any],
) -> None:
    """Store a candidate (linked) and its profile, as profile_kernel does."""
    store.upsert_definition(task.definition)
    store.upsert_workload(task.definition.name, task.workload)
    outcome.stored = store_kernel(
        store,
        candidate.solution,
        **_links(parent_id, candidate.evolve_metadata, candidate.name_given),
    )
    outcome.solution_id = outcome.stored.solution_id
    outcome.solution_name = outcome.stored.name
    outcome.profile_id = store.upsert_profile(
        task.workload.uuid, outcome.solution_id, outcome.evaluation, key
    )
    pooled = store.get_profile(outcome.profile_id)
    outcome.pooled = pooled.evaluation if pooled is not None else None
