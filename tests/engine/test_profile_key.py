"""What a stored profile is filed under: the settings that change a latency, plus how the
evaluation ran (evaluations at once, cores each). A profile taken alone on one core is not
handed to a run that evaluates two at a time, and the other way round."""

from __future__ import annotations

import asyncio

from accelopt_mcp.backends.cpu import CpuBackend
from accelopt_mcp.backends.pool import DevicePool, DeviceSlot
from accelopt_mcp.engine.profile_cache import ProfileCache
from accelopt_mcp.hashing import benchmark_config_hash
from accelopt_mcp.models import BenchmarkConfig, EvaluationStatus
from accelopt_mcp.profiling import profile_kernel
from accelopt_mcp.store.base import KernelStore
from tests.backends.test_cpu_backend import VECTORIZED, python_solution, scale_task

GENERATED_ENTRY = """
import numpy as np

_SOURCE = "def run(x, scale):\\n    return x * np.float32(scale) + np.float32(1.0)\\n"
_namespace = {"np": np}
exec(compile(_SOURCE, "/generated/elsewhere.py", "exec"), _namespace)
run = _namespace["run"]
"""
FAST = BenchmarkConfig(
    seeds=[0], warmup_runs=0, iterations=4, min_processes=1, max_processes=1, timeout_seconds=20
)


def test_one_evaluation_on_one_core_files_under_the_settings_alone() -> None:
    config = BenchmarkConfig()
    assert config.profile_key() == config.perf_fields()
    keys = [
        config.profile_key(),
        config.profile_key(workers=2),
        config.profile_key(cores=None),
        config.profile_key(cores=4),
        BenchmarkConfig(decide_at=[0.9, 1.1]).profile_key(),
        BenchmarkConfig(iterations=20).profile_key(),
    ]
    assert len({benchmark_config_hash(k) for k in keys}) == len(keys)


def test_a_pool_says_how_its_evaluations_run() -> None:
    one = DevicePool([DeviceSlot(kind="cpu", id="cpu0", backend_kwargs={"cpus": {0}})])
    assert one.measuring_conditions() == {"workers": 1, "cores": 1}
    unpinned = DevicePool([DeviceSlot(kind="cpu", id="all", backend_kwargs={})])
    assert unpinned.measuring_conditions() == {"workers": 1, "cores": None}
    two = DevicePool(
        [
            DeviceSlot(kind="cpu", id="cpu0", backend_kwargs={"cpus": {0}}),
            DeviceSlot(kind="cpu", id="cpu1", backend_kwargs={"cpus": {1}}),
        ]
    )
    assert two.measuring_conditions() == {"workers": 2, "cores": 1}
    assert CpuBackend(cpus={0}).cores_per_evaluation == 1
    assert CpuBackend().cores_per_evaluation is None


def test_a_profile_is_reused_only_under_its_own_conditions(store: KernelStore) -> None:
    task = scale_task()
    outcome = profile_kernel(task, python_solution(VECTORIZED), config=FAST, store=store)
    assert outcome.evaluation.status == EvaluationStatus.PASSED, outcome.evaluation.log
    assert outcome.solution_id is not None
    hardware = outcome.evaluation.environment.hardware

    def cache(pool: DevicePool) -> ProfileCache:
        return ProfileCache(store, task, FAST, pool, CpuBackend, hardware)

    # Taken alone on one core (the one-off profile's pinning): found by a one-worker run...
    alone = cache(DevicePool([DeviceSlot(kind="cpu", id="c", backend_kwargs={"cpus": {0}})]))
    assert alone._find_stored_evaluation(outcome.solution_id) is not None
    # ...and not by a run that evaluates two at a time, nor by one on every core.
    two = DevicePool(
        [
            DeviceSlot(kind="cpu", id="a", backend_kwargs={"cpus": {0}}),
            DeviceSlot(kind="cpu", id="b", backend_kwargs={"cpus": {0}}),
        ]
    )
    assert cache(two)._find_stored_evaluation(outcome.solution_id) is None
    every = DevicePool([DeviceSlot(kind="cpu", id="all", backend_kwargs={})])
    assert cache(every)._find_stored_evaluation(outcome.solution_id) is None


def test_a_run_asks_for_breakdowns_unless_its_settings_say_no() -> None:
    from accelopt_mcp.engine.config import OptimizeConfig

    assert BenchmarkConfig().breakdown is False
    assert OptimizeConfig().benchmark.breakdown is True
    off = OptimizeConfig(benchmark=BenchmarkConfig(breakdown=False))
    assert off.benchmark.breakdown is False
    # Read back from its JSON (a resumed run), the choice stays.
    again = OptimizeConfig.model_validate_json(off.model_dump_json())
    assert again.benchmark.breakdown is False
    assert OptimizeConfig.model_validate_json(
        OptimizeConfig().model_dump_json()
    ).benchmark.breakdown
    # Not a perf field: a profile taken with or without one is filed under the same key.
    assert BenchmarkConfig(breakdown=True).profile_key() == BenchmarkConfig().profile_key()


def test_a_run_that_asks_for_breakdowns_measures_a_profile_without_one_again(
    store: KernelStore,
) -> None:
    task = scale_task()
    kernel = python_solution(VECTORIZED)
    outcome = profile_kernel(task, kernel, config=FAST, store=store)
    assert outcome.solution_id is not None and outcome.evaluation.breakdown == []
    sid = outcome.solution_id
    hardware = outcome.evaluation.environment.hardware
    pool = DevicePool([DeviceSlot(kind="cpu", id="c", backend_kwargs={"cpus": {0}})])
    traced = FAST.model_copy(update={"breakdown": True})
    asking = ProfileCache(store, task, traced, pool, CpuBackend, hardware)
    # Whoever reads the store (the planner, the summarizer) takes the profile as it is...
    assert asking._find_stored_evaluation(sid) == outcome.evaluation
    # ...while the run measures it once more, for its breakdown: the same stored profile,
    # which keeps it from then on; a second use in the run reuses it.
    first = asyncio.run(asking.profile(sid, kernel, None))
    assert not first.reused and first.evaluation.breakdown
    found = asking._find_stored_evaluation(sid)
    assert found is not None and found.breakdown == first.evaluation.breakdown
    assert found.latency_stats is not None and found.latency_stats.measurements == 2
    again = asyncio.run(asking.profile(sid, kernel, None))
    assert again.reused and again.evaluation.breakdown == first.evaluation.breakdown
    assert len(store.list_profiles(solution_id=sid)) == 1


def test_a_kernel_that_gives_no_breakdown_is_measured_again_once_per_run(
    store: KernelStore,
) -> None:
    # Its entry point is compiled under a file name outside its folder: no line of its own
    # files runs, so the traced call has nothing to report.
    task = scale_task()
    kernel = python_solution(GENERATED_ENTRY)
    pool = DevicePool([DeviceSlot(kind="cpu", id="c", backend_kwargs={"cpus": {0}})])
    traced = FAST.model_copy(update={"breakdown": True})
    outcome = profile_kernel(task, kernel, config=traced, store=store)
    assert outcome.solution_id is not None and outcome.evaluation.passed
    assert outcome.evaluation.breakdown == []
    sid, hardware = outcome.solution_id, outcome.evaluation.environment.hardware

    def measurements() -> int:
        found = ProfileCache(store, task, traced, pool, CpuBackend, hardware)
        evaluation = found._find_stored_evaluation(sid)
        assert evaluation is not None and evaluation.latency_stats is not None
        return evaluation.latency_stats.measurements

    for run in (1, 2):
        cache = ProfileCache(store, task, traced, pool, CpuBackend, hardware)
        uses = [asyncio.run(cache.profile(sid, kernel, None)) for _ in range(3)]
        assert [u.reused for u in uses] == [False, True, True]
        assert measurements() == 1 + run
