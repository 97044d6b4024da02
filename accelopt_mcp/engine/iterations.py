"""The iterations of a started run: for each, every beam kernel's plans and attempts
(planning.py, attempts.py) run at once; then the experience pairs are summarized, ties that
decide the next beam are re-measured head-to-head (winner.settle_beam), and the next beam and
the iteration's summary go into the checkpoint. It stops early when asked to, when the
budget runs out, or when every LLM call of an iteration failed."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from accelopt_mcp.engine.attempts import Attempts
from accelopt_mcp.engine.checkpoint import IterationSummary
from accelopt_mcp.engine.context import RunContext
from accelopt_mcp.engine.experience import summarize_pairs
from accelopt_mcp.engine.live_run import LiveRun
from accelopt_mcp.engine.llm_health import LlmHealth
from accelopt_mcp.engine.loop_parts import LoopScope
from accelopt_mcp.engine.planner import plan_diversity
from accelopt_mcp.engine.planning import Planning
from accelopt_mcp.engine.run_control import RunControl
from accelopt_mcp.engine.selection import LLM_FAILED, HeadToHead, TieDecision, select_pairs
from accelopt_mcp.engine.winner import head_to_head, settle_beam


class Iterations:
    """The loop of a started run, from its checkpoint's next iteration to its last, or until
    it is asked to stop (or its budget runs out)."""

    def __init__(
        self, ctx: RunContext, state: LiveRun, control: RunControl, health: LlmHealth
    ) -> None:
        self.ctx = ctx
        self.state = state
        self.control = control
        self.health = health
        scope = LoopScope(ctx, state, control, health)
        self.planning = Planning(scope, Attempts(scope))

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
        # What this iteration's failed calls were, for a message that matches the ledger.
        calls_before = self.health.failed_calls
        requests_before = self.health.failed_requests
        chains = [
            self.control.spawn(self.planning.beam_kernel(iteration, b, entry, memory))
            for b, entry in enumerate(beam)
        ]
        results = await asyncio.gather(*chains, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                raise result
        attempts = checkpoint.slots_of(iteration)
        if attempts and all(a.status == LLM_FAILED for a in attempts):
            # Nothing to select from, and the next iteration would fail the same way.
            # Counted as the ledger counts them: a failed planner call leaves every attempt
            # of its plans without a kernel, and each call may be several requests (retries).
            calls = self.health.failed_calls - calls_before
            requests = self.health.failed_requests - requests_before
            self.control.request_stop(
                "llm_unavailable",
                f"every LLM call of iteration {iteration} failed: {_count(calls, 'call')} "
                f"({_count(requests, 'request')} with retries, each a row of list_llm_calls), "
                f"so none of its {_count(len(attempts), 'attempt')} got a kernel; "
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


def _count(n: int, noun: str) -> str:
    """'1 call', '3 calls'."""
    return f"{n} {noun}" + ("" if n == 1 else "s")
