"""The device pool with the real cpu backend: one evaluation per device at a time."""

from __future__ import annotations

import asyncio
import itertools
import os
import textwrap

import pytest

from accelopt_mcp.backends.base import BackendUnavailableError
from accelopt_mcp.backends.cpu import CpuBackend
from accelopt_mcp.backends.pool import DevicePool, DeviceSlot, PooledEvaluation
from accelopt_mcp.backends.registry import backend_names, get_backend, list_backends
from tests.backends.test_cpu_backend import python_solution, scale_task
from tests.bench import quick_bench

CONFIG = quick_bench(max_timing_seconds=1)

# Correct only when pinned to exactly one core, so a PASSED result proves the pinning.
PINNED_KERNEL = textwrap.dedent(
    """
    import os
    import time
    import numpy as np

    def run(x, scale):
        time.sleep(0.01)
        pinned = len(os.sched_getaffinity(0)) == 1
        return x * np.float32(scale) + np.float32(1.0 if pinned else 7.0)
    """
)

needs_two_cores = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")


def assert_one_at_a_time(results: list[PooledEvaluation]) -> None:
    by_device: dict[str, list[PooledEvaluation]] = {}
    for result in results:
        by_device.setdefault(result.device, []).append(result)
    for runs in by_device.values():
        runs.sort(key=lambda r: r.started_at)
        for before, after in itertools.pairwise(runs):
            assert before.finished_at <= after.started_at, "two evaluations overlapped on a device"


@needs_two_cores
def test_map_uses_every_device_one_evaluation_at_a_time() -> None:
    jobs = [(scale_task(), python_solution(PINNED_KERNEL)) for _ in range(6)]
    with DevicePool.for_cpu(workers=2) as pool:
        results = pool.map(CpuBackend, jobs, CONFIG)
    assert len(results) == 6
    assert all(r.evaluation.passed for r in results), [r.evaluation.log for r in results]
    assert {r.device for r in results} == {d.id for d in pool.devices}
    assert_one_at_a_time(results)
    # Two devices really worked at the same time at some point.
    spans = sorted((r.started_at, r.finished_at) for r in results)
    assert any(a_end > b_start for (_, a_end), (b_start, _) in itertools.pairwise(spans))


@needs_two_cores
def test_async_evaluate_from_an_event_loop() -> None:
    async def main() -> list[PooledEvaluation]:
        with DevicePool.for_cpu(workers=2) as pool:
            coros = [
                pool.evaluate(CpuBackend, scale_task(), python_solution(PINNED_KERNEL), CONFIG)
                for _ in range(4)
            ]
            return await asyncio.gather(*coros)

    results = asyncio.run(main())
    assert all(r.evaluation.passed for r in results)
    assert_one_at_a_time(results)


def test_single_device_serializes_everything() -> None:
    pool = DevicePool(
        [DeviceSlot(kind="cpu", id="only", backend_kwargs={"cpus": {min(os.sched_getaffinity(0))}})]
    )
    try:
        results = pool.map(CpuBackend, [(scale_task(), python_solution(PINNED_KERNEL))] * 3, CONFIG)
    finally:
        pool.close()
    assert {r.device for r in results} == {"only"}
    assert_one_at_a_time(results)


def test_pool_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="workers"):
        DevicePool.for_cpu(workers=len(os.sched_getaffinity(0)) + 1)
    with pytest.raises(ValueError, match="at least one"):
        DevicePool([])
    slot = DeviceSlot(kind="gpu", id="cuda:0")
    with pytest.raises(ValueError, match="unique"):
        DevicePool([slot, slot])
    gpus = DevicePool.for_gpus([0, 1])
    assert [d.backend_kwargs for d in gpus.devices] == [{"device": "cuda:0"}, {"device": "cuda:1"}]
    gpus.close()
    cores = DevicePool.for_neuron_cores([0, 1])
    assert [d.backend_kwargs for d in cores.devices] == [{"core_id": 0}, {"core_id": 1}]
    cores.close()


def test_registry_names_and_errors() -> None:
    assert backend_names() == ["cpu", "nki", "flashinfer"]
    with pytest.raises(ValueError, match="valid backends: cpu, nki, flashinfer"):
        get_backend("tpu")
    backend = get_backend("cpu", cpus={min(os.sched_getaffinity(0))})
    assert isinstance(backend, CpuBackend)
    listed = {a.name: a for a in list_backends()}
    assert set(listed) == {"cpu", "nki", "flashinfer"}
    assert listed["cpu"].usable
    for name in ("nki", "flashinfer"):
        assert listed[name].reason  # usable or not, it says why


def test_registry_reports_a_missing_backend_module() -> None:
    from accelopt_mcp.backends import registry

    registry._BACKENDS["ghost"] = ("accelopt_mcp.backends.ghost_backend", "GhostBackend")
    try:
        with pytest.raises(BackendUnavailableError, match="not part of this build"):
            get_backend("ghost")
        ghost = next(a for a in list_backends() if a.name == "ghost")
        assert not ghost.usable
    finally:
        del registry._BACKENDS["ghost"]


def test_device_kwargs_fit_every_backend_constructor() -> None:
    """Each pool kind's per-device keywords are accepted by that backend's constructor."""
    import inspect

    from accelopt_mcp.backends.registry import backend_class, backend_info

    kinds = {name: DevicePool.for_backend(backend_info(name), 1) for name in backend_names()}
    assert [d.kind for p in kinds.values() for d in p.devices] == ["cpu", "neuron", "gpu"]
    for name, pool in kinds.items():
        try:
            parameters = inspect.signature(backend_class(name)).parameters
        except BackendUnavailableError:
            continue
        finally:
            pool.close()
        for keyword in pool.devices[0].backend_kwargs:
            assert keyword in parameters, f"{name} backend takes no {keyword!r}"
