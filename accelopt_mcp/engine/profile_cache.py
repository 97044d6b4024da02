"""Storing and profiling a run's kernels, each distinct source profiled once.

A source already profiled on this task, benchmark settings and hardware reuses its stored
profile; one being profiled right now is waited for rather than profiled twice. Solutions are
kept in memory by id, since the planner and summarizer read the same few again and again.

Every evaluation a backend returns has its log redacted (accelopt_mcp.redaction) here, before
the engine stores it, shows it to the planner or copies it into an attempt's error; so is the
error text stored in a failed attempt's evolve_metadata.
"""

from __future__ import annotations

import asyncio
from typing import Any, NamedTuple

from accelopt_mcp.backends.pool import BackendFactory, DevicePool
from accelopt_mcp.hashing import benchmark_config_hash, solution_hash
from accelopt_mcp.models import BenchmarkConfig, Evaluation, Solution, Task
from accelopt_mcp.redaction import redact
from accelopt_mcp.store.base import ConflictError, KernelStore


class ProfiledSolution(NamedTuple):
    solution_id: str
    source_hash: str
    evaluation: Evaluation
    reused: bool
    """Whether a known profile was reused rather than profiled anew."""


class ProfileCache:
    """One run's kernels on one task, benchmark settings and hardware. Store calls run in
    threads: stores are synchronous, and a round trip must not stall the event loop."""

    def __init__(
        self,
        store: KernelStore,
        task: Task,
        benchmark: BenchmarkConfig,
        pool: DevicePool,
        backend_factory: BackendFactory,
        hardware: str | None,
    ) -> None:
        """hardware: what profiles are measured on; None: stored profiles are never reused."""
        self.store = store
        self.task = task
        self.benchmark = benchmark
        self.pool = pool
        self.backend_factory = backend_factory
        self.hardware = hardware
        self.perf = benchmark.perf_fields()
        self.perf_hash = benchmark_config_hash(self.perf)
        self._inflight: dict[str, asyncio.Future[Evaluation]] = {}
        self._solutions: dict[str, Solution] = {}

    async def store_solution(
        self, solution: Solution, parent_id: str | None, meta: dict[str, Any]
    ) -> str:
        """The solution's id, stored now unless the same source already is. An `error` text in
        meta is stored redacted."""
        if isinstance(meta.get("error"), str):
            meta = {**meta, "error": redact(meta["error"])}
        found = await asyncio.to_thread(self.store.find_solution, solution_hash(solution))
        if found is not None:
            if found.definition_name != solution.definition:
                raise ConflictError(
                    f"this source is already stored for definition {found.definition_name!r}"
                )
            return found.id
        return await asyncio.to_thread(
            self.store.upsert_solution, solution, parent_id=parent_id, evolve_metadata=meta
        )

    async def store_and_profile(
        self, solution: Solution, parent_id: str | None, meta: dict[str, Any]
    ) -> ProfiledSolution:
        source_hash = solution_hash(solution)
        sid = await self.store_solution(solution, parent_id, meta)
        self._solutions.setdefault(sid, solution)
        pending = self._inflight.get(source_hash)
        if pending is not None:
            return ProfiledSolution(sid, source_hash, await asyncio.shield(pending), True)
        stored = await self.stored_evaluation(sid)
        if stored is not None:
            return ProfiledSolution(sid, source_hash, stored, True)
        future: asyncio.Future[Evaluation] = asyncio.get_running_loop().create_future()
        self._inflight[source_hash] = future
        try:
            pooled = await self.evaluate(solution)
            await asyncio.to_thread(
                self.store.upsert_profile, self.task.workload.uuid, sid, pooled, self.perf
            )
        except BaseException:
            self._inflight.pop(source_hash, None)
            future.cancel()
            raise
        future.set_result(pooled)
        return ProfiledSolution(sid, source_hash, pooled, False)

    async def evaluate(self, solution: Solution) -> Evaluation:
        """Profile the solution on one of the pool's devices (no cache, nothing stored); its
        log comes back redacted."""
        result = await self.pool.evaluate(self.backend_factory, self.task, solution, self.benchmark)
        return result.evaluation.redacted()

    async def stored_evaluation(self, solution_id: str) -> Evaluation | None:
        """A stored profile of this solution on this task, settings and hardware."""
        return await asyncio.to_thread(self._find_stored_evaluation, solution_id)

    def _find_stored_evaluation(self, solution_id: str) -> Evaluation | None:
        if self.hardware is None:
            return None
        for profile in self.store.list_profiles(
            solution_id=solution_id, workload_uuid=self.task.workload.uuid
        ):
            if (
                profile.benchmark_config_hash == self.perf_hash
                and profile.eval_hardware == self.hardware
            ):
                return profile.evaluation
        return None

    async def solution(self, solution_id: str) -> Solution:
        if solution_id not in self._solutions:
            stored = await asyncio.to_thread(self.store.get_solution, solution_id)
            if stored is None:
                raise RuntimeError(f"solution {solution_id} vanished from the store")
            self._solutions[solution_id] = stored.solution
        return self._solutions[solution_id]
