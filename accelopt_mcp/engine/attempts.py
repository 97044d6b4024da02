"""One attempt of the loop, from the executor's reply to its record: the kernel asked for,
stored (and marked pending, so a crash loses nothing), profiled beside its parent, repaired
while it fails in a way the executor can fix, and recorded in the checkpoint (the run's best
kernel updated when it is faster and trusted)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from accelopt_mcp.engine.checkpoint import PendingAttempt
from accelopt_mcp.engine.executor import ExecutorOutcome, derived_solution, implement_plan
from accelopt_mcp.engine.loop_parts import BeamKernel, LoopScope, Slot
from accelopt_mcp.engine.prompts import REPAIRABLE_STATUSES, executor_messages, repair_messages
from accelopt_mcp.engine.selection import (
    LLM_FAILED,
    NO_CODE,
    AttemptRecord,
    measured_fields,
    parent_speedup_fields,
)
from accelopt_mcp.hashing import solution_hash
from accelopt_mcp.llm import BudgetExceeded, ChatMessage, LlmCallFailed
from accelopt_mcp.models import Evaluation, Solution
from accelopt_mcp.models.evaluation import untrusted_flags
from accelopt_mcp.redaction import redact
from accelopt_mcp.store.base import ConflictError


@dataclass(frozen=True)
class Job:
    """An attempt's fixed inputs: its slot, the beam kernel it starts from and its plan."""

    slot: Slot
    kernel: BeamKernel
    plan: str


@dataclass(frozen=True)
class _Candidate:
    """The kernel a slot is about to profile: stored (pending) and its source."""

    pending: PendingAttempt
    solution: Solution


class Attempts:
    """The attempts of a started run (and the records of slots that never got one)."""

    def __init__(self, scope: LoopScope) -> None:
        self.scope = scope

    async def run(self, job: Job) -> None:
        """One executor call for the plan; its kernel stored, profiled and, when it fails,
        repaired (cfg.repair_tries). A kernel stored before the run stopped
        (checkpoint.pending) is taken up where it was, without asking again."""
        scope = self.scope
        ctx, slot, kernel = scope.ctx, job.slot, job.kernel
        entry, parent = kernel.entry, kernel.solution
        if scope.control.stopping:
            return
        key = slot.key
        pending = scope.state.checkpoint.pending.get(key)
        if pending is not None:
            resumed = await self._stored_kernel(pending, key)
            if resumed is not None:
                solution, ours = resumed
                await self._profile_and_repair(job, _Candidate(pending, solution), ours=ours)
                return
        messages = executor_messages(
            ctx.family,
            ctx.task,
            parent,
            job.plan,
            hardware=kernel.hardware,
            profile=kernel.profile,
            contract=ctx.contract,
        )
        outcome = await self._ask_executor(job, messages, f"attempt {key}")
        if outcome is None:
            return
        if isinstance(outcome, LlmCallFailed):
            # The record is written all the same (CheckpointWriter._submit).
            await self.record(slot.record(entry, LLM_FAILED, error=str(outcome)))
            return
        meta = slot.meta(ctx, job.plan)
        name = slot.kernel_name(ctx)
        if outcome.source is None:
            # The reply itself is the record of what went wrong.
            failed = derived_solution(parent, outcome.reply_text or "(empty reply)", name)
            sid = await ctx.profiles.store_solution(
                failed, entry.solution_id, {**meta, "error": outcome.error}
            )
            await self.record(slot.record(entry, NO_CODE, error=outcome.error, solution_id=sid))
            return
        candidate = derived_solution(parent, outcome.source, name)
        try:
            sid = await ctx.profiles.store_solution(candidate, entry.solution_id, meta)
        except ConflictError as exc:
            await self.record(slot.record(entry, "COMPILE_ERROR", error=str(exc)))
            return
        # From here a crash loses nothing: a resumed run profiles this kernel (or takes its
        # stored profile) rather than asking the executor for another one.
        stored = PendingAttempt(solution_id=sid, source_hash=solution_hash(candidate))
        await self._set_pending(key, stored)
        await self._profile_and_repair(job, _Candidate(stored, candidate))

    async def _ask_executor(
        self, job: Job, messages: list[ChatMessage], purpose: str
    ) -> ExecutorOutcome | LlmCallFailed | None:
        """The executor's reply for an attempt or a repair of it (purpose: the ledger's
        label); None when the budget refused the call, the error when the call failed. Either
        is told to the loop here: the stop (if this failure is one too many) comes first, so
        that no queued call is sent meanwhile."""
        scope = self.scope
        try:
            outcome = await implement_plan(
                scope.ctx.client,
                messages,
                scope.ctx.family,
                entry_symbol=job.kernel.solution.entry_symbol,
                purpose=purpose,
            )
        except BudgetExceeded as exc:
            scope.control.call_refused(exc)
            return None
        except LlmCallFailed as exc:
            scope.llm_failed("executor", exc)
            return exc
        scope.health.succeeded()
        return outcome

    async def _set_pending(self, key: str, pending: PendingAttempt) -> None:
        ctx = self.scope.ctx
        self.scope.state.checkpoint.pending[key] = pending
        await ctx.checkpoints.save_entry(ctx.budget, "pending", key)

    async def _stored_kernel(
        self, pending: PendingAttempt, key: str
    ) -> tuple[Solution, bool] | None:
        """The pending attempt's kernel from the store, and whether this very slot stored it
        (then a stored profile of it was taken beside this slot's parent); None when it is
        gone (the executor is asked again)."""
        ctx = self.scope.ctx
        stored = await asyncio.to_thread(ctx.profiles.store.get_solution, pending.solution_id)
        if stored is None:
            return None
        meta = stored.evolve_metadata
        where = (meta.get("iteration"), meta.get("beam_index"))
        which = (meta.get("plan_index"), meta.get("attempt_index"))
        ours = meta.get("run_id") == ctx.run_id and ("/".join(map(str, (*where, *which))) == key)
        return stored.solution, ours

    async def _profile_and_repair(
        self, job: Job, candidate: _Candidate, *, ours: bool = False
    ) -> None:
        """Profile the slot's stored kernel beside its parent; while it fails in a way the
        executor can fix (prompts.REPAIRABLE_STATUSES) and repair tries are left, show the
        executor its kernel and the error, store the fix (its parent: the failed kernel) and
        profile that. The slot records the last kernel tried. ours: a resumed slot's own
        kernel (its stored profile's parent comparison holds)."""
        scope = self.scope
        ctx = scope.ctx
        entry = job.kernel.entry
        tries = candidate.pending.repairs
        while True:
            profiled = await ctx.profiles.profile(
                candidate.pending.solution_id,
                candidate.solution,
                entry.solution_id,
                job.kernel.solution,
                stored_beside_parent=ours,
            )
            evaluation = profiled.evaluation
            status = evaluation.status.value
            if (
                status in REPAIRABLE_STATUSES
                and candidate.pending.repairs < ctx.cfg.repair_tries
                and not scope.control.stopping
            ):
                fixed, asked = await self._repair(job, candidate, evaluation)
                tries += asked
                if fixed is not None:
                    candidate = fixed
                    ours = False
                    await self._set_pending(job.slot.key, candidate.pending)
                    continue
            break
        latency = evaluation.performance.latency_ms if evaluation.performance else None
        record = job.slot.record(
            entry,
            status,
            error=None if evaluation.passed else evaluation.log[-500:],
            solution_id=profiled.solution_id,
            source_hash=profiled.source_hash,
            latency_ms=latency,
            reused_profile=profiled.reused,
            flags=list(evaluation.flags),
            repairs=tries,
            repaired_from=list(candidate.pending.repaired_from),
            **measured_fields(evaluation),
            **parent_speedup_fields(evaluation, entry, profiled.parent_comparison),
        )
        await self.record(record)

    async def _repair(
        self, job: Job, failed: _Candidate, evaluation: Evaluation
    ) -> tuple[_Candidate | None, bool]:
        """One repair try: (the fixed kernel, stored with the failed one as its parent, or
        None when there is none: the call failed, the budget refused it, the reply held no
        code or the same source, and the failed kernel stands as the attempt's result;
        whether the executor was asked)."""
        scope = self.scope
        ctx, kernel, key = scope.ctx, job.kernel, job.slot.key
        number = failed.pending.repairs + 1
        messages = repair_messages(
            ctx.family,
            ctx.task,
            kernel.solution,
            job.plan,
            failed.solution.entry_source.content,
            evaluation.status.value,
            evaluation.log,
            hardware=kernel.hardware,
            profile=kernel.profile,
            contract=ctx.contract,
        )
        outcome = await self._ask_executor(job, messages, f"repair {key}#{number}")
        if not isinstance(outcome, ExecutorOutcome):
            return None, outcome is not None
        if outcome.source is None:
            return None, True
        fixed = derived_solution(
            kernel.solution, outcome.source, job.slot.kernel_name(ctx, repair=number)
        )
        source_hash = solution_hash(fixed)
        if source_hash == failed.pending.source_hash:
            return None, True
        meta = {
            **job.slot.meta(ctx, job.plan),
            "repair": number,
            "repair_of": failed.pending.solution_id,
            "repaired_status": evaluation.status.value,
        }
        try:
            sid = await ctx.profiles.store_solution(fixed, failed.pending.solution_id, meta)
        except ConflictError:
            return None, True
        ctx.events.emit(
            "attempt_repaired",
            job.slot.iteration,
            f"attempt {key}: {evaluation.status.value}; repair {number} of "
            f"{ctx.cfg.repair_tries} stored as {sid[:8]}",
        )
        pending = PendingAttempt(
            solution_id=sid,
            source_hash=source_hash,
            repairs=number,
            repaired_from=[*failed.pending.repaired_from, failed.pending.solution_id],
        )
        return _Candidate(pending, fixed), True

    async def record(self, record: AttemptRecord) -> None:
        """A finished attempt into the checkpoint (and the best kernel, if it is faster and
        trusted: a flagged attempt is kept, with its flags, but never becomes the best)."""
        ctx, state = self.scope.ctx, self.scope.state
        if record.error:
            record.error = redact(record.error)
        state.checkpoint.slots[record.key] = record
        state.checkpoint.pending.pop(record.key, None)
        best = state.best
        improved = False
        candidate = record.as_beam_entry()
        if candidate is not None and (best is None or candidate.latency_ms < best.latency_ms):
            # Provisional: a tie with the settled best is re-measured when the iteration ends.
            state.best = candidate
            improved = True
        await ctx.checkpoints.save_entry(ctx.budget, "slot", record.key)
        events = ctx.events
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
