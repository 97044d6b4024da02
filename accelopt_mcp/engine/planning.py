"""The plans of one beam kernel in one iteration, and the chains they start.

Each beam kernel gets cfg.plans plan samples: in "distinct" mode one planner call asked for
all the missing ones at once (told to differ), in "independent" mode one call per sample. A
sample's attempts (attempts.py) start as soon as its plan is there; a sample left without a
plan records its attempts as failed. Plans are checkpointed as they come, so a resumed
iteration asks only for the ones it lacks."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

from accelopt_mcp.engine.attempts import Attempts, Job
from accelopt_mcp.engine.checkpoint import FINAL_SLOT_STATES
from accelopt_mcp.engine.history import lineage_history
from accelopt_mcp.engine.loop_parts import BeamKernel, LoopScope, Slot
from accelopt_mcp.engine.planner import propose_plan, propose_plans
from accelopt_mcp.engine.prompts import planner_messages
from accelopt_mcp.engine.selection import LLM_FAILED, NO_PLAN, BeamEntry
from accelopt_mcp.llm import BudgetExceeded, ChatMessage, LlmCallFailed, MalformedReply
from accelopt_mcp.store.base import ExperienceRecord


@dataclass(frozen=True)
class _PlannerView:
    """What the planner is shown for one beam kernel: the kernel, the iteration's memory
    items and the kernel's lineage history."""

    kernel: BeamKernel
    memory: list[ExperienceRecord]
    history: str


class _PlansDue:
    """Counts a beam kernel's planner calls still out ("independent" mode); sets `event` when
    the last one is back, so the next kernel's planner sees these plans."""

    def __init__(self, left: int) -> None:
        self.left = left
        self.event: asyncio.Event | None = None

    def one_done(self) -> None:
        self.left -= 1
        if self.left <= 0 and self.event is not None:
            self.event.set()


class Planning:
    """The plan samples of a started run's beam kernels, each followed by its attempts."""

    def __init__(self, scope: LoopScope, attempts: Attempts) -> None:
        self.scope = scope
        self.attempts = attempts
        self._planned: dict[tuple[int, int], asyncio.Event] = {}

    def _planned_event(self, iteration: int, b: int) -> asyncio.Event:
        """Set once beam kernel b of `iteration` has every plan it will get this time."""
        return self._planned.setdefault((iteration, b), asyncio.Event())

    async def beam_kernel(
        self, iteration: int, b: int, entry: BeamEntry, memory: list[ExperienceRecord]
    ) -> None:
        """Everything an iteration does for one beam kernel: its N plans (those the checkpoint
        does not have), then the K attempts of each plan that have not finished yet.

        Its planner calls wait until the beam kernels before it have their plans, so that
        each planner is shown the plans given to the others (planner_messages round_plans);
        the earlier kernels' attempts run meanwhile."""
        try:
            await self._beam_kernel(iteration, b, entry, memory)
        finally:
            # However it ended (no work, a stop, an error), no later kernel waits on it.
            self._planned_event(iteration, b).set()

    async def _beam_kernel(
        self, iteration: int, b: int, entry: BeamEntry, memory: list[ExperienceRecord]
    ) -> None:
        scope = self.scope
        ctx, checkpoint = scope.ctx, scope.state.checkpoint
        cfg = ctx.cfg
        needed = {
            p: [
                a
                for a in range(cfg.attempts)
                if (slot := checkpoint.slots.get(Slot(iteration, b, p, a).key)) is None
                or slot.status not in FINAL_SLOT_STATES
            ]
            for p in range(cfg.plans)
        }
        needed = {p: attempts for p, attempts in needed.items() if attempts}
        if not needed or scope.control.stopping:
            return
        parent = await ctx.profiles.solution(entry.solution_id)
        profile = await ctx.profiles.stored_evaluation(entry.solution_id)
        kernel = BeamKernel(
            iteration=iteration,
            b=b,
            entry=entry,
            solution=parent,
            profile=profile,
            hardware=ctx.hardware,
        )
        plans = checkpoint.plans.setdefault(kernel.plans_key, [None] * cfg.plans)
        missing = [p for p in needed if plans[p] is None]
        view = _PlannerView(
            kernel,
            memory,
            lineage_history(
                entry.solution_id,
                checkpoint.slots.values(),
                checkpoint.plans,
                before_iteration=iteration,
                ties=checkpoint.ties,
            ),
        )
        if missing:
            for earlier in range(b):
                await self._planned_event(iteration, earlier).wait()
        if missing and cfg.plan_mode == "distinct":
            planned = await self._distinct_plans(view, missing)
            self._planned_event(iteration, b).set()
            if not planned:
                return
            needed = {p: attempts for p, attempts in needed.items() if plans[p] is not None}
        due = _PlansDue(len(missing) if cfg.plan_mode == "independent" else 0)
        if due.left == 0:
            self._planned_event(iteration, b).set()
        else:
            due.event = self._planned_event(iteration, b)
        await asyncio.gather(
            *(self._plan_chain(view, p, attempts, due) for p, attempts in needed.items())
        )

    async def _distinct_plans(self, view: _PlannerView, missing: list[int]) -> bool:
        """One planner call for the kernel's missing plans, asked to differ from each other
        (and from the plans it already has); samples left without a plan are recorded as
        failed attempts. False when the run must stop (budget)."""
        scope, kernel = self.scope, view.kernel
        ctx, checkpoint = scope.ctx, scope.state.checkpoint
        plans = checkpoint.plans[kernel.plans_key]
        messages = self._planner_messages(view, kernel.plans_key, n_plans=len(missing))
        error: str | None = None
        status = NO_PLAN
        try:
            made = await propose_plans(
                ctx.client,
                messages,
                len(missing),
                known=[plan for plan in plans if plan],
                purpose=f"plans {kernel.plans_key}",
            )
        except BudgetExceeded as exc:
            scope.control.call_refused(exc)
            return False
        except (LlmCallFailed, MalformedReply) as exc:
            made, error = [], f"planner: {exc}"
            status = self._planner_failed(exc)
        else:
            scope.health.succeeded()
        for p, plan in zip(missing, made, strict=False):
            plans[p] = plan
        await self._save_plans(kernel)
        short = [p for p in missing if plans[p] is None]
        reason = error or (
            f"planner: gave {len(made)} of the {len(missing)} distinct plans asked for"
        )
        for p in short:
            for a in range(ctx.cfg.attempts):
                slot = kernel.slot(p, a)
                done = checkpoint.slots.get(slot.key)
                if done is None or done.status not in FINAL_SLOT_STATES:
                    await self.attempts.record(slot.record(kernel.entry, status, error=reason))
        return True

    async def _plan_chain(
        self, view: _PlannerView, p: int, attempts: list[int], due: _PlansDue
    ) -> None:
        """One plan sample: its plan (in "independent" mode, one planner call of its own
        unless the checkpoint has it), then its unfinished attempts."""
        scope, kernel = self.scope, view.kernel
        plans = scope.state.checkpoint.plans[kernel.plans_key]
        plan = plans[p]
        if plan is None:
            try:
                plan = await self._one_plan(view, p, attempts)
            finally:
                due.one_done()
            if plan is None:
                return
        await asyncio.gather(
            *(self.attempts.run(Job(kernel.slot(p, a), kernel, plan)) for a in attempts)
        )

    async def _one_plan(self, view: _PlannerView, p: int, attempts: list[int]) -> str | None:
        """Sample p's plan from its own planner call ("independent" mode), checkpointed; None
        when there is none (its attempts are recorded as failed, or the budget refused)."""
        scope, kernel = self.scope, view.kernel
        plans = scope.state.checkpoint.plans[kernel.plans_key]
        sample = f"{kernel.plans_key}/{p}"
        messages = self._planner_messages(view, sample)
        try:
            plan, _ = await propose_plan(scope.ctx.client, messages, purpose=f"plan {sample}")
        except BudgetExceeded as exc:
            scope.control.call_refused(exc)
            return None
        except (LlmCallFailed, MalformedReply) as exc:
            status = LLM_FAILED if isinstance(exc, LlmCallFailed) else NO_PLAN
            for a in attempts:
                await self.attempts.record(
                    kernel.slot(p, a).record(kernel.entry, status, error=f"planner: {exc}")
                )
            self._planner_failed(exc)
            return None
        scope.health.succeeded()
        plans[p] = plan
        await self._save_plans(kernel)
        return plan

    def _planner_messages(
        self, view: _PlannerView, sample: str, n_plans: int = 1
    ) -> list[ChatMessage]:
        """The planner's prompt for a beam kernel; `sample` ("iteration/beam[/plan]") seeds
        the order its counters are shown in."""
        ctx, kernel = self.scope.ctx, view.kernel
        return planner_messages(
            ctx.family,
            ctx.task,
            kernel.solution,
            kernel.profile,
            view.memory,
            random.Random(f"{ctx.cfg.shuffle_seed}/{sample}"),
            hardware=kernel.hardware,
            history=view.history,
            n_plans=n_plans,
            contract=ctx.contract,
            round_plans=self._round_plans(kernel),
        )

    def _round_plans(self, kernel: BeamKernel) -> list[str]:
        """The plans already given to the iteration's other beam kernels (in beam order), as
        the checkpoint holds them when the call is made: the planner can take another route."""
        plans = self.scope.state.checkpoint.plans
        given = []
        for b in range(self.scope.ctx.cfg.beam):
            if b == kernel.b:
                continue
            given += [plan for plan in plans.get(f"{kernel.iteration}/{b}", []) if plan]
        return given

    def _planner_failed(self, exc: LlmCallFailed | MalformedReply) -> str:
        """Count a planner call that gave no plan; the status of the samples left without
        one: LLM_FAILED when the call failed (perhaps the stop of the run), NO_PLAN when the
        service answered, if not with a plan."""
        if isinstance(exc, LlmCallFailed):
            self.scope.llm_failed("planner", exc)
            return LLM_FAILED
        self.scope.health.succeeded()
        return NO_PLAN

    async def _save_plans(self, kernel: BeamKernel) -> None:
        ctx = self.scope.ctx
        await ctx.checkpoints.save_entry(ctx.budget, "plans", kernel.plans_key)
