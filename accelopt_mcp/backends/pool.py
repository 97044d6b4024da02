"""Pools of devices (CPU cores, NeuronCores, GPUs), each running one evaluation at a time.

`EvaluationPool` is what the engine and the profiling tools use; `DevicePool` is this host's
devices, `RayPool` (backends/ray_pool.py, the `ray` extra) a Ray cluster's;
backends/placement.py picks one from a cluster address.

In a DevicePool evaluations are blocking (a child process per candidate), so each runs on a
worker thread that holds one device slot for its whole duration; there are exactly as many
workers as slots. The engine submits every attempt as soon as it is generated
(`await pool.evaluate(...)`); scripts use `pool.map(...)`.
"""

from __future__ import annotations

import abc
import asyncio
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field

from accelopt_mcp.backends.base import Backend, BackendInfo, Baseline
from accelopt_mcp.models import BenchmarkConfig, Evaluation, KernelComparison, Solution, Task

BackendFactory = Callable[..., Backend]


class DeviceSlot(BaseModel):
    """One device; `backend_kwargs` are passed to the backend constructor for it."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["cpu", "neuron", "gpu"]
    id: str
    backend_kwargs: dict[str, Any] = Field(default_factory=dict)


class PooledEvaluation(BaseModel):
    """An evaluation and where/when it ran (monotonic clock seconds here; wall-clock seconds of
    the node for a cluster's)."""

    evaluation: Evaluation
    device: str
    started_at: float
    finished_at: float
    node: str | None = None
    """The cluster node it ran on (its Ray node id); None on this host."""
    tries: int = 1
    """Times it was started: more than one when a node was lost under it."""


class EvaluationPool(abc.ABC):
    """Where evaluations run: `evaluate` and `compare` take one device each for their whole
    duration; `busy` is how many devices are in use now."""

    @property
    @abc.abstractmethod
    def size(self) -> int:
        """Evaluations that can run at once."""

    local: bool = True
    """Whether the devices are this host's (a cluster's nodes measure their own peaks)."""

    def measuring_conditions(self) -> dict[str, int | None]:
        """How evaluations here run, where that changes what a latency means: `workers` at
        once (they share caches and memory bandwidth) and `cores` per evaluation (None: all).
        Stored profiles are filed under these (BenchmarkConfig.profile_key)."""
        return {"workers": self.size, "cores": 1}

    @property
    def where(self) -> str:
        """One line for the live view and job status: which devices, on what."""
        return f"{self.size} device(s) on this host"

    def hardware(self, backend_factory: BackendFactory) -> str | None:
        """What evaluations here run on, as the backend names it (Availability.hardware)."""
        return backend_factory().availability().hardware

    @abc.abstractmethod
    def submit(
        self,
        backend_factory: BackendFactory,
        task: Task,
        solution: Solution,
        config: BenchmarkConfig | None = None,
        baselines: Sequence[Baseline] = (),
    ) -> Future[PooledEvaluation]: ...

    async def evaluate(
        self,
        backend_factory: BackendFactory,
        task: Task,
        solution: Solution,
        config: BenchmarkConfig | None = None,
        baselines: Sequence[Baseline] = (),
    ) -> PooledEvaluation:
        """Evaluate on the next free device; baselines are timed alongside when the backend
        interleaves (Backend.evaluate)."""
        return await asyncio.wrap_future(
            self.submit(backend_factory, task, solution, config, baselines)
        )

    @abc.abstractmethod
    def submit_compare(
        self,
        backend_factory: BackendFactory,
        task: Task,
        kernels: Sequence[Baseline],
        config: BenchmarkConfig | None = None,
    ) -> Future[KernelComparison]: ...

    async def compare(
        self,
        backend_factory: BackendFactory,
        task: Task,
        kernels: Sequence[Baseline],
        config: BenchmarkConfig | None = None,
    ) -> KernelComparison:
        """Backend.compare on the next free device (one device times them all, so they share
        its conditions)."""
        return await asyncio.wrap_future(
            self.submit_compare(backend_factory, task, kernels, config)
        )

    def map(
        self,
        backend_factory: BackendFactory,
        jobs: Sequence[tuple[Task, Solution]],
        config: BenchmarkConfig | None = None,
    ) -> list[PooledEvaluation]:
        """Evaluate every (task, solution), in parallel over the devices; results in order."""
        futures = [self.submit(backend_factory, task, sol, config) for task, sol in jobs]
        return [future.result() for future in futures]

    @abc.abstractmethod
    def busy(self) -> int:
        """Devices evaluating something now (cheap: safe to poll from any thread)."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class DevicePool(EvaluationPool):
    def __init__(self, devices: Sequence[DeviceSlot]) -> None:
        if not devices:
            raise ValueError("a device pool needs at least one device")
        ids = [d.id for d in devices]
        if len(set(ids)) != len(ids):
            raise ValueError(f"device ids must be unique, got {ids}")
        self.devices = list(devices)
        self._free: queue.Queue[DeviceSlot] = queue.Queue()
        for device in self.devices:
            self._free.put(device)
        self._executor = ThreadPoolExecutor(
            max_workers=len(self.devices), thread_name_prefix="accelopt-device"
        )
        # One backend per (factory, device), reused so per-backend caches (reference timings)
        # survive between candidates; a device is used by one thread at a time.
        self._backends: dict[tuple[int, str], Backend] = {}
        self._lock = threading.Lock()

    def measuring_conditions(self) -> dict[str, int | None]:
        cpus = [d.backend_kwargs.get("cpus") for d in self.devices if d.kind == "cpu"]
        cores = min((len(c) for c in cpus if c), default=1) if cpus else 1
        return {"workers": self.size, "cores": None if cpus and not all(cpus) else cores}

    # ------------------------------------------------------------------ constructors

    @classmethod
    def for_backend(cls, info: BackendInfo, workers: int | None = None) -> DevicePool:
        """The pool a backend's device kind calls for: `workers` pinned core groups (default
        one per usable core), or NeuronCores / GPUs 0..workers-1 (default one)."""
        if info.device_kind == "cpu":
            return cls.for_cpu(workers)
        if info.device_kind == "neuron":
            return cls.for_neuron_cores(range(workers or 1))
        return cls.for_gpus(range(workers or 1))

    @classmethod
    def for_cpu(cls, workers: int | None = None) -> DevicePool:
        """`workers` slots, each pinned to its own core(s); default one per usable core."""
        cores = sorted(os.sched_getaffinity(0))
        workers = workers or len(cores)
        if not 1 <= workers <= len(cores):
            raise ValueError(
                f"workers must be between 1 and the {len(cores)} usable cores, got {workers}"
            )
        groups = [cores[i::workers] for i in range(workers)]
        return cls(
            [
                DeviceSlot(
                    kind="cpu", id=f"cpu{','.join(map(str, g))}", backend_kwargs={"cpus": set(g)}
                )
                for g in groups
            ]
        )

    # The keyword names are those of NkiBackend(core_id=...) and FlashInferBackend(device=...).

    @classmethod
    def for_neuron_cores(cls, core_ids: Sequence[int]) -> DevicePool:
        return cls(
            [
                DeviceSlot(kind="neuron", id=f"nc{i}", backend_kwargs={"core_id": i})
                for i in core_ids
            ]
        )

    @classmethod
    def for_gpus(cls, gpu_ids: Sequence[int]) -> DevicePool:
        return cls(
            [
                DeviceSlot(kind="gpu", id=f"cuda:{i}", backend_kwargs={"device": f"cuda:{i}"})
                for i in gpu_ids
            ]
        )

    # ------------------------------------------------------------------ running

    def submit(
        self,
        backend_factory: BackendFactory,
        task: Task,
        solution: Solution,
        config: BenchmarkConfig | None = None,
        baselines: Sequence[Baseline] = (),
    ) -> Future[PooledEvaluation]:
        return self._executor.submit(
            self._run, backend_factory, task, solution, config, tuple(baselines)
        )

    def submit_compare(
        self,
        backend_factory: BackendFactory,
        task: Task,
        kernels: Sequence[Baseline],
        config: BenchmarkConfig | None = None,
    ) -> Future[KernelComparison]:
        return self._executor.submit(self._compare, backend_factory, task, tuple(kernels), config)

    def _compare(
        self,
        factory: BackendFactory,
        task: Task,
        kernels: Sequence[Baseline],
        config: BenchmarkConfig | None,
    ) -> KernelComparison:
        device = self._free.get()
        try:
            return self._backend(factory, device).compare(task, kernels, config)
        finally:
            self._free.put(device)

    def _backend(self, factory: BackendFactory, device: DeviceSlot) -> Backend:
        key = (id(factory), device.id)
        with self._lock:
            backend = self._backends.get(key)
            if backend is None:
                backend = factory(**device.backend_kwargs)
                self._backends[key] = backend
            return backend

    def _run(
        self,
        factory: BackendFactory,
        task: Task,
        solution: Solution,
        config: BenchmarkConfig | None,
        baselines: Sequence[Baseline] = (),
    ) -> PooledEvaluation:
        device = self._free.get()
        try:
            backend = self._backend(factory, device)
            started = time.monotonic()
            evaluation = backend.evaluate(task, solution, config, baselines)
            finished = time.monotonic()
        finally:
            self._free.put(device)
        return PooledEvaluation(
            evaluation=evaluation, device=device.id, started_at=started, finished_at=finished
        )

    @property
    def size(self) -> int:
        return len(self.devices)

    def busy(self) -> int:
        return max(0, len(self.devices) - self._free.qsize())

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
