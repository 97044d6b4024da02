"""Optimization-job tools: start a whole AccelOpt run in the background and follow it. Jobs are
child processes with their state in the database, so they outlive the request (and the client)
that started them; the server resumes interrupted ones when it starts."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import anyio.to_thread
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp_types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field

from accelopt_mcp.backends.registry import backend_info
from accelopt_mcp.engine.config import resolve_optimize_config
from accelopt_mcp.engine.jobs import JobNotFinished, JobStatus, OptimizeRequest, ProgressEvent
from accelopt_mcp.engine.presets import PRESETS
from accelopt_mcp.mcp_tools import ids
from accelopt_mcp.mcp_tools.roots import KERNEL_SUFFIXES
from accelopt_mcp.mcp_tools.run_params import (
    confined_run_files,
    require_config_checked,
    with_run_params,
)
from accelopt_mcp.mcp_tools.state import ToolContext, state_of
from accelopt_mcp.mcp_tools.views import MAX_PAGE, SOURCE_CHARS, ClusterArg, TextSlice, View, cut
from accelopt_mcp.tasks.kernels import SOURCE_ORIGIN, kernel_solution, syntax_problem
from accelopt_mcp.tasks.loader import load_task
from accelopt_mcp.viewer.links import run_url

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True)
JobId = Annotated[
    str, Field(description="The id start_optimization returned (or its 8+ first characters).")
]
JOB_HINT = "list_jobs shows the jobs"


class JobView(View):
    """Where a job stands (the engine's JobStatus, its speedup labelled)."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="allow")

    job_id: str
    state: str
    definition_name: str
    iteration: int
    iterations_total: int
    initial_latency_ms: float | None = None
    best_latency_ms: float | None = None
    best_speedup_vs_initial: float | None = None
    """The run's initial kernel's latency / the best one's."""
    best_solution_id: str | None = None


def job_view(status: JobStatus) -> JobView:
    data = status.model_dump(mode="json")
    data["best_speedup_vs_initial"] = data.pop("best_speedup", None)
    return JobView.model_validate(data)


def _job_id(ctx: ToolContext, given: str) -> str:
    return ids.run_id(state_of(ctx).store(), given, hint=JOB_HINT, noun="job")


class JobStarted(View):
    job_id: str
    status: JobView
    next: str
    """What to call next."""


class JobList(View):
    jobs: list[JobView]
    """Newest first."""


class JobResultView(View):
    job_id: str
    status: JobView
    best_solution_id: str | None = None
    speedup_vs_initial: float | None = None
    """The initial kernel's latency / the best one's."""
    percent_of_peak: dict[str, float] | None = None
    """Percent of the hardware's peak, where the backend knows it (with, on cpu, the counters
    that say which peak: peak_cores, peak_matmul, peak_gflops, peak_gbytes_per_s)."""
    peak: str | None = None
    """The peak the percent is against: 'the 1-core fp32 matmul peak of 96.8 GFLOP/s'."""
    cost_usd: float = 0.0
    winning_kernel_path: str | None = None
    best_source: TextSlice | None = None
    """The best kernel's source (page with source_offset)."""
    iterations: list[dict[str, object]] = Field(default_factory=list)
    """Per-iteration summaries of the trace."""


@with_run_params(before="benchmark")
def start_optimization(
    ctx: ToolContext,
    task_path: Annotated[
        str, Field(description="Definition .json, NKIBench task .py or a folder with one.")
    ],
    kernel_path: Annotated[
        str | None, Field(description="Initial kernel: a kernel .py or a solution .json.")
    ] = None,
    kernel_source: Annotated[
        str | None, Field(description="Or the initial kernel's Python source.")
    ] = None,
    workload: Annotated[str | None, Field(description="Workload uuid or index.")] = None,
    preset: Annotated[
        str,
        Field(
            description=f"Run settings to start from: {', '.join(PRESETS)} (the AccelOpt "
            "paper's) or a JSON file; the fields below override it."
        ),
    ] = "quick",
    benchmark: Annotated[
        dict[str, Any] | None,
        Field(description="Profiling settings: seeds, iterations, timeout_seconds, ..."),
    ] = None,
    skip_llm_check: Annotated[
        bool,
        Field(
            description="Start without first checking that every role's LLM endpoint answers "
            "and serves its model (the check costs one model listing, or a one-token call)."
        ),
    ] = False,
    cluster: ClusterArg = None,
    *,
    given: Mapping[str, Any],
) -> JobStarted:
    """Start an AccelOpt optimization of a kernel as a background job and return its id at
    once: planner, executor and summarizer LLM calls in a beam search, every attempt
    profiled and stored. Follow it with wait_for_job (progress notifications) or
    job_status; job_result when it has finished; cancel_job to stop it."""
    # The job loads these itself, later: hand it the confined, resolved paths.
    roots = state_of(ctx).roots
    task_path = str(roots.file_or_dir(task_path, "task_path"))
    if kernel_path is not None:
        kernel_path = str(roots.file(kernel_path, "kernel_path", suffixes=KERNEL_SUFFIXES))
    overrides = dict(given)
    preset, overrides["models_config"] = confined_run_files(
        roots, preset, overrides.get("models_config")
    )
    config = resolve_optimize_config(
        preset,
        {
            **overrides,
            "benchmark": benchmark,
            "cluster": cluster,
        },
    )
    require_config_checked(preset, overrides["models_config"], config.models_config)
    request = OptimizeRequest(
        task_path=task_path,
        kernel_path=kernel_path,
        kernel_source=kernel_source,
        workload=workload,
        config=config,
        read_within=[str(root) for root in roots.paths],
    )
    _check_initial_kernel(request)
    jobs = state_of(ctx).jobs()
    job_id = jobs.start(request, check_llm=not skip_llm_check)
    return JobStarted(
        job_id=job_id,
        status=job_view(jobs.status(job_id)),
        next="wait_for_job to follow progress; job_result once it has finished",
    )


def _check_initial_kernel(request: OptimizeRequest) -> None:
    """Refuse, before a job is stored, an initial kernel that is not valid Python: the run
    would only stop on it (profile_kernel reports such a kernel as COMPILE_ERROR)."""
    task = load_task(
        Path(request.task_path).expanduser(), workload=request.workload, within=request.within()
    )
    solution = kernel_solution(
        task,
        kernel_path=request.kernel_path,
        kernel_source=request.kernel_source,
        target_hardware=list(backend_info(request.config.backend).target_hardware),
    )
    problem = syntax_problem(solution, request.kernel_path or SOURCE_ORIGIN)
    if problem is not None:
        raise ValueError(
            f"the initial kernel is not valid Python: {problem.splitlines()[0]}; fix it "
            "(profile_kernel shows the line) and start again"
        )


def job_status(ctx: ToolContext, job_id: JobId) -> JobView:
    """Where a job stands: state, iteration, attempts, best latency and speedup over the
    initial kernel so far, tokens and cost spent, elapsed time and an estimate of the time
    left."""
    state = state_of(ctx)
    view = job_view(state.jobs().status(_job_id(ctx, job_id)))
    # The run's page in `accelopt view`, when one serves this database (no token in it: it
    # opens in the browser that opened the viewer's own URL). An extra field, outside the
    # declared schema, so that tools/list stays within its budget.
    url = run_url(state.store(), view.job_id)
    if url is not None:
        view.viewer_url = url  # type: ignore[attr-defined]
    return view


def job_result(
    ctx: ToolContext,
    job_id: JobId,
    source_offset: Annotated[int, Field(ge=0)] = 0,
    source_limit: Annotated[int, Field(ge=1, le=60_000)] = SOURCE_CHARS,
) -> JobResultView:
    """The outcome of a job (finished or not): best kernel and its source, speedup over the
    initial kernel, percent of peak where known, cost, and per-iteration summaries."""
    job_id = _job_id(ctx, job_id)
    try:
        result = state_of(ctx).jobs().result(job_id)
    except JobNotFinished as exc:
        raise ToolError(f"{exc}; job_status shows where it stands") from exc
    return JobResultView(
        job_id=job_id,
        status=job_view(result.status),
        best_solution_id=result.best_solution_id,
        speedup_vs_initial=result.speedup,
        percent_of_peak=result.percent_of_peak,
        peak=result.peak,
        cost_usd=result.cost_usd,
        winning_kernel_path=(
            str(result.winning_kernel_path) if result.winning_kernel_path else None
        ),
        best_source=(
            cut(result.best_source, source_offset, source_limit) if result.best_source else None
        ),
        iterations=[
            item.model_dump(mode="json") if isinstance(item, BaseModel) else dict(item)
            for item in result.iterations
        ],
    )


def cancel_job(ctx: ToolContext, job_id: JobId) -> JobView:
    """Stop a running job; what it found so far stays in the database."""
    return job_view(state_of(ctx).jobs().cancel(_job_id(ctx, job_id)))


def list_jobs(ctx: ToolContext, limit: Annotated[int, Field(ge=1, le=MAX_PAGE)] = 20) -> JobList:
    """The newest optimization jobs and where each stands."""
    return JobList(jobs=[job_view(j) for j in state_of(ctx).jobs().list(limit=limit)])


async def wait_for_job(
    ctx: ToolContext,
    job_id: JobId,
    timeout_s: Annotated[
        float,
        Field(gt=0, le=3600, description="Stop waiting after this long (the job goes on)."),
    ] = 240.0,
) -> JobView:
    """Wait until a job finishes or timeout_s passes, sending progress notifications
    (iteration, best latency) meanwhile; returns its status. Call it again to keep
    waiting: the job runs on whether or not anyone waits."""

    async def forward(event: ProgressEvent) -> None:
        best = f", best {event.best_latency_ms:.4g} ms" if event.best_latency_ms is not None else ""
        text = f"iteration {event.iteration}: {event.message}{best}"
        await ctx.report_progress(event.progress, 1.0, text)

    job_id = await anyio.to_thread.run_sync(_job_id, ctx, job_id)
    jobs = await anyio.to_thread.run_sync(state_of(ctx).jobs)
    return job_view(await jobs.wait(job_id, on_progress=forward, timeout_s=timeout_s))


TOOLS = [
    Tool.from_function(
        start_optimization,
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False),
    ),
    Tool.from_function(job_status, annotations=READ_ONLY),
    Tool.from_function(job_result, annotations=READ_ONLY),
    Tool.from_function(
        cancel_job, annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True)
    ),
    Tool.from_function(list_jobs, annotations=READ_ONLY),
    Tool.from_function(wait_for_job, annotations=READ_ONLY),
]
