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

This module is the run's lifecycle (claim, lease, setup, starting point, finish); the loop
itself is iterations.py (one iteration, its ties), planning.py (a beam kernel's plans) and
attempts.py (one attempt: executor, profile, repair, record), sharing loop_parts.py's values.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelopt_mcp.backends.placement import open_pool
from accelopt_mcp.backends.pool import EvaluationPool
from accelopt_mcp.backends.registry import backend_class
from accelopt_mcp.engine.checkpoint import (
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
from accelopt_mcp.engine.contract import contract_lines
from accelopt_mcp.engine.events import EventSink
from accelopt_mcp.engine.hardware_block import describe_hardware, uses_torch
from accelopt_mcp.engine.iterations import Iterations
from accelopt_mcp.engine.live_run import LiveRun
from accelopt_mcp.engine.llm_health import LlmHealth
from accelopt_mcp.engine.memory import OptimizationMemory
from accelopt_mcp.engine.profile_cache import ProfileCache
from accelopt_mcp.engine.prompts import (
    family_for,
)
from accelopt_mcp.engine.run_control import RunControl
from accelopt_mcp.engine.run_events import RunEvents
from accelopt_mcp.engine.runs import load_run
from accelopt_mcp.engine.selection import (
    BeamEntry,
    measured_fields,
)
from accelopt_mcp.engine.winner import write_winner
from accelopt_mcp.llm import (
    ROLES,
    Budget,
    LlmClient,
    RoleConfigs,
    load_role_configs,
)
from accelopt_mcp.llm.key_destinations import require_trusted_destinations
from accelopt_mcp.models import LlmCallIn
from accelopt_mcp.store.base import (
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


@dataclass(frozen=True)
class _Opening:
    """What the steps that open a run (its starting point, its prompt texts) work with; each
    step saves the checkpoint under the run's budget once it has set its part."""

    spec: RunSpec
    state: LiveRun
    writer: CheckpointWriter
    budget: Budget
    profiles: ProfileCache

    async def save(self, **fields: Any) -> None:
        await self.writer.save(self.budget, **fields)


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
        check_key_destinations: bool = False,
    ) -> None:
        """statuses: run only a run in one of these states (checked under the run's lock), else
        raise RunNotRunnable; None: any run not yet completed. handed_over_by: the job
        manager that queued the run for this worker (claim.claim). check_key_destinations:
        the run's model config was named by an MCP client: refuse it (the run fails) where it
        would send a key of this environment to an endpoint no operator's config pairs with
        it, checked on the very configs the run then uses."""
        self.store = store
        self.run_id = run_id
        self.on_event = on_event
        self.output_dir = output_dir
        self._given_pool = pool
        self._role_configs = role_configs
        self._statuses = statuses
        self._handed_over_by = handed_over_by
        self._check_key_destinations = check_key_destinations
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
            if self._check_key_destinations:
                # Checked before (start, take-over) on the file; again here on what was read
                # from it, so that a file rewritten since then sends nothing unchecked.
                require_trusted_destinations(configs, f"model config {cfg.models_config}")
            models = {role: configs.for_role(role).model for role in ROLES}
            if opened.local:
                await asyncio.to_thread(factory.before_run, self.store, spec.task)
            profiles = ProfileCache(
                self.store, spec.task, cfg.benchmark, opened, factory, checkpoint.hardware
            )
            async with LlmClient(
                configs, ledger=self._ledger, run_id=self.run_id, budget=budget
            ) as client:
                opening = _Opening(spec, state, writer, budget, profiles)
                memory = await self._start(opening)
                hardware_text, contract = await self._prompt_texts(
                    opening, opened.measuring_conditions()
                )
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
                    hardware=hardware_text,
                    contract=contract,
                )
                ctx.events.emit("run_started", checkpoint.completed_iteration, "run started")
                health = LlmHealth(cfg.max_consecutive_llm_failures)
                await Iterations(ctx, state, self._control, health).run()
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

    async def _start(self, opening: _Opening) -> OptimizationMemory:
        """Choose the run's starting point once (its initial kernel, which must pass, and the
        memory items it starts from); return the run's memory. Sets the best kernel so far."""
        state = opening.state
        checkpoint = state.checkpoint
        cfg = opening.spec.optimize
        if checkpoint.initial is None:
            meta = {"run_id": self.run_id, "iteration": 0, "role": "initial"}
            initial = await opening.profiles.store_and_profile(
                opening.spec.initial_solution, None, meta
            )
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
            await opening.save(initial_solution_id=initial.solution_id)
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
            await opening.save()
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

    async def _prompt_texts(
        self, opening: _Opening, conditions: dict[str, int | None]
    ) -> tuple[str, str]:
        """The run's hardware block and contract, built once (from the initial kernel's
        evaluation, with the cores the pool gives each evaluation) and kept in the checkpoint:
        every prompt of the run, resumed or not, shows the same two texts."""
        checkpoint, spec = opening.state.checkpoint, opening.spec
        if checkpoint.prompt_hardware is None or checkpoint.prompt_contract is None:
            cfg = spec.optimize
            family = family_for(cfg.backend)
            initial = checkpoint.initial
            evaluation = (
                await opening.profiles.stored_evaluation(initial.solution_id) if initial else None
            )
            environment = evaluation.environment if evaluation is not None else None
            cores = conditions.get("cores")
            checkpoint.prompt_hardware = describe_hardware(family, environment, cores=cores)
            checkpoint.prompt_contract = "\n".join(
                contract_lines(family, cfg.benchmark, cores=cores, uses_torch=uses_torch(spec.task))
            )
            await opening.save()
        return checkpoint.prompt_hardware, checkpoint.prompt_contract

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
