"""Optimization runs as background jobs: the API the MCP server's optimization tools sit on.

Each job runs in a child process of its own (`python -m accelopt_mcp.engine.worker RUN_ID`,
started in a new session), so it outlives the request that started it and a crash of the job
cannot take the server down. All state lives in the store (the run row and its checkpoint);
progress events are appended by the worker to <output_dir>/<run>/events.jsonl.

Exactly one process holds a run at a time, across servers and hosts (engine/claim.py): the
manager holds the runs it has queued under a lease it renews, and hands each to the worker it
starts. A run whose holder is gone is "interrupted"; `resume_interrupted()` (at start, and
every half lease while the manager runs) takes over the ones this server can serve: jobs, not
runs a user drives with `accelopt optimize` in a terminal, whose backend runs here and whose
LLM settings resolve here. The others are listed with the command that resumes them.

Over ~600 lines for one reason: `JobManager` is one lifecycle (queue, lease, worker process,
progress, cancel, resume) whose states share one lock and one table of jobs.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import get_args

from pydantic import BaseModel, Field, model_validator

from accelopt_mcp.backends.cluster import cluster_address
from accelopt_mcp.backends.placement import require_backend_where
from accelopt_mcp.backends.registry import backend_info
from accelopt_mcp.backends.roofline import PEAK_NAME_COUNTERS, peak_against
from accelopt_mcp.engine.checkpoint import Checkpoint, IterationSummary, RunSpec
from accelopt_mcp.engine.claim import lease_seconds
from accelopt_mcp.engine.config import OptimizeConfig
from accelopt_mcp.engine.runs import (
    RunNotFound,
    RunState,
    default_output_dir,
    load_run,
    local_worker_gone,
    local_worker_pid,
    prepare_run,
    result_text,
    run_progress,
    run_state,
    speedup,
    worker_alive,
    worker_id_of,
)
from accelopt_mcp.engine.worker import STORE_OUTAGE_EXIT, events_path, last_event
from accelopt_mcp.llm import LlmConfigError, load_role_configs
from accelopt_mcp.llm.key_destinations import require_trusted_destinations
from accelopt_mcp.llm.preflight import check_endpoints_now, roles_used
from accelopt_mcp.redaction import redact
from accelopt_mcp.store import STORE_ENV, open_store
from accelopt_mcp.store.base import LeaseLostError, RunRecord, RunStatus, RunUpdate, StoreError
from accelopt_mcp.tasks.kernels import kernel_solution
from accelopt_mcp.tasks.loader import load_task

log = logging.getLogger(__name__)

FINAL_STATES: frozenset[str] = frozenset(get_args(RunStatus)) - {"pending", "running"}
"""The stored run statuses a job ends in (every one but those of a run still to go)."""
_POLL_S = 0.25
_OUTAGE_RETRY_S = 5.0


class JobNotFound(KeyError):
    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "job not found"


class JobNotFinished(RuntimeError):
    """The job has no result yet."""


class OptimizeRequest(BaseModel):
    """Everything a job needs: what to optimize (a kernel, given by path or as source text, and a
    task) and how (one OptimizeConfig, from `resolve_optimize_config`). JSON-serialisable."""

    kernel_path: str | None = None
    """A kernel .py or solution .json."""
    kernel_source: str | None = None
    """Or the kernel's Python source."""
    task_path: str
    """A definition .json, an NKIBench task .py or a folder holding one."""
    workload: str | None = None
    """A workload uuid or index; default the first."""
    config: OptimizeConfig = Field(default_factory=OptimizeConfig)
    read_within: list[str] | None = None
    """Folders (resolved) the task may read from: the MCP server's roots, so that a definition's
    trace set is never looked for above them. None: anywhere (the CLI)."""
    suite_case: str | None = None
    """'SUITE_ID/CASE' when the job is one case of a suite (accelopt_mcp/suites): kept with
    the run, so that a suite resumed after a crash finds the run it had started."""

    def within(self) -> Callable[[Path], bool] | None:
        """`read_within` as a test of a resolved path, for load_task."""
        if self.read_within is None:
            return None
        roots = [Path(root) for root in self.read_within]
        return lambda path: any(path == root or path.is_relative_to(root) for root in roots)

    @model_validator(mode="after")
    def _one_kernel(self) -> OptimizeRequest:
        if (self.kernel_path is None) == (self.kernel_source is None):
            raise ValueError(
                "give exactly one of kernel_path (a kernel .py or solution .json) and "
                "kernel_source (the kernel's Python source)"
            )
        return self


class JobStatus(BaseModel):
    job_id: str
    state: RunState
    definition_name: str
    iteration: int
    iterations_total: int
    attempts_done: int
    attempts_passed: int
    attempts_failed: int
    attempts_flagged: int = 0
    """Attempts that passed with a result flagged untrusted (e.g. above_peak): stored, never
    the best; counted in attempts_passed too."""
    initial_latency_ms: float | None
    best_latency_ms: float | None
    best_speedup: float | None
    best_solution_id: str | None
    tokens_in: int
    tokens_out: int
    cost_usd: float
    elapsed_s: float
    eta_s: float | None
    error: str | None
    progress: float = 0.0
    outcome: str | None = None
    """Once the job has ended: what it found, in one line ("best 0.41 ms (1.52x over the
    initial kernel, ...)", or "but no attempt passed: the initial kernel ... is still the
    best (18 kernels failed: ...)"); None while it runs."""
    resume_hint: str | None = None
    """For an interrupted job: why this server does not resume it by itself, and the command
    that does (or that it will once its lease ends / the database is back)."""
    worker_id: str | None = None
    """The worker holding the job (host|pid|start token), or the server holding it queued
    (...|queue); None when nobody does."""
    activity: str | None = None
    """While it runs, as of its last event: what it waits on and how many profiling devices
    are in use ("profiling 3 attempts on 3/8 devices")."""
    devices: str | None = None
    """Where it profiles: "2 device(s) on this host", "8 CPU on the Ray cluster at ..."."""


class JobResult(BaseModel):
    status: JobStatus
    best_solution_id: str | None
    """The run's best: its fastest correct kernel whose result no untrusted flag marks (the
    engine never takes a flagged attempt as best)."""
    best_source: str | None
    speedup: float | None
    percent_of_peak: dict[str, float] | None
    peak: str | None = None
    """The peak the percent is against, where the backend names it (roofline.peak_against:
    'the 1-core fp32 matmul peak of 96.8 GFLOP/s')."""
    cost_usd: float
    iterations: list[IterationSummary]
    winning_kernel_path: str | None


class ProgressEvent(BaseModel):
    job_id: str
    kind: str
    iteration: int
    message: str
    best_latency_ms: float | None
    progress: float
    attempts_done: int = 0
    cost_usd: float = 0.0


ProgressCallback = Callable[[ProgressEvent], Awaitable[None]]


class JobManager:
    def __init__(
        self,
        store_url: str | None = None,
        *,
        output_dir: Path | None = None,
        max_parallel_jobs: int = 1,
        auto_resume: bool = False,
        client_configs: bool = False,
    ) -> None:
        """auto_resume: every half lease, take over interrupted runs this server can serve
        (resume_interrupted); the MCP server turns it on. client_configs: the runs' model
        configs were named by MCP clients, not by this process's user, so a run is taken over
        only when its config sends this host's keys where the operator's own configs do
        (llm/key_destinations.py); the MCP server turns it on too."""
        if max_parallel_jobs < 1:
            raise ValueError(f"max_parallel_jobs must be at least 1, got {max_parallel_jobs}")
        self.store_url = store_url or os.environ.get(STORE_ENV)
        self.store = open_store(self.store_url)
        self.output_dir = Path(output_dir) if output_dir else default_output_dir()
        self.max_parallel_jobs = max_parallel_jobs
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._queue: deque[str] = deque()
        self._lock = threading.RLock()
        self._closed = threading.Event()
        self.auto_resume = auto_resume
        self.client_configs = client_configs
        self.lease_s = lease_seconds()
        # The id this manager holds its queued runs under until their worker takes them.
        self.holder_id = worker_id_of(os.getpid(), queue=True)
        self._left: dict[str, str] = {}
        """Interrupted runs this manager does not resume, and why (with the command)."""
        self._outages: dict[str, str] = {}
        """Runs whose worker stopped because the database was unreachable: resumed once it
        answers again."""
        self._last_scan = time.monotonic()
        self._last_outage_try = time.monotonic()
        self._last_renewal = time.monotonic()
        self._pumper = threading.Thread(target=self._pump_forever, daemon=True, name="jobs-pump")
        self._pumper.start()

    # ------------------------------------------------------------------ API

    def start(self, request: OptimizeRequest, *, check_llm: bool = True) -> str:
        """Store the run and queue its worker; returns the job (= run) id at once. Refused
        first, with no run stored, when the backend cannot run here (BackendUnavailable) or,
        with check_llm, when a role's LLM endpoint cannot serve it (PreflightFailed): the
        worker runs with this process's environment, so what fails here would fail there."""
        # Where it profiles is fixed now (the server's ACCELOPT_RAY_ADDRESS resolved), so that
        # whoever resumes it, with whatever environment, profiles there too.
        where = cluster_address(request.config.cluster) or "local"
        request = request.model_copy(
            update={"config": request.config.model_copy(update={"cluster": where})}
        )
        require_backend_where(request.config.backend, where)
        if check_llm:
            config_path = request.config.models_config
            check_endpoints_now(
                load_role_configs(Path(config_path) if config_path else None),
                roles_used(request.config.summarize),
            )
        task = load_task(
            Path(request.task_path), workload=request.workload, within=request.within()
        )
        solution = kernel_solution(
            task,
            kernel_path=request.kernel_path,
            kernel_source=request.kernel_source,
            target_hardware=list(backend_info(request.config.backend).target_hardware),
        )
        run_id = prepare_run(
            self.store,
            task,
            solution,
            request.config,
            request={
                **request.model_dump(mode="json", exclude={"config"}),
                "origin": "job",
            },
        )
        if not self._hold_and_queue(run_id, ("pending",), steal_from=None):
            raise RuntimeError(f"job {run_id} was taken by another process as soon as stored")
        self._pump()
        return run_id

    def status(self, job_id: str) -> JobStatus:
        try:
            run, spec, checkpoint = load_run(self.store, job_id)
        except RunNotFound as exc:
            raise JobNotFound(
                f"no job {job_id!r}; list jobs with list_jobs or `accelopt runs list`"
            ) from exc
        return self._status(run, spec, checkpoint)

    def result(self, job_id: str) -> JobResult:
        status = self.status(job_id)
        if status.state not in FINAL_STATES:
            hint = (
                "resume it with `accelopt resume RUN` (or restart the server)"
                if status.state == "interrupted"
                else "wait for it (wait_for_job) or poll job_status"
            )
            raise JobNotFinished(f"job {job_id} is {status.state}; {hint}")
        _, _, checkpoint = load_run(self.store, job_id)
        best_source = None
        percent: dict[str, float] | None = None
        if status.best_solution_id:
            stored = self.store.get_solution(status.best_solution_id)
            best_source = stored.solution.entry_source.content if stored else None
            percent = self._percent_of_peak(status.best_solution_id) or None
        return JobResult(
            status=status,
            best_solution_id=status.best_solution_id,
            best_source=best_source,
            speedup=status.best_speedup,
            percent_of_peak=percent,
            peak=peak_against(percent) if percent else None,
            cost_usd=status.cost_usd,
            iterations=checkpoint.history,
            winning_kernel_path=checkpoint.winning_kernel_path,
        )

    def cancel(self, job_id: str) -> JobStatus:
        status = self.status(job_id)
        if status.state in FINAL_STATES:
            return status
        with self._lock:
            if job_id in self._queue:
                self._queue.remove(job_id)
            child = self._children.get(job_id)
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        else:
            run, _, checkpoint = load_run(self.store, job_id)
            pid = local_worker_pid(run.worker_id)
            if pid is None and run.worker_id is None and worker_alive(checkpoint):
                pid = checkpoint.worker_pid  # a run from before leases
            if pid is not None and not local_worker_gone(run.worker_id):
                # A worker of this host: it stops cleanly on SIGTERM and records the status.
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
                self._wait_final(job_id, 30)
        if self.status(job_id).state not in FINAL_STATES:
            # Nobody here to ask (queued, or held on another host): the status is written
            # directly, and a remote holder stops at its next lease renewal, writing nothing.
            # Fenced by the holder seen, so a run that finished meanwhile stays as it ended.
            seen = self.store.get_run(job_id)
            with contextlib.suppress(LeaseLostError):
                self.store.update_run(
                    job_id,
                    RunUpdate(status="cancelled", error="cancelled on request"),
                    holder=seen.worker_id if seen is not None else None,
                )
        return self.status(job_id)

    def list(self, limit: int = 50) -> list[JobStatus]:
        found = []
        for run in self.store.list_runs(limit=limit):
            try:
                _, spec, checkpoint = load_run(self.store, run.id)
            except ValueError:
                continue  # a run not made by the engine
            found.append(self._status(run, spec, checkpoint))
        return found

    def resume_interrupted(self) -> builtins.list[str]:
        """Take over every interrupted run (left running or pending by a process that is gone)
        that this server can serve, and queue it; returns their ids. The others are left for
        whoever can (see `left_alone()`): runs started with `accelopt optimize`, and runs whose
        backend or LLM settings this server lacks."""
        resumed = []
        for state in ("running", "pending"):
            for run in self.store.list_runs(status=state, limit=10_000):
                if self._take_over(run):
                    resumed.append(run.id)
        self._pump()
        return resumed

    def resume_if_interrupted(self, job_id: str) -> bool:
        """Take over this one run if it is interrupted and this server can serve it (as
        resume_interrupted does for all); True when it was queued."""
        run = self.store.get_run(job_id)
        taken = run is not None and self._take_over(run)
        self._pump()
        return taken

    def _take_over(self, run: RunRecord) -> bool:
        with self._lock:
            if run.id in self._queue or run.id in self._children:
                return False
        try:
            status = self.status(run.id)
            _, spec, _ = load_run(self.store, run.id)
        except ValueError:
            return False  # not a run made by the engine
        if status.state != "interrupted":
            return False
        reason = why_not_here(run.id, spec, check_key_destinations=self.client_configs)
        if reason is not None:
            if self._left.get(run.id) != reason:
                log.info("interrupted run %s left alone: %s", run.id, reason)
            self._left[run.id] = reason
            return False
        dead = run.worker_id if local_worker_gone(run.worker_id) else None
        if self._hold_and_queue(run.id, ("pending", "running"), steal_from=dead):
            self._left.pop(run.id, None)
            return True
        return False

    def left_alone(self) -> dict[str, str]:
        """Interrupted runs the last resume_interrupted() did not take, and why (with the
        command that resumes them)."""
        return dict(self._left)

    async def wait(
        self,
        job_id: str,
        *,
        on_progress: ProgressCallback | None = None,
        timeout_s: float | None = None,
    ) -> JobStatus:
        """Until the job ends (or timeout_s passes), forwarding its progress events."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        path = events_path(self.output_dir, job_id)
        offset = 0
        while True:
            status = await asyncio.to_thread(self.status, job_id)
            if on_progress is not None:
                offset = await self._forward(path, offset, job_id, on_progress)
            if status.state in FINAL_STATES or status.state == "interrupted":
                return status
            if deadline is not None and time.monotonic() >= deadline:
                return status
            await asyncio.sleep(_POLL_S)

    def close(self) -> None:
        """Stop managing; running jobs go on in their own processes. Runs still queued are
        released, so another server takes them at once rather than after the lease."""
        self._closed.set()
        self._pumper.join(timeout=5)
        with self._lock:
            queued, self._queue = list(self._queue), deque()
        for run_id in queued:
            with contextlib.suppress(StoreError):
                self.store.release_run(run_id, self.holder_id)
        self.store.close()

    def __enter__(self) -> JobManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _status(self, run: RunRecord, spec: RunSpec, checkpoint: Checkpoint) -> JobStatus:
        with self._lock:
            child = self._children.get(run.id)
            queued = run.id in self._queue
        ours_alive = child is not None and child.poll() is None
        state = run_state(run, checkpoint, ours_alive=ours_alive or queued, queued=queued)
        hint = None
        if state == "interrupted":
            hint = self._outages.get(run.id) or self._left.get(run.id)
            if hint is None:
                hint = (
                    f"resume it with `accelopt resume {run.id}`, or restart an MCP server on "
                    "this database"
                )
        running = state == "running"
        progress = run_progress(spec, checkpoint, running=running)
        eta = None
        if running and 0 < progress.progress < 1:
            eta = progress.elapsed_s * (1 - progress.progress) / progress.progress
        return JobStatus(
            job_id=run.id,
            state=state,
            definition_name=run.definition_name,
            iteration=run.current_iteration,
            iterations_total=spec.optimize.iterations,
            attempts_done=progress.attempts_done,
            attempts_passed=progress.attempts_passed,
            attempts_failed=progress.attempts_failed,
            attempts_flagged=sum(
                1 for s in checkpoint.slots.values() if s.passed and not s.trusted
            ),
            initial_latency_ms=progress.initial_latency_ms,
            best_latency_ms=run.best_latency_ms,
            best_speedup=speedup(progress.initial_latency_ms, run.best_latency_ms),
            best_solution_id=run.best_solution_id,
            tokens_in=run.tokens_in,
            tokens_out=run.tokens_out,
            cost_usd=run.cost_usd,
            elapsed_s=progress.elapsed_s,
            eta_s=eta,
            # Stores keep errors redacted; a run's row from before they did is masked here.
            error=redact(run.error) if run.error else None,
            outcome=result_text(run, checkpoint) if state in FINAL_STATES else None,
            progress=1.0 if state == "completed" else progress.progress,
            resume_hint=hint,
            worker_id=run.worker_id if state in ("pending", "running") else None,
            **self._activity(run.id, running),
        )

    def _activity(self, run_id: str, running: bool) -> dict[str, str | None]:
        event = last_event(events_path(self.output_dir, run_id))
        if event is None:
            return {}
        return {
            "activity": event.activity.describe() if running else None,
            "devices": event.devices_where or None,
        }

    def _percent_of_peak(self, solution_id: str) -> dict[str, float]:
        for profile in self.store.list_profiles(solution_id=solution_id):
            counters = profile.evaluation.hardware_counters
            found = {
                k: v
                for k, v in counters.items()
                if "of_peak" in k
                or "percent" in k
                or k in PEAK_NAME_COUNTERS
                or k == "memory_bound"
            }
            if found:
                return found
        return {}

    def _pump_forever(self) -> None:
        while not self._closed.wait(1.0):
            try:
                self._pump()
                self._keep_holds()
                self._retry_outages()
                if self.auto_resume and time.monotonic() - self._last_scan >= self.lease_s / 2:
                    self._last_scan = time.monotonic()
                    self.resume_interrupted()
            except Exception as exc:  # the pump must survive a store hiccup
                log.debug("job pump: %s", exc)
                continue

    def _hold_and_queue(
        self, run_id: str, statuses: tuple[str, ...], *, steal_from: str | None
    ) -> bool:
        """Claim the run for this manager (held queued until its worker takes it) and queue
        it; False, queuing nothing, when another process got it first or it is queued or
        running here already."""
        with self._lock:
            if run_id in self._queue or run_id in self._children:
                return False
        held = self.store.claim_run(
            run_id, self.holder_id, lease_s=self.lease_s, statuses=statuses, steal_from=steal_from
        )
        if held is None:
            return False
        with self._lock:
            if run_id in self._queue or run_id in self._children:
                return False
            self._queue.append(run_id)
            self._outages.pop(run_id, None)
        return True

    def _retry_outages(self) -> None:
        """Every few seconds, queue again the runs whose worker stopped for a database outage,
        once the database answers (a failing read just waits for the next round)."""
        if not self._outages or time.monotonic() - self._last_outage_try < _OUTAGE_RETRY_S:
            return
        self._last_outage_try = time.monotonic()
        for run_id in list(self._outages):
            try:
                run = self.store.get_run(run_id)
                if run is None or run.status not in ("pending", "running"):
                    self._outages.pop(run_id, None)
                    continue
                dead = run.worker_id if local_worker_gone(run.worker_id) else None
                if self._hold_and_queue(run_id, ("pending", "running"), steal_from=dead):
                    log.info("run %s: the database answers again; resuming it", run_id)
                else:
                    self._outages.pop(run_id, None)  # another process has it now
            except StoreError as exc:
                log.info("run %s: the database is still unreachable (%s)", run_id, exc)
                return

    def _keep_holds(self) -> None:
        """Renew the leases of the runs queued here; drop one that was cancelled or taken
        elsewhere meanwhile."""
        if time.monotonic() - self._last_renewal < self.lease_s / 4:
            return
        self._last_renewal = time.monotonic()
        with self._lock:
            queued = list(self._queue)
        for run_id in queued:
            if not self.store.renew_run_lease(run_id, self.holder_id, lease_s=self.lease_s):
                log.info("queued run %s was ended or taken elsewhere; not starting it", run_id)
                with self._lock, contextlib.suppress(ValueError):
                    self._queue.remove(run_id)

    def _pump(self) -> None:
        """Reap finished workers and start queued ones while there is room."""
        with self._lock:
            for run_id, child in list(self._children.items()):
                code = child.poll()
                if code is None:
                    continue
                del self._children[run_id]
                if code == STORE_OUTAGE_EXIT:
                    self._outages[run_id] = (
                        "its worker stopped because the database did not answer; this server "
                        f"resumes it when the database is back (or `accelopt resume {run_id}`)"
                    )
            while self._queue and len(self._children) < self.max_parallel_jobs:
                run_id = self._queue.popleft()
                self._outages.pop(run_id, None)
                self._children[run_id] = self._spawn(run_id)

    def _spawn(self, run_id: str) -> subprocess.Popen[bytes]:
        folder = self.output_dir / run_id
        # The worker's log, its events and the kernels it writes (LLM prompts' results, error
        # text) are kept from other users, as the database is, wherever --jobs-dir points.
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        env = dict(os.environ)
        if self.store_url:
            env[STORE_ENV] = self.store_url
        with (folder / "worker.log").open("ab") as log:
            return subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "accelopt_mcp.engine.worker",
                    run_id,
                    "--output-dir",
                    str(self.output_dir),
                    "--handed-over-by",
                    self.holder_id,
                    # Checked at start and take-over on the file; the worker checks again what
                    # it reads from it (the file could change in between).
                    *(["--check-key-destinations"] if self.client_configs else []),
                ],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )

    def _wait_final(self, job_id: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.status(job_id).state in FINAL_STATES:
                return
            time.sleep(_POLL_S)

    async def _forward(
        self, path: Path, offset: int, job_id: str, on_progress: ProgressCallback
    ) -> int:
        if not path.exists():
            return offset
        with path.open("rb") as handle:
            handle.seek(offset)
            chunk = handle.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        for line in complete.splitlines():
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue
            await on_progress(
                ProgressEvent(
                    job_id=job_id,
                    kind=data.get("kind", ""),
                    iteration=data.get("iteration", 0),
                    message=data.get("message", ""),
                    best_latency_ms=data.get("best_latency_ms"),
                    progress=data.get("progress", 0.0),
                    attempts_done=data.get("attempts_done", 0),
                    cost_usd=data.get("cost_usd", 0.0),
                )
            )
        return offset + len(complete)


def why_not_here(run_id: str, spec: RunSpec, *, check_key_destinations: bool = False) -> str | None:
    """Why this server should not take over an interrupted run (with the command that
    resumes it), or None when it can: a job whose backend runs here and whose LLM settings
    resolve in this environment (and, with check_key_destinations, send this host's keys
    only where its operator's configs do)."""
    command = f"`accelopt resume {run_id}`"
    request = spec.request
    # Runs from before `origin`: a job's request lists kernel_source, the CLI's does not.
    origin = request.get("origin") or ("job" if "kernel_source" in request else "cli")
    if origin != "job":
        return (
            f"started with `accelopt optimize`, so it is resumed where its user runs it: "
            f"{command} (in an environment with its LLM settings)"
        )
    cfg = spec.optimize
    try:
        require_backend_where(cfg.backend, cfg.cluster)
    except Exception as exc:
        return f"its backend cannot run from this server ({exc}); resume it where it can: {command}"
    try:
        configs = load_role_configs(Path(cfg.models_config) if cfg.models_config else None)
        # A job's config was a client's choice, checked where it started (another server of
        # the team, or a version without the check) and read here from a path that may be a
        # client's file now: it sends this server's keys only where this server's operator
        # does (llm/key_destinations.py), checked again before it is taken over.
        if check_key_destinations:
            require_trusted_destinations(configs, f"model config {cfg.models_config}")
        for role in roles_used(cfg.summarize):
            config = configs.for_role(role)
            if not config.is_local() and not os.environ.get(config.api_key_env):
                return (
                    f"the {role}'s key variable {config.api_key_env} is not set in this "
                    f"server's environment; set it and restart the server, or run {command}"
                )
    except (LlmConfigError, OSError, ValueError) as exc:
        return f"its LLM settings do not resolve here ({exc}); fix them, or run {command}"
    return None
