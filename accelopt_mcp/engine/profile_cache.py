"""Storing and profiling a run's kernels, each distinct source profiled once.

A source already profiled on this task, benchmark settings and hardware reuses its stored
profile; one being profiled right now is waited for rather than profiled twice. Solutions are
kept in memory by id, since the planner and summarizer read the same few again and again.

Every evaluation a backend returns has its log redacted (accelopt_mcp.redaction) here, before
the engine stores it, shows it to the planner or copies it into an attempt's error; so is the
error text stored in a failed attempt's evolve_metadata.

An attempt is timed with its parent as a baseline (label 'parent') when the backend interleaves:
both in the same rounds, so the speedup over the parent has a paired interval in which host
drift cancels (selection.parent_speedup_fields reads it). The cache remembers which parent each
of its fresh profiles was timed beside, so that an attempt reusing that profile gets the same
comparison when its parent is the same one, and none otherwise: a stored profile's comparisons
may be against any kernel that someone once called its parent. Each fresh 'parent' comparison
is stored with that parent's id (Comparison.baseline_id), so that readers of the store
(engine/lineage.py) know which kernel it was.
"""

from __future__ import annotations

import asyncio
from typing import Any, NamedTuple

from accelopt_mcp.backends.base import Baseline
from accelopt_mcp.backends.pool import BackendFactory, EvaluationPool
from accelopt_mcp.engine.selection import PARENT_LABEL
from accelopt_mcp.hashing import benchmark_config_hash, solution_hash
from accelopt_mcp.models import (
    BenchmarkConfig,
    Evaluation,
    EvaluationStatus,
    KernelComparison,
    Solution,
    Task,
)
from accelopt_mcp.models.evaluation import Comparison
from accelopt_mcp.redaction import redact
from accelopt_mcp.store.base import KernelStore
from accelopt_mcp.tasks.inputs import stress_signature


class ProfiledSolution(NamedTuple):
    solution_id: str
    source_hash: str
    evaluation: Evaluation
    reused: bool
    """Whether a known profile was reused rather than profiled anew."""
    parent_comparison: Comparison | None = None
    """The solution against the parent it was stored with (parent_id), timed in the same
    rounds; None when it was not (no parent, a backend that does not interleave, a profile
    this cache did not take beside that parent)."""


class ProfileCache:
    """One run's kernels on one task, benchmark settings and hardware. Store calls run in
    threads: stores are synchronous, and a round trip must not stall the event loop."""

    def __init__(
        self,
        store: KernelStore,
        task: Task,
        benchmark: BenchmarkConfig,
        pool: EvaluationPool,
        backend_factory: BackendFactory,
        hardware: str | None,
        *,
        interleaves: bool | None = None,
    ) -> None:
        """hardware: what profiles are measured on; None: stored profiles are never reused.
        interleaves: whether the backend times baselines in the same rounds (None: the
        factory's `interleaves`, as a Backend class declares it; a factory that is no class
        and says nothing does not)."""
        self.store = store
        self.task = task
        self.benchmark = benchmark
        self.pool = pool
        self.backend_factory = backend_factory
        self.hardware = hardware
        self.interleaves = (
            bool(getattr(backend_factory, "interleaves", False))
            if interleaves is None
            else interleaves
        )
        conditions = pool.measuring_conditions()
        self.perf = benchmark.profile_key(
            workers=conditions["workers"] or 1,
            cores=conditions["cores"],
            # A profile checked before the task declared stress sets never ran them: filed
            # apart, so it is not handed back as PASSED (tasks.inputs.stress_signature).
            stress=stress_signature(task.definition.reference),
        )
        self.perf_hash = benchmark_config_hash(self.perf)
        self._inflight: dict[str, asyncio.Future[Evaluation]] = {}
        self._beside_parent: dict[tuple[str, str], Comparison] = {}
        """(source hash, parent id) -> the 'parent' comparison of this cache's fresh profile."""
        self._solutions: dict[str, Solution] = {}
        self._breakdown_tried: set[str] = set()
        """Sources this cache measured again for a breakdown (_measure_for_breakdown)."""

    async def store_solution(
        self, solution: Solution, parent_id: str | None, meta: dict[str, Any]
    ) -> str:
        """The solution's id, stored now unless the same source already is for its definition.
        An `error` text in meta is stored redacted."""
        if isinstance(meta.get("error"), str):
            meta = {**meta, "error": redact(meta["error"])}
        found = await asyncio.to_thread(
            self.store.find_solution, solution.definition, solution_hash(solution)
        )
        if found is not None:
            return found.id
        return await asyncio.to_thread(
            self.store.upsert_solution, solution, parent_id=parent_id, evolve_metadata=meta
        )

    async def store_and_profile(
        self,
        solution: Solution,
        parent_id: str | None,
        meta: dict[str, Any],
        parent: Solution | None = None,
    ) -> ProfiledSolution:
        """The solution stored and profiled (or its known profile). parent: timed alongside
        as the 'parent' baseline when the backend interleaves (only a fresh profile has it)."""
        sid = await self.store_solution(solution, parent_id, meta)
        return await self.profile(sid, solution, parent_id, parent)

    async def profile(
        self,
        sid: str,
        solution: Solution,
        parent_id: str | None,
        parent: Solution | None = None,
        *,
        stored_beside_parent: bool = False,
    ) -> ProfiledSolution:
        """Profile a stored solution (or take its known profile). stored_beside_parent: the
        caller knows that a stored profile of it was taken beside this very parent (a resumed
        attempt whose kernel this run stored), so its 'parent' comparison holds."""
        source_hash = solution_hash(solution)
        self._solutions.setdefault(sid, solution)
        pending = self._inflight.get(source_hash)
        if pending is not None:
            evaluation = await asyncio.shield(pending)
            return ProfiledSolution(
                sid, source_hash, evaluation, True, self._comparison(source_hash, parent_id)
            )
        stored = await self.stored_evaluation(sid)
        if stored is not None and not self._measure_for_breakdown(source_hash, stored):
            comparison = self._comparison(source_hash, parent_id)
            if comparison is None and stored_beside_parent:
                comparison = next(
                    (
                        c
                        for c in stored.comparisons
                        if c.baseline == PARENT_LABEL and c.baseline_id in (None, parent_id)
                    ),
                    None,
                )
            return ProfiledSolution(sid, source_hash, stored, True, comparison)
        future: asyncio.Future[Evaluation] = asyncio.get_running_loop().create_future()
        self._inflight[source_hash] = future
        try:
            pooled = await self.evaluate(solution, parent)
            if parent is not None:
                # Which stored kernel the 'parent' was: a stored profile keeps its
                # comparisons, and the label alone names whoever was the parent this time.
                pooled = pooled.with_baseline_id(PARENT_LABEL, parent_id)
            await asyncio.to_thread(
                self.store.upsert_profile, self.task.workload.uuid, sid, pooled, self.perf
            )
        except BaseException:
            self._inflight.pop(source_hash, None)
            future.cancel()
            raise
        comparison = next((c for c in pooled.comparisons if c.baseline == PARENT_LABEL), None)
        if comparison is not None and parent is not None and parent_id is not None:
            # Set before the waiters wake, so that they find it.
            self._beside_parent[(source_hash, parent_id)] = comparison
        future.set_result(pooled)
        return ProfiledSolution(sid, source_hash, pooled, False, comparison)

    def _measure_for_breakdown(self, source_hash: str, stored: Evaluation) -> bool:
        """Whether a passing stored profile without a breakdown is measured once more, because
        this run asks for breakdowns (its planner reads them): once per source and cache, so a
        kernel that cannot give one (a builtin entry point, a CUDA source) costs one extra
        evaluation per run, not one per use. The new measurement joins the same stored
        profile, which keeps its breakdown from then on (pool_evaluations). Readers of the
        store (stored_evaluation: the planner, the summarizer) take the profile as it is."""
        if not (self.benchmark.breakdown and stored.passed and not stored.breakdown):
            return False
        if source_hash in self._breakdown_tried:
            return False
        self._breakdown_tried.add(source_hash)
        return True

    def _comparison(self, source_hash: str, parent_id: str | None) -> Comparison | None:
        if parent_id is None:
            return None
        return self._beside_parent.get((source_hash, parent_id))

    async def evaluate(self, solution: Solution, parent: Solution | None = None) -> Evaluation:
        """Profile the solution on one of the pool's devices (no cache, nothing stored); its
        log comes back redacted. parent: timed in the same rounds when the backend
        interleaves (Evaluation.comparisons, baseline 'parent'); ignored otherwise."""
        baselines = (
            [Baseline(label=PARENT_LABEL, solution=parent)]
            if parent is not None and self.interleaves
            else []
        )
        result = await self.pool.evaluate(
            self.backend_factory, self.task, solution, self.benchmark, baselines
        )
        return result.evaluation.redacted()

    async def compare(self, solution_ids: list[str]) -> KernelComparison:
        """Stored solutions re-measured against each other (Backend.compare: in the same
        interleaved rounds where the backend interleaves), each labelled by its id. Nothing
        is stored: the figures settle a decision, they are no profile of either kernel."""
        kernels = [Baseline(label=sid, solution=await self.solution(sid)) for sid in solution_ids]
        return await self.pool.compare(self.backend_factory, self.task, kernels, self.benchmark)

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
                # A time-out depends on timeout_seconds, which the settings' hash leaves out
                # (a latency does not): with a longer one the kernel may finish, so it is timed
                # again rather than handed back as the old verdict.
                and profile.evaluation.status != EvaluationStatus.TIMEOUT
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
