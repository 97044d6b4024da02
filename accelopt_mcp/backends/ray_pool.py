"""Evaluations on a Ray cluster: one Ray task per evaluation, on whichever node has a free device.

Each task asks for its backend's device (`num_cpus=1` for cpu, `num_gpus=1` for flashinfer,
`neuron_cores=1` for nki: backends/cluster.py) and runs the same backend, and so the same jail,
on the node it lands on (backends/ray_node.py). The task, the kernel and the settings travel
with the task as JSON; the result comes back as an Evaluation. The store stays with the
caller: nodes never see database credentials, and the caller's environment does not travel.

As many evaluations are in flight as the cluster has devices for the backend when the pool
opens (or `workers`, when fewer). A node lost under an evaluation (its worker or the whole
node died) is retried on another node, `retries` times; then, or when no live node has the
device for `no_device_s`, the evaluation comes back failed (RUNTIME_ERROR, saying so) rather
than waiting forever. A candidate's own failures come back as its evaluation, as locally.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from accelopt_mcp.backends.base import BackendInfo, BackendUnavailableError, Baseline
from accelopt_mcp.backends.cluster import (
    RESOURCE_OF_KIND,
    ClusterError,
    capacity,
    connect,
    ray_options,
)
from accelopt_mcp.backends.pool import BackendFactory, EvaluationPool, PooledEvaluation
from accelopt_mcp.backends.registry import backend_class
from accelopt_mcp.models import BenchmarkConfig, Evaluation, KernelComparison, Solution, Task
from accelopt_mcp.models.evaluation import Environment, EvaluationStatus

RETRIES_ENV = "ACCELOPT_RAY_RETRIES"
NO_DEVICE_ENV = "ACCELOPT_RAY_NO_DEVICE_S"
_POLL_S = 2.0


def _env_number(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, "") or default)
    except ValueError:
        return default


class RayPool(EvaluationPool):
    """The devices of a Ray cluster for one backend's device kind."""

    def __init__(
        self,
        address: str,
        info: BackendInfo,
        *,
        workers: int | None = None,
        retries: int | None = None,
        no_device_s: float | None = None,
    ) -> None:
        """ClusterError (one line) when the cluster cannot be reached or has no device of the
        kind the backend needs."""
        self.address = address
        self.info = info
        self.ray = connect(address)
        self.retries = int(retries if retries is not None else _env_number(RETRIES_ENV, 2))
        self.no_device_s = (
            no_device_s if no_device_s is not None else _env_number(NO_DEVICE_ENV, 60.0)
        )
        devices = capacity(self.ray, info.device_kind)
        resource = RESOURCE_OF_KIND[info.device_kind]
        if devices < 1:
            raise ClusterError(
                f"the Ray cluster at {address} has no {resource} for backend {info.name!r}: "
                "start a node that has one (`ray start --address ...`), or drop --cluster"
            )
        self._size = min(devices, workers) if workers else devices
        self.resource = resource
        self._options = ray_options(info.device_kind)
        from accelopt_mcp.backends import ray_node

        remote = self.ray.remote(max_retries=0)
        self._evaluate = remote(ray_node.evaluate_here)
        self._compare = remote(ray_node.compare_here)
        self._executor = ThreadPoolExecutor(
            max_workers=self._size, thread_name_prefix="accelopt-ray"
        )
        self._lock = threading.Lock()
        self._busy = 0
        self._refs: set[Any] = set()
        self._closed = False

    # ------------------------------------------------------------------ what it is

    @property
    def size(self) -> int:
        return self._size

    @property
    def where(self) -> str:
        return f"{self._size} {self.resource} on the Ray cluster at {self.address}"

    def busy(self) -> int:
        return self._busy

    # ------------------------------------------------------------------ running

    def _name_of(self, factory: BackendFactory) -> str:
        info = getattr(factory, "info", None)
        name = getattr(info, "name", None)
        if not isinstance(name, str) or backend_class(name) is not factory:
            raise ValueError(
                "a Ray pool runs registered backends only (it sends the backend's name to the "
                f"node), got {factory!r}"
            )
        return name

    def submit(
        self,
        backend_factory: BackendFactory,
        task: Task,
        solution: Solution,
        config: BenchmarkConfig | None = None,
        baselines: Sequence[Baseline] = (),
    ) -> Future[PooledEvaluation]:
        name = self._name_of(backend_factory)
        args = (
            name,
            self.info.device_kind,
            task.model_dump_json(),
            solution.model_dump_json(),
            config.model_dump_json() if config is not None else None,
            [b.model_dump_json() for b in baselines],
        )
        return self._executor.submit(self._run_evaluation, args)

    def submit_compare(
        self,
        backend_factory: BackendFactory,
        task: Task,
        kernels: Sequence[Baseline],
        config: BenchmarkConfig | None = None,
    ) -> Future[KernelComparison]:
        name = self._name_of(backend_factory)
        args = (
            name,
            self.info.device_kind,
            task.model_dump_json(),
            [k.model_dump_json() for k in kernels],
            config.model_dump_json() if config is not None else None,
        )
        return self._executor.submit(self._run_compare, args)

    def _run_evaluation(self, args: tuple[Any, ...]) -> PooledEvaluation:
        result, tries, lost = self._with_retries(self._evaluate, args)
        if result is None:
            now = time.time()
            return PooledEvaluation(
                evaluation=self._lost_evaluation(lost, tries),
                device="lost",
                started_at=now,
                finished_at=now,
                tries=tries,
            )
        return PooledEvaluation(
            evaluation=Evaluation.model_validate_json(result["evaluation"]),
            device=f"{result['hostname']}/{result['device']}",
            started_at=result["started_at"],
            finished_at=result["finished_at"],
            node=result["node_id"],
            tries=tries,
        )

    def _run_compare(self, args: tuple[Any, ...]) -> KernelComparison:
        result, tries, lost = self._with_retries(self._compare, args)
        if result is None:
            raise ClusterError(f"a comparison was lost on the Ray cluster ({tries} tries): {lost}")
        return KernelComparison.model_validate_json(result["comparison"])

    def _with_retries(
        self, remote: Any, args: tuple[Any, ...]
    ) -> tuple[dict[str, Any] | None, int, str]:
        """(result, tries, why the last try was lost); result None when every try was lost."""
        lost = ""
        tries = 0
        with self._lock:
            self._busy += 1
        try:
            while tries <= self.retries and not self._closed:
                tries += 1
                ref = remote.options(**self._options).remote(*args)
                outcome = self._wait(ref)
                if isinstance(outcome, dict):
                    return outcome, tries, ""
                lost = outcome
                if outcome.startswith("no live node"):
                    break  # nowhere to retry
            return None, tries, lost or "the pool was closed"
        finally:
            with self._lock:
                self._busy -= 1

    def _wait(self, ref: Any) -> dict[str, Any] | str:
        """The task's result, or why it was lost (a string)."""
        ray = self.ray
        exceptions = ray.exceptions
        with self._lock:
            self._refs.add(ref)
        try:
            no_device_since: float | None = None
            while True:
                ready, _ = ray.wait([ref], timeout=_POLL_S)
                if ready:
                    break
                if self._closed:
                    return "the pool was closed"
                # Waiting is normal while every device is busy; not when none is left.
                if capacity(ray, self.info.device_kind) > 0:
                    no_device_since = None
                    continue
                no_device_since = no_device_since or time.monotonic()
                if time.monotonic() - no_device_since > self.no_device_s:
                    ray.cancel(ref, force=True)
                    return (
                        f"no live node of the cluster has a {self.resource} any more "
                        f"(waited {self.no_device_s:.0f} s)"
                    )
            try:
                value: dict[str, Any] = ray.get(ref)
            except exceptions.RayTaskError as exc:
                cause = exc.as_instanceof_cause()
                if isinstance(cause, BackendUnavailableError):
                    raise BackendUnavailableError(f"on the cluster's node: {cause}") from None
                raise
            except (
                exceptions.WorkerCrashedError,
                exceptions.NodeDiedError,
                exceptions.ObjectLostError,
                exceptions.OwnerDiedError,
                exceptions.RaySystemError,
                exceptions.TaskCancelledError,
            ) as exc:
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                return f"{type(exc).__name__}: {first[:200]}"
            return value
        finally:
            with self._lock:
                self._refs.discard(ref)

    def _lost_evaluation(self, why: str, tries: int) -> Evaluation:
        return Evaluation(
            status=EvaluationStatus.RUNTIME_ERROR,
            environment=Environment(hardware=f"ray cluster {self.address}"),
            timestamp=datetime.now(UTC).isoformat(),
            log=(
                f"the evaluation was lost on the Ray cluster ({tries} tr"
                f"{'y' if tries == 1 else 'ies'}), not failed by the kernel: {why}"
            ),
        )

    local = False

    def hardware(self, backend_factory: BackendFactory | None = None) -> str | None:
        """What a cluster node reports for this backend (the first that can run it)."""
        from accelopt_mcp.backends import ray_node

        report = self.ray.remote(ray_node.report_here).options(**self._options)
        found = self.ray.get(report.remote(), timeout=120)
        for availability in found["backends"]:
            if availability["name"] == self.info.name:
                if not availability["usable"]:
                    raise BackendUnavailableError(
                        f"backend {self.info.name!r} cannot run on the cluster's node "
                        f"{found['hostname']}: {availability['reason']}"
                    )
                hardware = availability.get("hardware")
                return str(hardware) if hardware else None
        return None

    def close(self) -> None:
        self._closed = True
        with self._lock:
            refs = list(self._refs)
        for ref in refs:
            # Already finished, or gone with its node.
            with contextlib.suppress(Exception):
                self.ray.cancel(ref, force=True)
        self._executor.shutdown(wait=True, cancel_futures=True)
