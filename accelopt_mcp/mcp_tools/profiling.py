"""Profiling tools: which backends run here, and profile one kernel against a task."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from mcp.server.mcpserver.tools import Tool
from mcp_types import ToolAnnotations
from pydantic import Field

from accelopt_mcp import profiling as profiler
from accelopt_mcp.backends import registry as backends
from accelopt_mcp.backends.base import Availability
from accelopt_mcp.comparing import figures_text, shown_counters
from accelopt_mcp.mcp_tools.state import ToolContext, state_of
from accelopt_mcp.mcp_tools.views import View, clip
from accelopt_mcp.models import BenchmarkConfig, Evaluation
from accelopt_mcp.tasks.kernels import kernel_solution
from accelopt_mcp.tasks.loader import load_task


class BackendList(View):
    backends: list[Availability]


class ProfileReport(View):
    status: str
    """PASSED, or why it failed (COMPILE_ERROR, ...)."""
    correct: bool
    definition_name: str
    workload_uuid: str
    backend: str
    solution_name: str
    hardware: str
    latency_ms: float | None = None
    """The median latency."""
    latency_ci_low_ms: float | None = None
    latency_ci_high_ms: float | None = None
    reference_latency_ms: float | None = None
    speedup: float | None = None
    """Over the task's reference: reference median / kernel median."""
    speedup_ci_low: float | None = None
    speedup_ci_high: float | None = None
    confidence: float | None = None
    """Level of the intervals."""
    summary: str = ""
    """E.g. '0.412 ms [0.405, 0.419] (95% CI); 1.31x [1.27, 1.35] over the reference'."""
    max_relative_error: float | None = None
    max_absolute_error: float | None = None
    hardware_counters: dict[str, float] = Field(default_factory=dict)
    flags: list[str] = Field(default_factory=list)
    log: str = ""
    """The tail of the run log (errors are here)."""
    solution_id: str | None = None
    """Set when stored."""
    profile_id: str | None = None
    measurements: int | None = None
    """When stored: how many measurements of this kernel the profile pools (this one too)."""
    pooled_summary: str | None = None
    """When stored: the pooled figure over every measurement, with its interval."""


def list_backends() -> BackendList:
    """Every profiling backend and whether it can run on this host;
    when it cannot, `reason` says what is missing and where it would run."""
    return BackendList(backends=backends.list_backends())


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
        str | None,
        Field(description="Or the kernel's Python source itself (instead of kernel_path)."),
    ] = None,
    workload: Annotated[
        str | None, Field(description="Workload uuid or index; default the first.")
    ] = None,
    backend: Annotated[str, Field(description=f"One of: {backends.backend_help()}.")] = "cpu",
    store: Annotated[
        bool, Field(description="Store the kernel and its profile in the database.")
    ] = True,
    iterations: Annotated[int, Field(ge=1, le=1000, description="Timed runs.")] = 10,
    timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = 60.0,
) -> ProfileReport:
    """Check a kernel for correctness against the task's reference (several seeds) and time
    it on a backend. A kernel that fails to compile, crashes or is wrong is reported in
    `status` and `log`, not as an error."""
    if backend not in backends.backend_names():
        raise ValueError(
            f"unknown backend {backend!r}; choose one of {', '.join(backends.backend_names())} "
            "(list_backends says which run here)"
        )
    task = load_task(Path(task_path).expanduser(), workload=workload)
    solution = kernel_solution(
        task,
        kernel_path=kernel_path,
        kernel_source=kernel_source,
        target_hardware=list(backends.backend_info(backend).target_hardware),
    )
    config = BenchmarkConfig(iterations=iterations, timeout_seconds=timeout_seconds)
    outcome = profiler.profile_kernel(
        task,
        solution,
        backend=backend,
        config=config,
        store=state_of(ctx).store() if store else None,
    )
    ev = outcome.evaluation
    perf, stats = ev.performance, ev.latency_stats
    return ProfileReport(
        status=ev.status.value,
        correct=ev.passed,
        definition_name=outcome.definition_name,
        workload_uuid=outcome.workload_uuid,
        backend=backend,
        solution_name=outcome.solution_name,
        hardware=ev.environment.hardware,
        latency_ms=perf.latency_ms if perf else None,
        latency_ci_low_ms=stats.ci_low_ms if stats and perf else None,
        latency_ci_high_ms=stats.ci_high_ms if stats and perf else None,
        reference_latency_ms=perf.reference_latency_ms if perf else None,
        speedup=perf.speedup_factor if perf else None,
        speedup_ci_low=perf.speedup_ci_low if perf else None,
        speedup_ci_high=perf.speedup_ci_high if perf else None,
        confidence=stats.confidence if stats and perf else None,
        summary=figures_text(ev),
        max_relative_error=ev.correctness.max_relative_error if ev.correctness else None,
        max_absolute_error=ev.correctness.max_absolute_error if ev.correctness else None,
        # Harness internals are not properties of the kernel; never hand them to an agent.
        hardware_counters=shown_counters(ev),
        flags=list(ev.flags),
        log=clip(ev.log, 2000) or "",
        solution_id=outcome.solution_id,
        profile_id=outcome.profile_id,
        measurements=pooled_count(outcome.pooled),
        pooled_summary=figures_text(outcome.pooled) if outcome.pooled is not None else None,
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
        profile_kernel, annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True)
    ),
]
