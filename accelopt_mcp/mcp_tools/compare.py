"""compare_kernels: time 2-8 kernels of one task against each other, ranked, with a verdict for
every pair."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp_types import ToolAnnotations
from pydantic import Field

from accelopt_mcp import comparing
from accelopt_mcp.backends import registry as backends
from accelopt_mcp.backends.base import Baseline
from accelopt_mcp.mcp_tools import ids
from accelopt_mcp.mcp_tools.app import NotFoundError
from accelopt_mcp.mcp_tools.roots import KERNEL_SUFFIXES
from accelopt_mcp.mcp_tools.state import ToolContext, state_of
from accelopt_mcp.mcp_tools.views import ClusterArg, TimedFigures, View, clip
from accelopt_mcp.models import (
    BenchmarkConfig,
    ComparedKernel,
    EvaluationStatus,
    KernelComparison,
    PairVerdict,
    Task,
)
from accelopt_mcp.stats import finite_or_none
from accelopt_mcp.tasks.kernels import syntax_problem
from accelopt_mcp.tasks.loader import load_task


class KernelInput(View):
    """One kernel: exactly one of solution_id, kernel_path, kernel_source."""

    solution_id: str | None = None
    """A stored solution's id or its 8+ first characters (list_solutions)."""
    kernel_path: str | None = None
    """A kernel .py with `kernel`/`run`, or a solution .json."""
    kernel_source: str | None = None
    """The kernel's Python source itself."""
    label: str | None = None
    """How results name it (default: the id, the file name, or kernel<N>)."""


class RankedKernel(TimedFigures):
    rank: int | None = None
    """1 for the fastest median; null when it did not pass."""
    label: str
    status: str
    """PASSED, or why it failed (COMPILE_ERROR, ...)."""
    summary: str = ""
    """E.g. '0.412 ms [0.405, 0.419] (95% CI); 1.31x [1.27, 1.35] over the reference'."""
    flags: list[str] = Field(default_factory=list)
    log: str = ""
    """Why it failed (the log's tail); empty when it passed."""


class PairResult(View):
    kernel: str
    """The faster median of the two."""
    baseline: str
    verdict: Literal["faster", "slower", "indistinguishable"]
    """From the speedup's interval: wholly above 1, wholly below, or holding 1."""
    speedup_vs_baseline: float
    """baseline median / kernel median."""
    ci_low: float
    ci_high: float | None = None
    """null: no upper bound (too few samples, or
    a latency interval reaching 0)."""
    summary: str


class ComparisonReport(View):
    definition_name: str
    workload_uuid: str
    backend: str
    hardware: str
    confidence: float
    interleaved: bool
    """True when all were timed in the same interleaved rounds; false when each was timed on
    its own and the intervals combined (wider)."""
    kernels: list[RankedKernel]
    """Fastest median first; those that failed last."""
    pairs: list[PairResult]
    """Every pair that passed, once."""


def _kernel(
    task: Task, given: KernelInput, index: int, ctx: ToolContext, hw: list[str]
) -> Baseline:
    where = f"kernels[{index}]"
    chosen = [
        v for v in (given.solution_id, given.kernel_path, given.kernel_source) if v is not None
    ]
    if len(chosen) != 1:
        raise ValueError(f"{where}: give exactly one of solution_id, kernel_path and kernel_source")
    if given.solution_id is not None:
        store = state_of(ctx).store()
        try:
            full = ids.solution_id(store, given.solution_id)
        except ToolError as exc:
            raise type(exc)(f"{where}: {exc}") from None
        try:
            return comparing.stored_kernel(store, task, full, given.label or given.solution_id)
        except LookupError as exc:
            raise NotFoundError(
                f"{where}: {exc}; list_solutions gives the ids of a definition"
            ) from None
    if given.kernel_path is not None:
        path = state_of(ctx).roots.file(
            given.kernel_path, f"{where}.kernel_path", suffixes=KERNEL_SUFFIXES
        )
        return comparing.file_kernel(
            task, path, label=given.label or Path(given.kernel_path).name, target_hardware=hw
        )
    assert given.kernel_source is not None
    return comparing.source_kernel(
        task, given.kernel_source, label=given.label or f"kernel{index + 1}", target_hardware=hw
    )


def _origin(given: KernelInput, index: int) -> str:
    """How a syntax error names the kernel: as the caller gave it."""
    if given.kernel_path is not None:
        return given.kernel_path
    if given.kernel_source is not None:
        return f"kernels[{index}].kernel_source"
    return f"solution {given.solution_id}"


def _row(entry: ComparedKernel, problems: dict[str, str]) -> RankedKernel:
    ev = entry.evaluation
    stats, perf = ev.latency_stats, ev.performance
    log = "" if ev.passed else clip(ev.log, 1000) or ""
    problem = problems.get(entry.label)
    if problem is not None and ev.status == EvaluationStatus.COMPILE_ERROR:
        log = f"syntax error in {problem}"  # not the backend's, which names its temp copy
    return RankedKernel(
        rank=entry.rank,
        label=entry.label,
        status=ev.status.value,
        median_ms=perf.latency_ms if perf else None,
        ci_low_ms=stats.ci_low_ms if stats and perf else None,
        ci_high_ms=stats.ci_high_ms if stats and perf else None,
        speedup_vs_reference=(
            perf.speedup_factor if perf and perf.reference_latency_ms > 0 else None
        ),
        speedup_vs_reference_ci_low=perf.speedup_ci_low if perf else None,
        speedup_vs_reference_ci_high=perf.speedup_ci_high if perf else None,
        summary=comparing.figures_text(ev),
        flags=list(ev.flags),
        log=log,
    )


def report(
    task: Task, backend: str, found: KernelComparison, problems: dict[str, str] | None = None
) -> ComparisonReport:
    """The tool's result; problems: label -> where its source does not parse."""
    return ComparisonReport(
        definition_name=task.definition.name,
        workload_uuid=task.workload.uuid,
        backend=backend,
        hardware=found.kernels[0].evaluation.environment.hardware if found.kernels else "",
        confidence=found.confidence,
        interleaved=found.interleaved,
        kernels=[_row(k, problems or {}) for k in found.kernels],
        pairs=[pair_result(p) for p in found.pairs],
    )


def pair_result(pair: PairVerdict) -> PairResult:
    """A pair's verdict as the tools report it."""
    return PairResult(
        kernel=pair.kernel,
        baseline=pair.baseline,
        verdict=pair.verdict,
        speedup_vs_baseline=pair.speedup,
        ci_low=pair.ci_low,
        ci_high=finite_or_none(pair.ci_high),
        summary=comparing.pair_text(pair),
    )


def compare_kernels(
    ctx: ToolContext,
    task_path: Annotated[
        str,
        Field(description="The task, as profile_kernel takes it."),
    ],
    kernels: Annotated[list[KernelInput], Field(description="2 to 8 kernels.")],
    workload: Annotated[
        str | None, Field(description="Workload uuid or index; default the first.")
    ] = None,
    backend: Annotated[str, Field(description="As profile_kernel.")] = "cpu",
    iterations: Annotated[int, Field(ge=1, le=1000, description="Rounds per process set.")] = 10,
    max_timing_seconds: Annotated[float, Field(gt=0, le=600, description="Sampling cap.")] = 20.0,
    timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = 60.0,
    cluster: ClusterArg = None,
) -> ComparisonReport:
    """Time 2-8 kernels of one task against each other (in the same interleaved rounds where
    the backend can): ranked by median with intervals, and a verdict per pair (faster /
    indistinguishable). Nothing is stored."""
    if backend not in backends.backend_names():
        raise ValueError(
            f"unknown backend {backend!r}; choose one of {', '.join(backends.backend_names())} "
            "(list_backends says which run here)"
        )
    comparing.check_count(len(kernels))
    roots = state_of(ctx).roots
    task = load_task(
        roots.file_or_dir(task_path, "task_path"), workload=workload, within=roots.contains
    )
    hardware = list(backends.backend_info(backend).target_hardware)
    chosen = [_kernel(task, k, i, ctx, hardware) for i, k in enumerate(kernels)]
    config = BenchmarkConfig(
        iterations=iterations,
        max_timing_seconds=max_timing_seconds,
        timeout_seconds=timeout_seconds,
    )
    problems = {
        kernel.label: problem
        for i, (given, kernel) in enumerate(zip(kernels, chosen, strict=True))
        if (problem := syntax_problem(kernel.solution, _origin(given, i))) is not None
    }
    found = comparing.compare_kernels(task, chosen, backend=backend, config=config, cluster=cluster)
    return report(task, backend, found, problems)


TOOLS = [
    Tool.from_function(
        compare_kernels,
        annotations=ToolAnnotations(
            read_only_hint=True, destructive_hint=False, idempotent_hint=True
        ),
    ),
]
