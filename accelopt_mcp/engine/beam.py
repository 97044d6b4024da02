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
import random
import signal
import time
from pathlib import Path
from typing import Any

from accelopt_mcp.backends.pool import DevicePool
from accelopt_mcp.backends.registry import backend_class
from accelopt_mcp.engine.checkpoint import FINAL_SLOT_STATES, IterationSummary, RunSpec
from accelopt_mcp.engine.checkpoint_writer import CheckpointWriter
from accelopt_mcp.engine.claim import (
    RunBusy,
    RunNotRunnable,
    ensure_runnable,
    record_worker,
    worker_lock,
)
from accelopt_mcp.engine.context import RunContext, make_budget
from accelopt_mcp.engine.events import EventSink
from accelopt_mcp.engine.executor import derived_solution, implement_plan
from accelopt_mcp.engine.experience import summarize_pairs
from accelopt_mcp.engine.live_run import LiveRun
from accelopt_mcp.engine.memory import OptimizationMemory
from accelopt_mcp.engine.planner import propose_plan
from accelopt_mcp.engine.profile_cache import ProfileCache
from accelopt_mcp.engine.prompts import executor_messages, family_for, planner_messages
from accelopt_mcp.engine.run_control import RunControl
from accelopt_mcp.engine.run_events import RunEvents
from accelopt_mcp.engine.runs import load_run
from accelopt_mcp.engine.selection import (
    LLM_FAILED,
    NO_CODE,
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
from accelopt_mcp.llm import (
    Budget,
    BudgetExceeded,
    LlmCallFailed,
    LlmClient,
    MalformedReply,
    RoleConfigs,
    load_role_configs,
)
from accelopt_mcp.models import LlmCallIn, Solution
from accelopt_mcp.models.evaluation import untrusted_flags
from accelopt_mcp.redaction import redact
from accelopt_mcp.store.base import ConflictError, ExperienceRecord, KernelStore, RunRecord

__all__ = ["BeamSearch", "InitialKernelFailed", "RunBusy", "RunNotRunnable"]


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
        await asyncio.to_thread(load_run, self.store, self.run_id)
        with worker_lock(self.output_dir, self.run_id):
            return await self._run()

    async def _run(self) -> RunRecord:
        run, spec, checkpoint = await asyncio.to_thread(load_run, self.store, self.run_id)
        ensure_runnable(run, checkpoint, self._statuses)
        if run.status == "completed":
            return run
        cfg = spec.optimize
        family = family_for(cfg.backend)
        record_worker(checkpoint)
        checkpoint.start_clock()
        checkpoint.stop_reason = None
        state = LiveRun(checkpoint)
        writer = CheckpointWriter(self.store, self.run_id, spec, state)
        budget: Budget | None = None
        pool: DevicePool | None = None
        # From here on any failure is recorded on the run, so that no run is left "running"
        # (and resumed again and again) because of a setting that can never work.
        try:
            factory = backend_class(cfg.backend)
            if checkpoint.hardware is None:
                availability = await asyncio.to_thread(lambda: factory().availability())
                checkpoint.hardware = availability.hardware
            budget = await asyncio.to_thread(
                make_budget, self.store, self.run_id, cfg, checkpoint.elapsed_before_s
            )
            await writer.save(budget, status="running", error="")
            configs = self._role_configs or load_role_configs(
                Path(cfg.models_config) if cfg.models_config else None
            )
            models = {
                role: configs.for_role(role).model for role in ("planner", "executor", "summarizer")
            }
            pool = self._given_pool or DevicePool.for_backend(factory.info, cfg.workers)
            profiles = ProfileCache(
                self.store, spec.task, cfg.benchmark, pool, factory, checkpoint.hardware
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
                    events=RunEvents(self.on_event, self.run_id, spec, state, budget),
                )
                ctx.events.emit("run_started", checkpoint.completed_iteration, "run started")
                await _Iterations(ctx, state, self._control).run()
        except BaseException as exc:
            self._close_pool(pool)
            await writer.record_failure(exc, budget)
            raise
        self._close_pool(pool)
        return await self._finish(ctx, state)

    def _ledger(self, call: LlmCallIn) -> None:
        self.store.add_llm_call(call)

    def _close_pool(self, pool: DevicePool | None) -> None:
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

    def __init__(self, ctx: RunContext, state: LiveRun, control: RunControl) -> None:
        self.ctx = ctx
        self.state = state
        self.control = control

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
        memory = await asyncio.to_thread(ctx.memory.working_set)
        ctx.events.emit(
            "iteration_started",
            iteration,
            f"iteration {iteration}/{cfg.iterations}: {len(beam)} beam kernel(s), "
            f"{len(memory)} memory item(s)",
        )
        chains = [
            self.control.spawn(self._chain(iteration, b, entry, p, memory))
            for b, entry in enumerate(beam)
            for p in range(cfg.plans)
        ]
        results = await asyncio.gather(*chains, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                raise result
        if self.control.stopping:
            return
        attempts = checkpoint.slots_of(iteration)
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

    async def _chain(
        self, iteration: int, b: int, entry: BeamEntry, p: int, memory: list[ExperienceRecord]
    ) -> None:
        """One plan sample for one beam kernel: the plan (unless the checkpoint has it), then
        its K attempts that have not finished yet."""
        ctx, checkpoint = self.ctx, self.state.checkpoint
        cfg = ctx.cfg
        needed = [
            a
            for a in range(cfg.attempts)
            if (slot := checkpoint.slots.get(slot_key(iteration, b, p, a))) is None
            or slot.status not in FINAL_SLOT_STATES
        ]
        if not needed or self.control.stopping:
            return
        key = f"{iteration}/{b}"
        plans = checkpoint.plans.setdefault(key, [None] * cfg.plans)
        plan = plans[p]
        parent = await ctx.profiles.solution(entry.solution_id)
        if plan is None:
            profile = await ctx.profiles.stored_evaluation(entry.solution_id)
            rng = random.Random(f"{cfg.shuffle_seed}/{iteration}/{b}/{p}")
            messages = planner_messages(ctx.family, ctx.task, parent, profile, memory, rng)
            try:
                plan, _ = await propose_plan(ctx.client, messages)
            except BudgetExceeded as exc:
                self.control.call_refused(exc)
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
        """One executor call for the plan; its kernel stored and profiled."""
        ctx = self.ctx
        if self.control.stopping:
            return
        messages = executor_messages(ctx.family, ctx.task, parent, plan)
        try:
            outcome = await implement_plan(ctx.client, messages, ctx.family)
        except BudgetExceeded as exc:
            self.control.call_refused(exc)
            return
        except LlmCallFailed as exc:
            await self._record(self._slot(iteration, b, p, a, entry, LLM_FAILED, error=str(exc)))
            return
        meta = {
            "run_id": ctx.run_id,
            "iteration": iteration,
            "beam_index": b,
            "plan_index": p,
            "plan": plan,
            "attempt_index": a,
            "models": ctx.models,
        }
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
            profiled = await ctx.profiles.store_and_profile(
                candidate, entry.solution_id, meta, parent=parent
            )
        except ConflictError as exc:
            await self._record(
                self._slot(iteration, b, p, a, entry, "COMPILE_ERROR", error=str(exc))
            )
            return
        evaluation = profiled.evaluation
        latency = evaluation.performance.latency_ms if evaluation.performance else None
        record = self._slot(
            iteration,
            b,
            p,
            a,
            entry,
            evaluation.status.value,
            error=None if evaluation.passed else evaluation.log[-500:],
            solution_id=profiled.solution_id,
            source_hash=profiled.source_hash,
            latency_ms=latency,
            reused_profile=profiled.reused,
            flags=list(evaluation.flags),
            **measured_fields(evaluation),
            **parent_speedup_fields(evaluation, entry, profiled.parent_comparison),
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
        """A finished attempt into the checkpoint (and the best kernel, if it is faster and
        trusted: a flagged attempt is kept, with its flags, but never becomes the best)."""
        if record.error:
            record.error = redact(record.error)
        self.state.checkpoint.slots[record.key] = record
        best = self.state.best
        improved = False
        candidate = record.as_beam_entry()
        if candidate is not None and (best is None or candidate.latency_ms < best.latency_ms):
            # Provisional: a tie with the settled best is re-measured when the iteration ends.
            self.state.best = candidate
            improved = True
        await self._save()
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
