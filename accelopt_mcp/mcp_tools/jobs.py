"""Optimization-job tools: start a whole AccelOpt run in the background and follow it. Jobs are
child processes with their state in the database, so they outlive the request (and the client)
that started them; the server resumes interrupted ones when it starts."""

from __future__ import annotations

import inspect
from typing import Annotated

from mcp.server.mcpserver import Context
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field

from accelopt_mcp.engine.jobs import JobStatus, OptimizeRequest, ProgressEvent
from accelopt_mcp.mcp_tools.app import AccelOptServer
from accelopt_mcp.mcp_tools.state import ServerState
from accelopt_mcp.mcp_tools.views import MAX_PAGE, SOURCE_CHARS, TextSlice, cut

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True)
JobId = Annotated[str, Field(description="The id start_optimization returned.")]
TERMINAL_STATES = frozenset({"completed", "failed", "cancelled", "budget_exhausted"})


class JobStarted(BaseModel):
    job_id: str
    status: JobStatus
    next: str = Field(description="What to call next.")


class JobList(BaseModel):
    jobs: list[JobStatus] = Field(description="Newest first.")


class JobResultView(BaseModel):
    job_id: str
    status: JobStatus
    best_solution_id: str | None = None
    speedup: float | None = Field(default=None, description="Initial latency / best latency.")
    percent_of_peak: float | None = Field(
        default=None, description="Where the backend knows the hardware's peak."
    )
    cost_usd: float = 0.0
    winning_kernel_path: str | None = None
    best_source: TextSlice | None = Field(
        default=None, description="The best kernel's source (page with source_offset)."
    )
    iterations: list[dict[str, object]] = Field(
        default_factory=list, description="Per-iteration summaries of the trace."
    )


def register(server: AccelOptServer, state: ServerState) -> None:
    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
    def start_optimization(request: OptimizeRequest) -> JobStarted:
        """Start an AccelOpt optimization of a kernel as a background job and return its id at
        once. Give the kernel (kernel_path or kernel_source), the task (task_path), the backend
        and the search settings (iterations, beam, plans, attempts, ...) and a budget. Then
        follow it with wait_for_job (progress notifications) or job_status."""
        jobs = state.jobs()
        job_id = jobs.start(request)
        return JobStarted(
            job_id=job_id,
            status=jobs.status(job_id),
            next="wait_for_job to follow progress; job_result once it has finished",
        )

    @server.tool(annotations=READ_ONLY)
    def job_status(job_id: JobId) -> JobStatus:
        """Where a job stands: state, iteration, attempts, best latency and speedup so far,
        tokens and cost spent, elapsed time and an estimate of the time left."""
        return state.jobs().status(job_id)

    @server.tool(annotations=READ_ONLY)
    def job_result(
        job_id: JobId,
        source_offset: Annotated[int, Field(ge=0)] = 0,
        source_limit: Annotated[int, Field(ge=1, le=60_000)] = SOURCE_CHARS,
    ) -> JobResultView:
        """The outcome of a job (finished or not): best kernel and its source, speedup over the
        initial kernel, percent of peak where known, cost, and per-iteration summaries."""
        result = state.jobs().result(job_id)
        return JobResultView(
            job_id=job_id,
            status=result.status,
            best_solution_id=result.best_solution_id,
            speedup=result.speedup,
            percent_of_peak=result.percent_of_peak,
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

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
    def cancel_job(job_id: JobId) -> JobStatus:
        """Stop a running job; what it found so far stays in the database."""
        return state.jobs().cancel(job_id)

    @server.tool(annotations=READ_ONLY)
    def list_jobs(limit: Annotated[int, Field(ge=1, le=MAX_PAGE)] = 20) -> JobList:
        """The newest optimization jobs and where each stands."""
        return JobList(jobs=state.jobs().list(limit=limit))

    @server.tool(annotations=READ_ONLY)
    async def wait_for_job(
        job_id: JobId,
        ctx: Context,
        timeout_s: Annotated[
            float,
            Field(gt=0, le=3600, description="Stop waiting after this long (the job goes on)."),
        ] = 240.0,
    ) -> JobStatus:
        """Wait until a job finishes or timeout_s passes, sending progress notifications
        (iteration, best latency) meanwhile; returns its status. Call it again to keep
        waiting: the job runs on whether or not anyone waits."""

        async def forward(event: ProgressEvent) -> None:
            best = (
                f", best {event.best_latency_ms:.4g} ms"
                if event.best_latency_ms is not None
                else ""
            )
            text = f"iteration {event.iteration}: {event.message}{best}"
            await ctx.report_progress(event.progress, 1.0, text)

        def on_progress(event: ProgressEvent) -> object:
            return forward(event)

        status = await state.jobs().wait(job_id, on_progress=on_progress, timeout_s=timeout_s)
        if inspect.isawaitable(status):  # pragma: no cover - defensive
            status = await status
        return status
