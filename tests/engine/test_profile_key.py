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
from tests.backends.test_cpu_backend import (
    SLOW_REFERENCE,
    VECTORIZED,
    python_solution,
    scale_task,
)

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


STRESSED_REFERENCE = SLOW_REFERENCE + "\n\nSTRESS_SCALES = (6.0,)\n"


def test_the_stress_sets_a_task_declares_are_part_of_the_key() -> None:
    from accelopt_mcp.tasks.inputs import stress_signature

    signature = stress_signature(STRESSED_REFERENCE)
    assert signature is not None and stress_signature(SLOW_REFERENCE) is None
    # Read as parsed: formatting and comments do not change it, another scale or a
    # stress_inputs function does.
    assert stress_signature("STRESS_SCALES=(6.0,)  # big") == stress_signature(
        "STRESS_SCALES = (6.0, )"
    )
    others = {
        stress_signature("STRESS_SCALES = (7.0,)"),
        stress_signature("def stress_inputs():\n    return {}\n"),
        stress_signature("def stress_inputs():\n    return {'a': (1,)}\n"),
    }
    assert len(others | {stress_signature("STRESS_SCALES = (6.0,)")}) == 4
    # No stress sets: the key, and every profile filed under it before, stay as they were.
    assert FAST.profile_key(stress=None) == FAST.profile_key()
    stressed = FAST.profile_key(stress=signature)
    assert benchmark_config_hash(stressed) != benchmark_config_hash(FAST.profile_key())


def test_a_profile_checked_before_the_task_declared_stress_sets_is_filed_apart(
    store: KernelStore,
) -> None:
    kernel = python_solution(VECTORIZED)
    before = profile_kernel(scale_task(), kernel, config=FAST, store=store)
    assert before.evaluation.status == EvaluationStatus.PASSED, before.evaluation.log
    after = profile_kernel(scale_task(STRESSED_REFERENCE), kernel, config=FAST, store=store)
    assert after.evaluation.status == EvaluationStatus.PASSED, after.evaluation.log
    assert "inputs_x6" in after.evaluation.log  # the stress check ran
    # Not pooled into the old profile (which never ran the stress check): a profile of its own.
    assert after.profile_id != before.profile_id
    assert before.profile_id is not None and len(store.list_measurements(before.profile_id)) == 1


def test_a_run_does_not_reuse_a_profile_checked_before_the_task_declared_stress_sets(
    store: KernelStore,
) -> None:
    outcome = profile_kernel(scale_task(), python_solution(VECTORIZED), config=FAST, store=store)
    assert outcome.solution_id is not None
    hardware = outcome.evaluation.environment.hardware
    pool = DevicePool([DeviceSlot(kind="cpu", id="c", backend_kwargs={"cpus": {0}})])
    same = ProfileCache(store, scale_task(), FAST, pool, CpuBackend, hardware)
    assert same._find_stored_evaluation(outcome.solution_id) is not None
    stressed = ProfileCache(store, scale_task(STRESSED_REFERENCE), FAST, pool, CpuBackend, hardware)
    assert stressed._find_stored_evaluation(outcome.solution_id) is None
