"""The AccelOpt loop: plan -> implement -> profile -> select -> summarize -> next beam.

Every (beam kernel, plan sample) is one chain: a planner call, then K executor calls in
parallel; each executor attempt goes to the device pool the moment it arrives, so LLM time and
profiling time overlap (AccelOpt waits for all attempts first). LLM concurrency is bounded by the
client's per-role limits, profiling by the pool's device count.

Everything is written as it happens and the checkpoint (in runs.config) after every finished
attempt, so `resume` after a crash redoes only what never finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import random
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from accelopt_mcp.backends.pool import DevicePool
from accelopt_mcp.backends.registry import backend_factory, get_backend
from accelopt_mcp.engine.checkpoint import (
    FINAL_SLOT_STATES,
    Checkpoint,
    IterationSummary,
    RunSpec,
    run_config,
)
from accelopt_mcp.engine.events import EngineEvent, EventSink
from accelopt_mcp.engine.executor import derived_solution, implement_plan
from accelopt_mcp.engine.memory import OptimizationMemory
from accelopt_mcp.engine.planner import propose_plan
from accelopt_mcp.engine.prompts import (
    executor_messages,
    family_for,
    planner_messages,
    summarizer_messages,
)
from accelopt_mcp.engine.runs import load_run, process_start_token, run_progress, worker_alive
from accelopt_mcp.engine.selection import (
    LLM_FAILED,
    NO_CODE,
    AttemptRecord,
    BeamEntry,
    Pair,
    next_beam,
    select_pairs,
    slot_key,
)
from accelopt_mcp.engine.summarizer import NothingChanged, summarize_pair
from accelopt_mcp.hashing import benchmark_config_hash, solution_hash
from accelopt_mcp.llm import (
    Budget,
    BudgetExceeded,
    LlmCallFailed,
    LlmClient,
    MalformedReply,
    RoleConfigs,
    load_role_configs,
)
from accelopt_mcp.models import BenchmarkConfig, Evaluation, LlmCallIn, Solution, SourceFile
from accelopt_mcp.store.base import ConflictError, ExperienceIn, KernelStore, RunRecord, RunUpdate

log = logging.getLogger(__name__)
T = TypeVar("T")


class InitialKernelFailed(RuntimeError):
    """The starting kernel does not pass its own task; there is nothing to optimize from."""


class RunNotRunnable(RuntimeError):
    """This process must leave the run alone; nothing was written to it."""


class RunBusy(RunNotRunnable):
    """Another live process is already running this run; this one leaves it alone."""


def make_pool(backend: str, workers: int | None) -> DevicePool:
    if backend == "cpu":
        return DevicePool.for_cpu(workers)
    if backend == "nki":
        return DevicePool.for_neuron_cores(range(workers or 1))
    return DevicePool.for_gpus(range(workers or 1))


class BeamSearch:
    """Runs (or resumes) one stored run to its end. Use one instance per run and event loop."""

    spec: RunSpec
    cp: Checkpoint

    def __init__(
        self,
        store: KernelStore,
        run_id: str,
        *,
        on_event: EventSink | None = None,
        output_dir: Path | None = None,
        pool: DevicePool | None = None,
        role_configs: RoleConfigs | None = None,
        statuses: frozenset[str] | None = None,
    ) -> None:
        """statuses: run only a run in one of these states (checked under the run's lock), else
        raise RunNotRunnable; None: any run not yet completed."""
        self.store = store
        self.run_id = run_id
        self.on_event = on_event
        self.output_dir = output_dir
        self._given_pool = pool
        self._role_configs = role_configs
        self._statuses = statuses
        self._stop: tuple[str, str] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._save_lock = asyncio.Lock()
        self._inflight: dict[str, asyncio.Future[Evaluation]] = {}
        self._solutions: dict[str, Solution] = {}
        self._best: BeamEntry | None = None

    # ------------------------------------------------------------------ control

    def request_stop(self, status: str = "cancelled", reason: str = "cancelled on request") -> None:
        """Stop soon: work in flight is abandoned, everything stored so far stays."""
        if self._stop is None:
            self._stop = (status, reason)
        for task in list(self._tasks):
            task.cancel()

    async def run_with_signals(self) -> RunRecord:
        """run(), with SIGTERM asking for a clean stop (main thread only)."""
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(signal.SIGTERM, self.request_stop)
        except (NotImplementedError, RuntimeError, ValueError):
            return await self.run()
        try:
            return await self.run()
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    def _budget_stop(self, exc: BudgetExceeded) -> None:
        if self._stop is None:
            log.info("run %s: %s", self.run_id, exc.reason)
            self._stop = ("budget_exhausted", exc.reason)

    # ------------------------------------------------------------------ the run

    async def run(self) -> RunRecord:
        await self._db(load_run, self.store, self.run_id)  # a stored run, before its folder
        with self._claim():
            return await self._run()

    @contextlib.contextmanager
    def _claim(self) -> Any:
        """Hold an exclusive lock on <output_dir>/<run>/worker.lock for the whole run, so two
        processes (e.g. two job managers resuming the same interrupted run) never run it at once.
        Raises RunBusy, touching nothing, when another process holds it."""
        if self.output_dir is None:
            yield
            return
        folder = Path(self.output_dir) / self.run_id
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / "worker.lock").open("a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RunBusy(
                    f"run {self.run_id} is already being run by another process "
                    f"(it holds {folder / 'worker.lock'}); wait for it or cancel it"
                ) from None
            yield

    async def _run(self) -> RunRecord:
        run, self.spec, self.cp = await self._db(load_run, self.store, self.run_id)
        if self._statuses is not None and run.status not in self._statuses:
            raise RunNotRunnable(
                f"run {self.run_id} is {run.status}, not {' or '.join(sorted(self._statuses))}"
            )
        if run.status == "completed":
            return run
        if run.status == "running" and self.cp.worker_pid != os.getpid() and worker_alive(self.cp):
            # Its worker wrote elsewhere (another output dir or host) but is still at work.
            # (A pending run's recorded worker, if any, finished it before it was reopened.)
            raise RunBusy(
                f"run {self.run_id} is still being run by process {self.cp.worker_pid} "
                f"({(self.cp.worker_host or '').partition('|')[0]}); wait for it or cancel it"
            )
        cfg = self.spec.optimize
        self.cfg = cfg
        self.task = self.spec.task
        self.family = family_for(cfg.backend, self.spec.initial_solution)
        self.perf = cfg.benchmark.perf_fields()
        self.perf_hash = benchmark_config_hash(self.perf)
        pid = os.getpid()
        self.cp.worker_pid = pid
        self.cp.worker_host = f"{socket.gethostname()}|{process_start_token(pid)}"
        if self.cp.started_at is not None and self.cp.saved_at is not None:
            # The last worker died without finishing (SIGKILL, crash): its time counts too,
            # up to its last checkpoint, or a wall budget would start afresh after every crash.
            self.cp.elapsed_before_s += max(0.0, self.cp.saved_at - self.cp.started_at)
        self.cp.started_at = time.time()
        self.cp.stop_reason = None
        pool: DevicePool | None = None
        # From here on any failure is recorded on the run, so that no run is left "running"
        # (and resumed again and again) because of a setting that can never work.
        try:
            self.factory = backend_factory(cfg.backend)
            if self.cp.hardware is None:
                availability = await asyncio.to_thread(
                    lambda: get_backend(cfg.backend).availability()
                )
                self.cp.hardware = availability.hardware
            self.budget = await asyncio.to_thread(self._make_budget)
            await self._save(status="running", error="")
            configs = self._role_configs or load_role_configs(
                Path(cfg.models_config) if cfg.models_config else None
            )
            self.models = {
                role: configs.for_role(role).model for role in ("planner", "executor", "summarizer")
            }
            pool = self._given_pool or make_pool(cfg.backend, cfg.workers)
            self._pool = pool
            async with LlmClient(
                configs, ledger=self._ledger, run_id=self.run_id, budget=self.budget
            ) as client:
                self.client = client
                await self._start()
                self._emit("run_started", self.cp.completed_iteration, "run started")
                for iteration in range(self.cp.completed_iteration + 1, cfg.iterations + 1):
                    reason = self.budget.exhausted()
                    if reason is not None and self._stop is None:
                        self._stop = ("budget_exhausted", reason)
                    if self._stop is not None:
                        break
                    await self._iteration(iteration)
        except BaseException as exc:
            self._close_pool(pool)
            await self._finish_failed(exc)
            raise
        self._close_pool(pool)
        return await self._finish()

    def _ledger(self, call: LlmCallIn) -> None:
        self.store.add_llm_call(call)

    def _close_pool(self, pool: DevicePool | None) -> None:
        if pool is not None and self._given_pool is None:
            pool.close()

    def _make_budget(self) -> Budget:
        cfg = self.cfg
        wall = cfg.budget_wall_s
        if wall is not None:
            wall = max(0.0, wall - self.cp.elapsed_before_s)
        budget = Budget(max_tokens=cfg.budget_tokens, max_usd=cfg.budget_usd, max_wall_s=wall)
        # A resumed run keeps spending against what it already spent.
        for totals in self.store.llm_totals(self.run_id):
            budget.charge(totals.tokens_in, totals.tokens_out, totals.cost_usd)
        return budget

    async def _start(self) -> None:
        if self.cp.initial is None:
            initial = self.spec.initial_solution
            meta = {"run_id": self.run_id, "iteration": 0, "role": "initial"}
            sid, source_hash, evaluation, _ = await self._store_and_profile(initial, None, meta)
            if not evaluation.passed or evaluation.performance is None:
                raise InitialKernelFailed(
                    f"the initial kernel does not pass its task ({evaluation.status.value}); fix "
                    f"it first (e.g. `accelopt profile`). Log: {evaluation.log[-1500:]}"
                )
            entry = BeamEntry(
                solution_id=sid,
                latency_ms=evaluation.performance.latency_ms,
                source_hash=source_hash,
                branch="initial",
            )
            self.cp.initial = entry
            self.cp.beam = [entry]
            await self._save(initial_solution_id=sid)
        if self.cp.seed_experience_ids is None:
            seeds: list[str] = []
            if self.cfg.seed_from_namespace:
                seeds = await self._db(
                    OptimizationMemory.seeds_from_namespace,
                    self.store,
                    self.cfg.memory_namespace(),
                    self.cfg.exp_n,
                )
            self.cp.seed_experience_ids = seeds
            await self._save()
        self.memory = OptimizationMemory(
            self.store,
            run_id=self.run_id,
            namespace=self.cfg.memory_namespace(),
            capacity=self.cfg.exp_n,
            seed_ids=self.cp.seed_experience_ids,
        )
        assert self.cp.initial is not None
        candidates = [self.cp.initial] + [
            BeamEntry(
                solution_id=s.solution_id,
                latency_ms=s.latency_ms,
                source_hash=s.source_hash,
                branch=s.branch,
            )
            for s in self.cp.slots.values()
            if s.passed and s.solution_id and s.source_hash and s.latency_ms is not None
        ]
        self._best = min(candidates, key=lambda e: e.latency_ms)

    # ------------------------------------------------------------------ one iteration

    async def _iteration(self, iteration: int) -> None:
        started = time.monotonic()
        beam = list(self.cp.beam)
        memory = await self._db(self.memory.working_set)
        self._emit(
            "iteration_started",
            iteration,
            f"iteration {iteration}/{self.cfg.iterations}: {len(beam)} beam kernel(s), "
            f"{len(memory)} memory item(s)",
        )
        chains = [
            self._spawn(self._chain(iteration, b, entry, p, memory))
            for b, entry in enumerate(beam)
            for p in range(self.cfg.plans)
        ]
        results = await asyncio.gather(*chains, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                raise result
        if self._stop is not None:
            return
        attempts = self.cp.slots_of(iteration)
        pairs = select_pairs(
            attempts,
            topk=self.cfg.topk,
            positive_threshold=self.cfg.positive_threshold,
            negative_threshold=self.cfg.negative_threshold,
        )
        added = await self._summarize(iteration, pairs)
        if self._stop is not None:
            return
        self.cp.beam = next_beam(beam, attempts, self.cfg.beam)
        self.cp.completed_iteration = iteration
        passed = sum(1 for a in attempts if a.passed)
        self.cp.history.append(
            IterationSummary(
                iteration=iteration,
                best_latency_ms=self._best.latency_ms if self._best else None,
                attempts=len(attempts),
                passed=passed,
                failed=len(attempts) - passed,
                experiences_added=added,
                beam=[e.solution_id for e in self.cp.beam],
                wall_s=time.monotonic() - started,
            )
        )
        await self._save(current_iteration=iteration)
        self._emit(
            "iteration_finished",
            iteration,
            f"iteration {iteration} done: {passed}/{len(attempts)} passed, {added} experience(s)",
        )

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _chain(
        self, iteration: int, b: int, entry: BeamEntry, p: int, memory: list[Any]
    ) -> None:
        needed = [
            a
            for a in range(self.cfg.attempts)
            if (slot := self.cp.slots.get(slot_key(iteration, b, p, a))) is None
            or slot.status not in FINAL_SLOT_STATES
        ]
        if not needed or self._stop is not None:
            return
        key = f"{iteration}/{b}"
        plans = self.cp.plans.setdefault(key, [None] * self.cfg.plans)
        plan = plans[p]
        parent = await self._solution(entry.solution_id)
        if plan is None:
            profile = await self._db(self._stored_evaluation, entry.solution_id)
            rng = random.Random(f"{self.cfg.shuffle_seed}/{iteration}/{b}/{p}")
            messages = planner_messages(self.family, self.task, parent, profile, memory, rng)
            try:
                plan, _ = await propose_plan(self.client, messages)
            except BudgetExceeded as exc:
                self._budget_stop(exc)
                return
            except (LlmCallFailed, MalformedReply) as exc:
                for a in needed:
                    await self._record(
                        self._slot(iteration, b, p, a, entry, LLM_FAILED, error=f"planner: {exc}")
                    )
                return
            plans[p] = plan
            await self._save()
        await asyncio.gather(
            *(self._attempt(iteration, b, entry, parent, p, a, plan) for a in needed)
        )

    async def _attempt(
        self,
        iteration: int,
        b: int,
        entry: BeamEntry,
        parent: Solution,
        p: int,
        a: int,
        plan: str,
    ) -> None:
        if self._stop is not None:
            return
        messages = executor_messages(self.family, self.task, parent, plan)
        try:
            outcome = await implement_plan(self.client, messages, self.family)
        except BudgetExceeded as exc:
            self._budget_stop(exc)
            return
        except LlmCallFailed as exc:
            await self._record(self._slot(iteration, b, p, a, entry, LLM_FAILED, error=str(exc)))
            return
        meta = {
            "run_id": self.run_id,
            "iteration": iteration,
            "beam_index": b,
            "plan_index": p,
            "plan": plan,
            "attempt_index": a,
            "models": self.models,
        }
        name = f"{self.task.definition.name}-{self.run_id[:8]}-i{iteration}b{b}p{p}a{a}"
        if outcome.source is None:
            # The reply itself is the record of what went wrong.
            failed = derived_solution(parent, outcome.reply_text or "(empty reply)", name)
            sid = await self._store_solution(
                failed, entry.solution_id, {**meta, "error": outcome.error}
            )
            await self._record(
                self._slot(iteration, b, p, a, entry, NO_CODE, error=outcome.error, solution_id=sid)
            )
            return
        candidate = derived_solution(parent, outcome.source, name)
        try:
            sid, source_hash, evaluation, reused = await self._store_and_profile(
                candidate, entry.solution_id, meta
            )
        except ConflictError as exc:
            await self._record(
                self._slot(iteration, b, p, a, entry, "COMPILE_ERROR", error=str(exc))
            )
            return
        latency = evaluation.performance.latency_ms if evaluation.performance else None
        record = self._slot(
            iteration,
            b,
            p,
            a,
            entry,
            evaluation.status.value,
            error=None if evaluation.passed else evaluation.log[-500:],
            solution_id=sid,
            source_hash=source_hash,
            latency_ms=latency,
            reused_profile=reused,
        )
        await self._record(record)

    def _slot(
        self, iteration: int, b: int, p: int, a: int, entry: BeamEntry, status: str, **fields: Any
    ) -> AttemptRecord:
        return AttemptRecord(
            iteration=iteration,
            beam_index=b,
            plan_index=p,
            attempt_index=a,
            parent_id=entry.solution_id,
            parent_latency_ms=entry.latency_ms,
            status=status,
            **fields,
        )

    async def _record(self, record: AttemptRecord) -> None:
        self.cp.slots[record.key] = record
        improved = False
        if (
            record.passed
            and record.latency_ms is not None
            and record.source_hash
            and (self._best is None or record.latency_ms < self._best.latency_ms)
        ):
            self._best = BeamEntry(
                solution_id=record.solution_id or "",
                latency_ms=record.latency_ms,
                source_hash=record.source_hash,
                branch=record.branch,
            )
            improved = True
        await self._save()
        latency = f"{record.latency_ms:.4g} ms" if record.latency_ms is not None else "-"
        self._emit(
            "attempt_profiled",
            record.iteration,
            f"attempt {record.key}: {record.status} {latency}"
            + (" (profile reused)" if record.reused_profile else ""),
        )
        if improved:
            self._emit("best_improved", record.iteration, f"new best: {record.latency_ms:.4g} ms")

    # ------------------------------------------------------------------ memory

    async def _summarize(self, iteration: int, pairs: list[Pair]) -> int:
        if not self.cfg.summarize or not pairs:
            return 0
        existing = await self._db(self.memory.items_of_iteration, iteration)
        done = {(item.slow_solution_id, item.fast_solution_id) for item in existing}

        def slow_fast(pair: Pair) -> tuple[str, str]:
            attempt = pair.attempt
            assert attempt.solution_id is not None
            if pair.speedup >= 1.0:
                return attempt.parent_id, attempt.solution_id
            return attempt.solution_id, attempt.parent_id

        # A resumed iteration may select other pairs than before the stop (its LLM_FAILED
        # attempts were tried again); what it already stored still counts against TopK.
        todo = [pair for pair in pairs if slow_fast(pair) not in done]
        todo = todo[: max(0, self.cfg.topk - len(done))]

        async def one(pair: Pair) -> int:
            attempt = pair.attempt
            slow_id, fast_id = slow_fast(pair)
            if self._stop is not None:
                return 0
            slow, fast = await self._solution(slow_id), await self._solution(fast_id)
            factor = max(pair.speedup, 1.0 / pair.speedup)
            messages = summarizer_messages(self.family, self.task, slow, fast, factor)
            try:
                summary = await summarize_pair(self.client, messages)
            except BudgetExceeded as exc:
                self._budget_stop(exc)
                return 0
            except (LlmCallFailed, MalformedReply) as exc:
                log.warning("run %s: summarizer failed for %s: %s", self.run_id, attempt.key, exc)
                return 0
            if isinstance(summary, NothingChanged):
                return 0
            await self._db(
                self.memory.add,
                ExperienceIn(
                    definition_name=self.task.definition.name,
                    title=summary.title,
                    strategy=summary.strategy,
                    pseudocode=summary.pseudocode,
                    slow_solution_id=slow_id,
                    fast_solution_id=fast_id,
                    speedup=factor,
                    iteration=iteration,
                ),
            )
            self._emit("experience_added", iteration, f"memory item: {summary.title}")
            return 1

        tasks = [self._spawn(one(pair)) for pair in todo]
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                raise result
        return len(done) + sum(r for r in results if isinstance(r, int))

    # ------------------------------------------------------------------ store + profile

    async def _store_solution(
        self, solution: Solution, parent_id: str | None, meta: dict[str, Any]
    ) -> str:
        found = await self._db(self.store.find_solution, solution_hash(solution))
        if found is not None:
            if found.definition_name != solution.definition:
                raise ConflictError(
                    f"this source is already stored for definition {found.definition_name!r}"
                )
            return found.id
        return await self._db(
            self.store.upsert_solution, solution, parent_id=parent_id, evolve_metadata=meta
        )

    async def _store_and_profile(
        self, solution: Solution, parent_id: str | None, meta: dict[str, Any]
    ) -> tuple[str, str, Evaluation, bool]:
        """(solution id, source hash, evaluation, whether a known profile was reused)."""
        source_hash = solution_hash(solution)
        sid = await self._store_solution(solution, parent_id, meta)
        self._solutions.setdefault(sid, solution)
        pending = self._inflight.get(source_hash)
        if pending is not None:
            return sid, source_hash, await asyncio.shield(pending), True
        stored = await self._db(self._stored_evaluation, sid)
        if stored is not None:
            return sid, source_hash, stored, True
        future: asyncio.Future[Evaluation] = asyncio.get_running_loop().create_future()
        self._inflight[source_hash] = future
        try:
            pooled = await self.pool_evaluate(solution)
            await self._db(
                self.store.upsert_profile, self.task.workload.uuid, sid, pooled, self.perf
            )
        except BaseException:
            self._inflight.pop(source_hash, None)
            future.cancel()
            raise
        future.set_result(pooled)
        return sid, source_hash, pooled, False

    async def pool_evaluate(self, solution: Solution) -> Evaluation:
        result = await self._pool.evaluate(self.factory, self.task, solution, self._benchmark)
        return result.evaluation

    @property
    def _benchmark(self) -> BenchmarkConfig:
        return self.cfg.benchmark

    def _stored_evaluation(self, solution_id: str) -> Evaluation | None:
        """A stored profile of this solution on this task, settings and hardware."""
        if self.cp.hardware is None:
            return None
        for profile in self.store.list_profiles(
            solution_id=solution_id, workload_uuid=self.task.workload.uuid
        ):
            if (
                profile.benchmark_config_hash == self.perf_hash
                and profile.eval_hardware == self.cp.hardware
            ):
                return profile.evaluation
        return None

    async def _solution(self, solution_id: str) -> Solution:
        if solution_id not in self._solutions:
            stored = await self._db(self.store.get_solution, solution_id)
            if stored is None:
                raise RuntimeError(f"solution {solution_id} vanished from the store")
            self._solutions[solution_id] = stored.solution
        return self._solutions[solution_id]

    # ------------------------------------------------------------------ bookkeeping

    async def _db(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        # Stores are synchronous; a round trip must not stall the event loop.
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def _save(self, **fields: Any) -> None:
        async with self._save_lock:
            usage = self.budget.usage() if hasattr(self, "budget") else None
            if usage is not None:
                fields.setdefault("tokens_in", usage.tokens_in)
                fields.setdefault("tokens_out", usage.tokens_out)
                fields.setdefault("cost_usd", usage.cost_usd)
            if self._best is not None:
                fields.setdefault("best_solution_id", self._best.solution_id)
                fields.setdefault("best_latency_ms", self._best.latency_ms)
            self.cp.saved_at = time.time()
            update = RunUpdate(config=run_config(self.spec, self.cp), **fields)
            write = asyncio.ensure_future(self._db(self.store.update_run, self.run_id, update))
            try:
                await asyncio.shield(write)
            except asyncio.CancelledError:
                # The write goes on in its thread; keep the lock until it lands so that an
                # older snapshot can never overwrite a later one.
                await write
                raise

    def _elapsed(self) -> float:
        started = self.cp.started_at or time.time()
        return self.cp.elapsed_before_s + (time.time() - started)

    async def _finish(self) -> RunRecord:
        status, reason = self._stop or ("completed", None)
        self.cp.stop_reason = reason
        self.cp.elapsed_before_s = self._elapsed()
        self.cp.started_at = None
        self.cp.winning_kernel_path = await asyncio.to_thread(self._write_winner)
        # The event goes out before the status changes, so a reader that stops at the final
        # status has already seen it.
        self._emit("run_finished", self.cp.completed_iteration, f"run {status}")
        await self._save(status=status, error=reason, current_iteration=self.cp.completed_iteration)
        run = await self._db(self.store.get_run, self.run_id)
        assert run is not None
        return run

    async def _finish_failed(self, exc: BaseException) -> None:
        if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt):
            status, message = "cancelled", "cancelled"
        else:
            status, message = "failed", f"{type(exc).__name__}: {exc}"
        self.cp.stop_reason = message
        self.cp.elapsed_before_s = self._elapsed()
        self.cp.started_at = None
        try:
            await asyncio.shield(self._save(status=status, error=message[:2000]))
        except Exception:  # the store itself may be what failed
            log.exception("run %s: could not record the failure", self.run_id)

    def _write_winner(self) -> str | None:
        if self._best is None or self.output_dir is None:
            return None
        stored = self.store.get_solution(self._best.solution_id)
        if stored is None:
            return None
        folder = Path(self.output_dir) / self.run_id
        folder.mkdir(parents=True, exist_ok=True)
        source: SourceFile = stored.solution.entry_source
        path = folder / f"best_{Path(source.path).name}"
        path.write_text(source.content, encoding="utf-8")
        (folder / "best_solution.json").write_text(stored.solution.to_json(), encoding="utf-8")
        return str(path)

    def _emit(self, kind: str, iteration: int, message: str) -> None:
        if self.on_event is None:
            return
        progress = run_progress(self.spec, self.cp, running=True)
        usage = self.budget.usage()
        event = EngineEvent(
            run_id=self.run_id,
            kind=kind,  # type: ignore[arg-type]
            iteration=iteration,
            message=message,
            best_latency_ms=self._best.latency_ms if self._best else None,
            initial_latency_ms=progress.initial_latency_ms,
            attempts_done=progress.attempts_done,
            attempts_passed=progress.attempts_passed,
            attempts_failed=progress.attempts_failed,
            iterations_total=self.cfg.iterations,
            progress=progress.progress,
            cost_usd=usage.cost_usd,
            tokens_in=usage.tokens_in,
            tokens_out=usage.tokens_out,
        )
        try:
            self.on_event(event)
        except Exception:  # a broken display must not stop a run
            log.exception("progress callback failed")
