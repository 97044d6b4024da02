"""The AccelOpt loop: plan -> implement -> profile -> select -> summarize -> next beam.

Every (beam kernel, plan sample) is one chain: a planner call, then K executor calls in
parallel; each executor attempt goes to the device pool the moment it arrives, so LLM time and
profiling time overlap (AccelOpt waits for all attempts first). LLM concurrency is bounded by the
client's per-role limits, profiling by the pool's device count.

Everything is written as it happens and the checkpoint (in runs.config) after every finished
attempt, so `resume` after a crash redoes only what never finished.

Under noise: each attempt is timed with its parent in the same rounds (its speedup over the
parent then has a paired interval); experience pairs and the next beam are chosen on intervals
(selection.py), and a tie that decides the beam's head or its last slot is re-measured
head-to-head at the end of the iteration (winner.settle_beam) and recorded in the checkpoint.
The best kernel found during an iteration is provisional (lowest median) until then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelopt_mcp.backends.cpu import host_hardware
from accelopt_mcp.backends.cpu_peaks import PeakMeasurementError, PeakSource
from accelopt_mcp.backends.placement import open_pool
from accelopt_mcp.backends.pool import EvaluationPool
from accelopt_mcp.backends.registry import backend_class
from accelopt_mcp.engine.checkpoint import (
    FINAL_SLOT_STATES,
    IterationSummary,
    PendingAttempt,
    RunSpec,
)
from accelopt_mcp.engine.checkpoint_writer import CheckpointWriter
from accelopt_mcp.engine.claim import (
    LeaseKeeper,
    RunBusy,
    RunNotRunnable,
    RunTakenOver,
    claim,
    lease_seconds,
    this_worker,
)
from accelopt_mcp.engine.config import RunSettingsError
from accelopt_mcp.engine.context import RunContext, make_budget
from accelopt_mcp.engine.events import EventSink
from accelopt_mcp.engine.executor import derived_solution, implement_plan
from accelopt_mcp.engine.experience import summarize_pairs
from accelopt_mcp.engine.hardware_block import describe_hardware
from accelopt_mcp.engine.history import lineage_history
from accelopt_mcp.engine.live_run import LiveRun
from accelopt_mcp.engine.llm_health import LlmHealth
from accelopt_mcp.engine.memory import OptimizationMemory
from accelopt_mcp.engine.planner import plan_diversity, propose_plan, propose_plans
from accelopt_mcp.engine.profile_cache import ProfileCache
from accelopt_mcp.engine.prompts import (
    REPAIRABLE_STATUSES,
    executor_messages,
    family_for,
    planner_messages,
    repair_messages,
)
from accelopt_mcp.engine.run_control import RunControl
from accelopt_mcp.engine.run_events import RunEvents
from accelopt_mcp.engine.runs import load_run
from accelopt_mcp.engine.selection import (
    LLM_FAILED,
    NO_CODE,
    NO_PLAN,
    AttemptRecord,
    BeamEntry,
    HeadToHead,
    TieDecision,
    measured_fields,
    parent_speedup_fields,
    select_pairs,
    slot_key,
)
from accelopt_mcp.engine.winner import head_to_head, settle_beam, write_winner
from accelopt_mcp.hashing import solution_hash
from accelopt_mcp.llm import (
    Budget,
    BudgetExceeded,
    ChatMessage,
    LlmCallFailed,
    LlmClient,
    MalformedReply,
    RoleConfigs,
    load_role_configs,
)
from accelopt_mcp.models import Evaluation, LlmCallIn, Solution
from accelopt_mcp.models.evaluation import untrusted_flags
from accelopt_mcp.redaction import redact
from accelopt_mcp.store.base import (
    ConflictError,
    ExperienceRecord,
    KernelStore,
    LeaseLostError,
    RunRecord,
    StoreError,
)

__all__ = ["BeamSearch", "InitialKernelFailed", "RunBusy", "RunNotRunnable", "RunTakenOver"]

log = logging.getLogger(__name__)


class InitialKernelFailed(RuntimeError):
    """The starting kernel does not pass its own task, or passes with an untrusted flag
    (models/evaluation.py); there is nothing to optimize from."""


class BeamSearch:
    """Runs (or resumes) one stored run to its end: claims it, sets it up, runs its iterations
    and records how it ended. Use one instance per run and event loop."""

    def __init__(
        self,
        store: KernelStore,
        run_id: str,
        *,
        on_event: EventSink | None = None,
        output_dir: Path | None = None,
        pool: EvaluationPool | None = None,
        role_configs: RoleConfigs | None = None,
        statuses: frozenset[str] | None = None,
        handed_over_by: str | None = None,
    ) -> None:
        """statuses: run only a run in one of these states (checked under the run's lock), else
        raise RunNotRunnable; None: any run not yet completed. handed_over_by: the job
        manager that queued the run for this worker (claim.claim)."""
        self.store = store
        self.run_id = run_id
        self.on_event = on_event
        self.output_dir = output_dir
        self._given_pool = pool
        self._role_configs = role_configs
        self._statuses = statuses
        self._handed_over_by = handed_over_by
        self._control = RunControl(run_id)

    # ------------------------------------------------------------------ control

    def request_stop(self, status: str = "cancelled", reason: str = "cancelled on request") -> None:
        """Stop soon: work in flight is abandoned, everything stored so far stays."""
        self._control.request_stop(status, reason)

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

    # ------------------------------------------------------------------ start and finish

    async def run(self) -> RunRecord:
        # A stored run, before its folder. Stores are synchronous: their calls run in threads.
        _, _, checkpoint = await asyncio.to_thread(load_run, self.store, self.run_id)
        if self.output_dir is None and checkpoint.output_dir:
            # Resumed without one: the folder the run was started with (its winner and plot
            # live there).
            self.output_dir = Path(checkpoint.output_dir)
        worker, lease_s = this_worker(), lease_seconds()
        await asyncio.to_thread(
            claim,
            self.store,
            self.run_id,
            worker,
            statuses=self._statuses,
            lease_s=lease_s,
            handed_over_by=self._handed_over_by,
        )
        try:
            async with LeaseKeeper(self.store, self.run_id, worker, lease_s) as keeper:
                return await self._while_held(worker, keeper)
        except LeaseLostError as exc:
            # A fenced write found the run taken over (or ended elsewhere) before the keeper did.
            raise RunTakenOver(str(exc)) from None
        finally:
            with contextlib.suppress(StoreError):
                await asyncio.to_thread(self.store.release_run, self.run_id, worker)

    async def _while_held(self, worker: str, keeper: LeaseKeeper) -> RunRecord:
        """_run, abandoned (nothing more written) as soon as the lease is lost."""
        work = asyncio.ensure_future(self._run(worker, keeper))
        either: set[asyncio.Future[Any]] = {work, keeper.lost}
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            work.cancel()
            with contextlib.suppress(BaseException):
                await work
            raise
        if work.done():
            return work.result()
        # Lost: the work is cancelled and records nothing (the writer sees the keeper lost).
        work.cancel()
        with contextlib.suppress(BaseException):
            await work
        raise RunTakenOver(
            f"run {self.run_id} given up: {keeper.lost.result()}", outage=keeper.lost_to_outage
        )

    async def _run(self, worker: str, keeper: LeaseKeeper) -> RunRecord:
        run, spec, checkpoint = await asyncio.to_thread(load_run, self.store, self.run_id)
        if run.status == "completed":
            return run
        cfg = spec.optimize
        family = family_for(cfg.backend)
        if self.output_dir is not None:
            checkpoint.output_dir = str(self.output_dir.resolve())
        checkpoint.start_clock()
        checkpoint.stop_reason = None
        state = LiveRun(checkpoint)
        writer = CheckpointWriter(
            self.store,
            self.run_id,
            spec,
            state,
            holder=worker,
            on_final=keeper.stand_down,
            lost=keeper.lost.done,
        )
        budget: Budget | None = None
        pool: EvaluationPool | None = None
        # From here on any failure is recorded on the run, so that no run is left "running"
        # (and resumed again and again) because of a setting that can never work.
        try:
            factory = backend_class(cfg.backend)
            # This host's devices, or a Ray cluster's (cfg.cluster, else ACCELOPT_RAY_ADDRESS).
            opened = self._given_pool
            if opened is None:
                opened = await asyncio.to_thread(open_pool, factory.info, cfg.workers, cfg.cluster)
            pool = opened
            hardware = await asyncio.to_thread(opened.hardware, factory)
            if checkpoint.hardware is None:
                checkpoint.hardware = hardware
            elif hardware is not None and hardware != checkpoint.hardware:
                # Its stored figures (beam, parents, reused profiles) were measured there.
                raise RunSettingsError(
                    f"run {self.run_id} was measured on {checkpoint.hardware}, but it would "
                    f"now profile on {hardware}; resume it where it ran (accelopt resume "
                    f"{self.run_id} --cluster ...), or start a new run there"
                )
            # Calls a dead worker had in flight were billed all the same: they stay in the
            # ledger (interrupted, with their estimated tokens) and in the budget.
            interrupted = await asyncio.to_thread(
                self.store.mark_interrupted_llm_calls, self.run_id
            )
            if interrupted:
                log.info(
                    "run %s: %d LLM call(s) interrupted by the last worker",
                    self.run_id,
                    interrupted,
                )
            budget = await asyncio.to_thread(
                make_budget, self.store, self.run_id, cfg, checkpoint.elapsed_before_s
            )
            await writer.move_inline_entries()
            await writer.save(budget, status="running", error="")
            configs = self._role_configs or load_role_configs(
                Path(cfg.models_config) if cfg.models_config else None
            )
            models = {
                role: configs.for_role(role).model for role in ("planner", "executor", "summarizer")
            }
            if cfg.backend == "cpu" and spec.task.roofline is not None and opened.local:
                # The host's peaks (for percent of peak) are measured once per host, taking
                # every core for seconds: now, before any evaluation runs beside it.
                await asyncio.to_thread(_warm_cpu_peaks, self.store)
            profiles = ProfileCache(
                self.store, spec.task, cfg.benchmark, opened, factory, checkpoint.hardware
            )
            async with LlmClient(
                configs, ledger=self._ledger, run_id=self.run_id, budget=budget
            ) as client:
                memory = await self._start(spec, state, writer, budget, profiles)
                ctx = RunContext(
                    run_id=self.run_id,
                    spec=spec,
                    family=family,
                    models=models,
                    budget=budget,
                    client=client,
                    profiles=profiles,
                    memory=memory,
                    checkpoints=writer,
                    events=RunEvents(
                        self.on_event,
                        self.run_id,
                        spec,
                        state,
                        budget,
                        llm_in_flight=client.in_flight,
                        profiling_busy=opened.busy,
                        devices=opened.size,
                        devices_where=opened.where,
                    ),
                )
                ctx.events.emit("run_started", checkpoint.completed_iteration, "run started")
                health = LlmHealth(cfg.max_consecutive_llm_failures)
                await _Iterations(ctx, state, self._control, health).run()
        except BaseException as exc:
            self._close_pool(pool)
            await writer.record_failure(exc, budget)
            raise
        self._close_pool(pool)
        return await self._finish(ctx, state)

    def _ledger(self, call: LlmCallIn) -> None:
        self.store.add_llm_call(call)

    def _close_pool(self, pool: EvaluationPool | None) -> None:
        if pool is not None and self._given_pool is None:
            pool.close()

    async def _start(
        self,
        spec: RunSpec,
        state: LiveRun,
        writer: CheckpointWriter,
        budget: Budget,
        profiles: ProfileCache,
    ) -> OptimizationMemory:
        """Choose the run's starting point once (its initial kernel, which must pass, and the
        memory items it starts from); return the run's memory. Sets the best kernel so far."""
        checkpoint = state.checkpoint
        cfg = spec.optimize
        if checkpoint.initial is None:
            meta = {"run_id": self.run_id, "iteration": 0, "role": "initial"}
            initial = await profiles.store_and_profile(spec.initial_solution, None, meta)
            evaluation = initial.evaluation
            if not evaluation.passed or evaluation.performance is None:
                raise InitialKernelFailed(
                    f"the initial kernel does not pass its task ({evaluation.status.value}); fix "
                    f"it first (e.g. `accelopt profile`). Log: {evaluation.log[-1500:]}"
                )
            if not evaluation.trusted:
                # Every speedup is measured against it and it is the best until beaten: a
                # number that cannot be believed is no place to start from.
                raise InitialKernelFailed(
                    "the initial kernel passed, but its result is flagged untrusted ("
                    + ", ".join(evaluation.untrusted_flags)
                    + "); check the kernel (a cached or constant answer, skipped work) and the "
                    "task's declared roofline, then `accelopt profile` it again. Log: "
                    + evaluation.log[-1500:]
                )
            entry = BeamEntry(
                solution_id=initial.solution_id,
                latency_ms=evaluation.performance.latency_ms,
                source_hash=initial.source_hash,
                branch="initial",
                **measured_fields(evaluation),
            )
            checkpoint.initial = entry
            checkpoint.beam = [entry]
            await writer.save(budget, initial_solution_id=initial.solution_id)
        if checkpoint.seed_experience_ids is None:
            seeds: list[str] = []
            if cfg.seed_from_namespace:
                seeds = await asyncio.to_thread(
                    OptimizationMemory.seeds_from_namespace,
                    self.store,
                    cfg.memory_namespace(),
                    cfg.exp_n,
                )
            checkpoint.seed_experience_ids = seeds
            await writer.save(budget)
        memory = OptimizationMemory(
            self.store,
            run_id=self.run_id,
            namespace=cfg.memory_namespace(),
            capacity=cfg.exp_n,
            seed_ids=checkpoint.seed_experience_ids,
            policy=cfg.memory_policy,
        )
        state.best = checkpoint.best_so_far()
        return memory

    async def _finish(self, ctx: RunContext, state: LiveRun) -> RunRecord:
        checkpoint = state.checkpoint
        status, reason = self._control.stop or ("completed", None)
        checkpoint.stop_reason = reason
        checkpoint.stop_clock()
        checkpoint.winning_kernel_path = await asyncio.to_thread(
            write_winner, self.store, state.best, self.output_dir, self.run_id
        )
        # The event goes out before the status changes, so a reader that stops at the final
        # status has already seen it.
        ctx.events.emit("run_finished", checkpoint.completed_iteration, f"run {status}")
        await ctx.checkpoints.save(
            ctx.budget,
            status=status,
            error=reason,
            current_iteration=checkpoint.completed_iteration,
        )
        run = await asyncio.to_thread(self.store.get_run, self.run_id)
        assert run is not None
        return run


class _Iterations:
    """The loop of a started run, from its checkpoint's next iteration to its last, or until
    it is asked to stop (or its budget runs out)."""

    def __init__(
        self, ctx: RunContext, state: LiveRun, control: RunControl, health: LlmHealth
    ) -> None:
        self.ctx = ctx
        self.state = state
        self.control = control
        self.health = health

    def _llm_failed(self, role: str, exc: Exception) -> None:
        """A call failed for good: stop the run once the LLM looks gone (llm_health)."""
        reason = self.health.failed(role, str(exc))
        if reason is not None:
            self.control.request_stop("llm_unavailable", reason)

    async def run(self) -> None:
        ctx = self.ctx
        for iteration in range(
            self.state.checkpoint.completed_iteration + 1, ctx.cfg.iterations + 1
        ):
            reason = ctx.budget.exhausted()
            if reason is not None:
                self.control.budget_ran_out(reason)
            if self.control.stopping:
                break
            await self._iteration(iteration)

    async def _save(self, **fields: Any) -> None:
        await self.ctx.checkpoints.save(self.ctx.budget, **fields)

    async def _iteration(self, iteration: int) -> None:
        ctx, checkpoint = self.ctx, self.state.checkpoint
        cfg = ctx.cfg
        started = time.monotonic()
        beam = list(checkpoint.beam)
        memory = await asyncio.to_thread(ctx.memory.working_set, iteration)
        ctx.events.emit(
            "iteration_started",
            iteration,
            f"iteration {iteration}/{cfg.iterations}: {len(beam)} beam kernel(s), "
            f"{len(memory)} memory item(s)",
        )
        chains = [
            self.control.spawn(self._beam_kernel(iteration, b, entry, memory))
            for b, entry in enumerate(beam)
        ]
        results = await asyncio.gather(*chains, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                raise result
        attempts = checkpoint.slots_of(iteration)
        if attempts and all(a.status == LLM_FAILED for a in attempts):
            # Nothing to select from, and the next iteration would fail the same way.
            self.control.request_stop(
                "llm_unavailable",
                f"every LLM call of iteration {iteration} failed ({len(attempts)} attempts); "
                f"last: {self.health.last_error or attempts[-1].error}",
            )
        if self.control.stopping:
            return
        pairs = select_pairs(
            attempts,
            topk=cfg.topk,
            positive_threshold=cfg.positive_threshold,
            negative_threshold=cfg.negative_threshold,
        )
        added = await summarize_pairs(ctx, self.control, iteration, pairs)
        if self.control.stopping:
            return
        # A stop request cancels the re-measures like any other work of the iteration.
        settling = self.control.spawn(
            settle_beam(beam, attempts, cfg.beam, self._head_to_head, iteration=iteration)
        )
        try:
            choice = await settling
        except asyncio.CancelledError:
            if settling.cancelled() and self.control.stopping:
                return
            raise
        if self.control.stopping:
            return
        checkpoint.beam = choice.beam
        # A resumed iteration decides again: its earlier record (if any got written) goes.
        checkpoint.ties = [t for t in checkpoint.ties if t.iteration != iteration] + choice.ties
        if choice.beam:
            # The head of the beam is the run's best: its first place was settled just now.
            self.state.best = choice.beam[0]
        checkpoint.completed_iteration = iteration
        passed = sum(1 for a in attempts if a.passed)
        diversities = [
            d
            for b in range(len(beam))
            if (d := plan_diversity([p for p in checkpoint.plans.get(f"{iteration}/{b}", []) if p]))
            is not None
        ]
        best = self.state.best
        checkpoint.history.append(
            IterationSummary(
                iteration=iteration,
                best_latency_ms=best.latency_ms if best else None,
                attempts=len(attempts),
                passed=passed,
                failed=len(attempts) - passed,
                flagged=sum(1 for a in attempts if a.passed and not a.trusted),
                experiences_added=added,
                beam=[e.solution_id for e in checkpoint.beam],
                wall_s=time.monotonic() - started,
                plan_diversity=sum(diversities) / len(diversities) if diversities else None,
                repaired=sum(1 for a in attempts if a.passed and a.repairs),
            )
        )
        await self._save(current_iteration=iteration)
        for tie in choice.ties:
            ctx.events.emit("tie_decided", iteration, tie.describe())
        ctx.events.emit(
            "iteration_finished",
            iteration,
            f"iteration {iteration} done: {passed}/{len(attempts)} passed, {added} experience(s)",
        )

    async def _head_to_head(self, tie: TieDecision) -> HeadToHead:
        """The two kernels of a tie re-measured against each other (one device, same rounds)."""
        self.ctx.events.emit(
            "tie_decided",
            tie.iteration,
            f"iteration {tie.iteration}: {tie.placed[:8]} and {tie.challenger[:8]} tie for "
            + ("first place" if tie.place == "first" else f"beam slot {tie.slot}")
            + "; re-measuring them head-to-head",
        )
        return await head_to_head(self.ctx.profiles, tie.placed, tie.challenger)

    async def _beam_kernel(
        self, iteration: int, b: int, entry: BeamEntry, memory: list[ExperienceRecord]
    ) -> None:
        """Everything an iteration does for one beam kernel: its N plans (those the checkpoint
        does not have), then the K attempts of each plan that have not finished yet."""
        ctx, checkpoint = self.ctx, self.state.checkpoint
        cfg = ctx.cfg
        needed = {
            p: [
                a
                for a in range(cfg.attempts)
                if (slot := checkpoint.slots.get(slot_key(iteration, b, p, a))) is None
                or slot.status not in FINAL_SLOT_STATES
            ]
            for p in range(cfg.plans)
        }
        needed = {p: attempts for p, attempts in needed.items() if attempts}
        if not needed or self.control.stopping:
            return
        parent = await ctx.profiles.solution(entry.solution_id)
        profile = await ctx.profiles.stored_evaluation(entry.solution_id)
        kernel = _Kernel(
            entry=entry,
            solution=parent,
            profile=profile,
            hardware=describe_hardware(
                ctx.family, profile.environment if profile else None, task=ctx.task
            ),
        )
        plans = checkpoint.plans.setdefault(f"{iteration}/{b}", [None] * cfg.plans)
        missing = [p for p in needed if plans[p] is None]
        history = lineage_history(
            entry.solution_id,
            checkpoint.slots.values(),
            checkpoint.plans,
            before_iteration=iteration,
        )
        if missing and cfg.plan_mode == "distinct":
            if not await self._distinct_plans(iteration, b, kernel, memory, history, missing):
                return
            needed = {p: attempts for p, attempts in needed.items() if plans[p] is not None}
        await asyncio.gather(
            *(
                self._plan_chain(iteration, b, kernel, p, attempts, memory, history)
                for p, attempts in needed.items()
            )
        )

    async def _distinct_plans(
        self,
        iteration: int,
        b: int,
        kernel: _Kernel,
        memory: list[ExperienceRecord],
        history: str,
        missing: list[int],
    ) -> bool:
        """One planner call for the kernel's missing plans, asked to differ from each other
        (and from the plans it already has); samples left without a plan are recorded as
        failed attempts. False when the run must stop (budget)."""
        ctx, checkpoint = self.ctx, self.state.checkpoint
        cfg = ctx.cfg
        plans = checkpoint.plans[f"{iteration}/{b}"]
        messages = self._planner_messages(
            kernel, memory, history, f"{iteration}/{b}", n_plans=len(missing)
        )
        error: str | None = None
        status = NO_PLAN
        try:
            made = await propose_plans(
                ctx.client,
                messages,
                len(missing),
                known=[plan for plan in plans if plan],
                purpose=f"plans {iteration}/{b}",
            )
        except BudgetExceeded as exc:
            self.control.call_refused(exc)
            return False
        except (LlmCallFailed, MalformedReply) as exc:
            made, error = [], f"planner: {exc}"
            status = self._planner_failed(exc)
        else:
            self.health.succeeded()
        for p, plan in zip(missing, made, strict=False):
            plans[p] = plan
        await self._save_plans(iteration, b)
        short = [p for p in missing if plans[p] is None]
        reason = error or (
            f"planner: gave {len(made)} of the {len(missing)} distinct plans asked for"
        )
        for p in short:
            for a in range(cfg.attempts):
                key = slot_key(iteration, b, p, a)
                done = checkpoint.slots.get(key)
                if done is None or done.status not in FINAL_SLOT_STATES:
                    await self._record(
                        self._slot(iteration, b, p, a, kernel.entry, status, error=reason)
                    )
        return True

    async def _plan_chain(
        self,
        iteration: int,
        b: int,
        kernel: _Kernel,
        p: int,
        attempts: list[int],
        memory: list[ExperienceRecord],
        history: str,
    ) -> None:
        """One plan sample: its plan (in "independent" mode, one planner call of its own
        unless the checkpoint has it), then its unfinished attempts."""
        ctx, checkpoint = self.ctx, self.state.checkpoint
        plans = checkpoint.plans[f"{iteration}/{b}"]
        plan = plans[p]
        if plan is None:
            messages = self._planner_messages(kernel, memory, history, f"{iteration}/{b}/{p}")
            try:
                plan, _ = await propose_plan(
                    ctx.client, messages, purpose=f"plan {iteration}/{b}/{p}"
                )
            except BudgetExceeded as exc:
                self.control.call_refused(exc)
                return
            except (LlmCallFailed, MalformedReply) as exc:
                status = LLM_FAILED if isinstance(exc, LlmCallFailed) else NO_PLAN
                for a in attempts:
                    await self._record(
                        self._slot(
                            iteration, b, p, a, kernel.entry, status, error=f"planner: {exc}"
                        )
                    )
                self._planner_failed(exc)
                return
            self.health.succeeded()
            plans[p] = plan
            await self._save_plans(iteration, b)
        await asyncio.gather(*(self._attempt(iteration, b, kernel, p, a, plan) for a in attempts))

    def _planner_messages(
        self,
        kernel: _Kernel,
        memory: list[ExperienceRecord],
        history: str,
        sample: str,
        n_plans: int = 1,
    ) -> list[ChatMessage]:
        """The planner's prompt for a beam kernel; `sample` ("iteration/beam[/plan]") seeds
        the order its counters are shown in."""
        ctx = self.ctx
        return planner_messages(
            ctx.family,
            ctx.task,
            kernel.solution,
            kernel.profile,
            memory,
            random.Random(f"{ctx.cfg.shuffle_seed}/{sample}"),
            hardware=kernel.hardware,
            history=history,
            n_plans=n_plans,
        )

    def _planner_failed(self, exc: LlmCallFailed | MalformedReply) -> str:
        """Count a planner call that gave no plan; the status of the samples left without
        one: LLM_FAILED when the call failed (perhaps the stop of the run), NO_PLAN when the
        service answered, if not with a plan."""
        if isinstance(exc, LlmCallFailed):
            self._llm_failed("planner", exc)
            return LLM_FAILED
        self.health.succeeded()
        return NO_PLAN

    async def _save_plans(self, iteration: int, b: int) -> None:
        await self.ctx.checkpoints.save_entry(self.ctx.budget, "plans", f"{iteration}/{b}")

    async def _attempt(
        self, iteration: int, b: int, kernel: _Kernel, p: int, a: int, plan: str
    ) -> None:
        """One executor call for the plan; its kernel stored, profiled and, when it fails,
        repaired (cfg.repair_tries). A kernel stored before the run stopped
        (checkpoint.pending) is taken up where it was, without asking again."""
        ctx = self.ctx
        entry, parent = kernel.entry, kernel.solution
        if self.control.stopping:
            return
        key = slot_key(iteration, b, p, a)
        pending = self.state.checkpoint.pending.get(key)
        if pending is not None:
            resumed = await self._stored_kernel(pending, key)
            if resumed is not None:
                solution, ours = resumed
                await self._profile_and_repair(
                    iteration, b, p, a, kernel, plan, pending, solution, ours=ours
                )
                return
        messages = executor_messages(
            ctx.family, ctx.task, parent, plan, hardware=kernel.hardware, profile=kernel.profile
        )
        try:
            outcome = await implement_plan(
                ctx.client,
                messages,
                ctx.family,
                entry_symbol=parent.entry_symbol,
                purpose=f"attempt {key}",
            )
        except BudgetExceeded as exc:
            self.control.call_refused(exc)
            return
        except LlmCallFailed as exc:
            # The stop (if this failure is one too many) first, so that no queued call is
            # sent meanwhile; the record is written all the same (CheckpointWriter._submit).
            self._llm_failed("executor", exc)
            await self._record(self._slot(iteration, b, p, a, entry, LLM_FAILED, error=str(exc)))
            return
        self.health.succeeded()
        meta = self._meta(iteration, b, p, a, plan)
        name = f"{ctx.task.definition.name}-{ctx.run_id[:8]}-i{iteration}b{b}p{p}a{a}"
        if outcome.source is None:
            # The reply itself is the record of what went wrong.
            failed = derived_solution(parent, outcome.reply_text or "(empty reply)", name)
            sid = await ctx.profiles.store_solution(
                failed, entry.solution_id, {**meta, "error": outcome.error}
            )
            await self._record(
                self._slot(iteration, b, p, a, entry, NO_CODE, error=outcome.error, solution_id=sid)
            )
            return
        candidate = derived_solution(parent, outcome.source, name)
        try:
            sid = await ctx.profiles.store_solution(candidate, entry.solution_id, meta)
        except ConflictError as exc:
            await self._record(
                self._slot(iteration, b, p, a, entry, "COMPILE_ERROR", error=str(exc))
            )
            return
        # From here a crash loses nothing: a resumed run profiles this kernel (or takes its
        # stored profile) rather than asking the executor for another one.
        stored = PendingAttempt(solution_id=sid, source_hash=solution_hash(candidate))
        await self._set_pending(key, stored)
        await self._profile_and_repair(iteration, b, p, a, kernel, plan, stored, candidate)

    def _meta(self, iteration: int, b: int, p: int, a: int, plan: str) -> dict[str, Any]:
        """What every kernel of a slot is stored with (its evolve_metadata)."""
        return {
            "run_id": self.ctx.run_id,
            "iteration": iteration,
            "beam_index": b,
            "plan_index": p,
            "plan": plan,
            "attempt_index": a,
            "models": self.ctx.models,
        }

    async def _set_pending(self, key: str, pending: PendingAttempt) -> None:
        self.state.checkpoint.pending[key] = pending
        await self.ctx.checkpoints.save_entry(self.ctx.budget, "pending", key)

    async def _stored_kernel(
        self, pending: PendingAttempt, key: str
    ) -> tuple[Solution, bool] | None:
        """The pending attempt's kernel from the store, and whether this very slot stored it
        (then a stored profile of it was taken beside this slot's parent); None when it is
        gone (the executor is asked again)."""
        stored = await asyncio.to_thread(self.ctx.profiles.store.get_solution, pending.solution_id)
        if stored is None:
            return None
        meta = stored.evolve_metadata
        where = (meta.get("iteration"), meta.get("beam_index"))
        which = (meta.get("plan_index"), meta.get("attempt_index"))
        ours = meta.get("run_id") == self.ctx.run_id and (
            "/".join(map(str, (*where, *which))) == key
        )
        return stored.solution, ours

    async def _profile_and_repair(
        self,
        iteration: int,
        b: int,
        p: int,
        a: int,
        kernel: _Kernel,
        plan: str,
        pending: PendingAttempt,
        candidate: Solution,
        *,
        ours: bool = False,
    ) -> None:
        """Profile the slot's stored kernel beside its parent; while it fails in a way the
        executor can fix (prompts.REPAIRABLE_STATUSES) and repair tries are left, show the
        executor its kernel and the error, store the fix (its parent: the failed kernel) and
        profile that. The slot records the last kernel tried. ours: a resumed slot's own
        kernel (its stored profile's parent comparison holds)."""
        ctx = self.ctx
        cfg = ctx.cfg
        entry = kernel.entry
        key = slot_key(iteration, b, p, a)
        tries = pending.repairs
        while True:
            profiled = await ctx.profiles.profile(
                pending.solution_id,
                candidate,
                entry.solution_id,
                kernel.solution,
                stored_beside_parent=ours,
            )
            evaluation = profiled.evaluation
            status = evaluation.status.value
            if (
                status in REPAIRABLE_STATUSES
                and pending.repairs < cfg.repair_tries
                and not self.control.stopping
            ):
                fixed, asked = await self._repair(
                    iteration, b, p, a, kernel, plan, pending, candidate, evaluation
                )
                tries += asked
                if fixed is not None:
                    pending, candidate = fixed
                    ours = False
                    await self._set_pending(key, pending)
                    continue
            break
        latency = evaluation.performance.latency_ms if evaluation.performance else None
        record = self._slot(
            iteration,
            b,
            p,
            a,
            entry,
            status,
            error=None if evaluation.passed else evaluation.log[-500:],
            solution_id=profiled.solution_id,
            source_hash=profiled.source_hash,
            latency_ms=latency,
            reused_profile=profiled.reused,
            flags=list(evaluation.flags),
            repairs=tries,
            repaired_from=list(pending.repaired_from),
            **measured_fields(evaluation),
            **parent_speedup_fields(evaluation, entry, profiled.parent_comparison),
        )
        await self._record(record)

    async def _repair(
        self,
        iteration: int,
        b: int,
        p: int,
        a: int,
        kernel: _Kernel,
        plan: str,
        failed: PendingAttempt,
        failed_kernel: Solution,
        evaluation: Evaluation,
    ) -> tuple[tuple[PendingAttempt, Solution] | None, bool]:
        """One repair try: (the fixed kernel, stored with the failed one as its parent, or
        None when there is none: the call failed, the budget refused it, the reply held no
        code or the same source, and the failed kernel stands as the attempt's result;
        whether the executor was asked)."""
        ctx = self.ctx
        key = slot_key(iteration, b, p, a)
        number = failed.repairs + 1
        messages = repair_messages(
            ctx.family,
            ctx.task,
            kernel.solution,
            plan,
            failed_kernel.entry_source.content,
            evaluation.status.value,
            evaluation.log,
            hardware=kernel.hardware,
            profile=kernel.profile,
        )
        try:
            outcome = await implement_plan(
                ctx.client,
                messages,
                ctx.family,
                entry_symbol=kernel.solution.entry_symbol,
                purpose=f"repair {key}#{number}",
            )
        except BudgetExceeded as exc:
            self.control.call_refused(exc)
            return None, False
        except LlmCallFailed as exc:
            self._llm_failed("executor", exc)
            return None, True
        self.health.succeeded()
        if outcome.source is None:
            return None, True
        name = f"{ctx.task.definition.name}-{ctx.run_id[:8]}-i{iteration}b{b}p{p}a{a}r{number}"
        fixed = derived_solution(kernel.solution, outcome.source, name)
        source_hash = solution_hash(fixed)
        if source_hash == failed.source_hash:
            return None, True
        meta = {
            **self._meta(iteration, b, p, a, plan),
            "repair": number,
            "repair_of": failed.solution_id,
            "repaired_status": evaluation.status.value,
        }
        try:
            sid = await ctx.profiles.store_solution(fixed, failed.solution_id, meta)
        except ConflictError:
            return None, True
        ctx.events.emit(
            "attempt_repaired",
            iteration,
            f"attempt {key}: {evaluation.status.value}; repair {number} of "
            f"{ctx.cfg.repair_tries} stored as {sid[:8]}",
        )
        pending = PendingAttempt(
            solution_id=sid,
            source_hash=source_hash,
            repairs=number,
            repaired_from=[*failed.repaired_from, failed.solution_id],
        )
        return (pending, fixed), True

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
        """A finished attempt into the checkpoint (and the best kernel, if it is faster and
        trusted: a flagged attempt is kept, with its flags, but never becomes the best)."""
        if record.error:
            record.error = redact(record.error)
        self.state.checkpoint.slots[record.key] = record
        self.state.checkpoint.pending.pop(record.key, None)
        best = self.state.best
        improved = False
        candidate = record.as_beam_entry()
        if candidate is not None and (best is None or candidate.latency_ms < best.latency_ms):
            # Provisional: a tie with the settled best is re-measured when the iteration ends.
            self.state.best = candidate
            improved = True
        await self.ctx.checkpoints.save_entry(self.ctx.budget, "slot", record.key)
        events = self.ctx.events
        latency = f"{record.latency_ms:.4g} ms" if record.latency_ms is not None else "-"
        events.emit(
            "attempt_profiled",
            record.iteration,
            f"attempt {record.key}: {record.status} {latency}"
            + _against_parent(record)
            + (" (profile reused)" if record.reused_profile else "")
            + (
                f" [untrusted: {', '.join(untrusted_flags(record.flags))}; not a candidate]"
                if record.passed and not record.trusted
                else ""
            ),
        )
        if improved:
            events.emit("best_improved", record.iteration, f"new best: {record.latency_ms:.4g} ms")


def _warm_cpu_peaks(store: KernelStore) -> None:
    """This host's cpu peaks, measured now unless already known (cached in the store)."""
    try:
        PeakSource(store).peaks(host_hardware())
    except PeakMeasurementError as exc:
        # Profiles then say they have no percent of peak, and why.
        log.warning("could not measure this host's peaks: %s", exc)


@dataclass(frozen=True)
class _Kernel:
    """A beam kernel as its iteration's prompts see it."""

    entry: BeamEntry
    solution: Solution
    profile: Evaluation | None
    """Its stored profile on this task and settings (None: not found)."""
    hardware: str
    """The hardware block of its prompts (hardware_block.describe_hardware)."""


def _against_parent(record: AttemptRecord) -> str:
    """', 1.20x [1.10, 1.31] vs parent (same rounds)' or '' when there is no speedup."""
    interval = record.speedup_interval
    if interval is None:
        return ""
    if record.speedup_ci_low is None:
        return f", {interval.estimate:.3g}x vs parent (no interval)"
    high = f"{interval.high:.3g}" if interval.high != float("inf") else "inf"
    how = (record.speedup_measured or "").replace("_", " ")
    return f", {interval.estimate:.3g}x [{interval.low:.3g}, {high}] vs parent ({how})"
