"""Evaluations on a Ray cluster: one Ray task per evaluation, on whichever node has a free device.

Each task asks for its backend's device (`num_cpus=1` for cpu, `num_gpus=1` for flashinfer,
`neuron_cores=1` for nki: backends/cluster.py) and runs the same backend, and so the same jail,
on the node it lands on (backends/ray_node.py). The task, the kernel and the settings travel
with the task as JSON; the result comes back as an Evaluation. The store stays with the
caller: nodes never see database credentials, and the caller's environment does not travel.

As many evaluations are in flight as the cluster has devices for the backend when the pool
opens (or `workers`, when fewer). A candidate's own failures come back as its evaluation, as
locally. Anything else that goes wrong on the cluster (a node or worker dying under the task,
Ray's memory monitor killing it, an error in our node code, a deadline passed) loses that try:
it is tried again on whichever node is free, `retries` times; then, or when no live node has
the device for `no_device_s`, EvaluationLost is raised: nothing is known about the kernel, so
nothing is stored for it, no repair is asked for, and the run stops with the reason rather than
waiting forever.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from accelopt_mcp.backends.base import BackendInfo, BackendUnavailableError, Baseline
from accelopt_mcp.backends.cluster import (
    RESOURCE_OF_KIND,
    ClusterError,
    EvaluationLost,
    alive_nodes,
    ask_node,
    capacity,
    connect,
    first_line,
    hold_connection,
    ray_options,
)
from accelopt_mcp.backends.pool import BackendFactory, EvaluationPool, PooledEvaluation
from accelopt_mcp.backends.ray_node import UNJAILED_ENV
from accelopt_mcp.backends.registry import backend_class
from accelopt_mcp.models import BenchmarkConfig, Evaluation, KernelComparison, Solution, Task

RETRIES_ENV = "ACCELOPT_RAY_RETRIES"
NO_DEVICE_ENV = "ACCELOPT_RAY_NO_DEVICE_S"
TASK_TIMEOUT_ENV = "ACCELOPT_RAY_TASK_TIMEOUT_S"
_POLL_S = 2.0
_hardware_seen: dict[tuple[str, str], str | None] = {}
"""(address, backend) -> what its node reported: the resume scans of a job server ask again
and again."""


def env_number(
    name: str, default: float, low: float, high: float, *, integer: bool = False
) -> float:
    """$name as a number in [low, high], else `default` when unset or blank. A value that is
    not one is refused (ClusterError naming the variable), not replaced by the default: a typo
    in a retry count or a deadline would otherwise change how a run fails without a word."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not low <= value <= high or (integer and not value.is_integer()):  # NaN fails too
        kind = "a whole number" if integer else "a number"
        raise ClusterError(
            f"{name}={raw!r} is not {kind} between {low:g} and {high:g}; fix or unset it "
            f"(default {default:g})"
        )
    return value


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
        # Read before connecting: a bad setting is refused without touching the cluster.
        if retries is None:
            retries = int(env_number(RETRIES_ENV, 2, 0, 100, integer=True))
        self.retries = max(0, int(retries))
        self.no_device_s = (
            no_device_s if no_device_s is not None else env_number(NO_DEVICE_ENV, 60.0, 0, 86400)
        )
        # Far above what any evaluation takes (its own limits end a hung kernel): this only
        # bounds a task that Ray keeps alive and that never answers.
        self.task_timeout_s = env_number(TASK_TIMEOUT_ENV, 1800.0, 1, 7 * 86400)
        self.ray = connect(address)
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
        self._capacity, self._capacity_at = devices, time.monotonic()
        hold_connection(+1)

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
        result, tries = self._with_retries(self._evaluate, args)
        return PooledEvaluation(
            evaluation=Evaluation.model_validate_json(result["evaluation"]),
            device=f"{result['hostname']}/{result['device']}",
            started_at=result["started_at"],
            finished_at=result["finished_at"],
            node=result["node_id"],
            tries=tries,
        )

    def _run_compare(self, args: tuple[Any, ...]) -> KernelComparison:
        result, _ = self._with_retries(self._compare, args)
        return KernelComparison.model_validate_json(result["comparison"])

    def _with_retries(self, remote: Any, args: tuple[Any, ...]) -> tuple[dict[str, Any], int]:
        """(result, tries); EvaluationLost when every try was lost."""
        lost = "the pool was closed"
        tries = 0
        with self._lock:
            self._busy += 1
        try:
            while tries <= self.retries and not self._closed:
                tries += 1
                ref = remote.options(**self._options).remote(*args)
                outcome = self._wait(ref)
                if isinstance(outcome, dict):
                    return outcome, tries
                lost = outcome
                if outcome.startswith("no live node"):
                    break  # nowhere to try again
            raise EvaluationLost(
                f"an evaluation was lost on the Ray cluster at {self.address} after {tries} "
                f"tr{'y' if tries == 1 else 'ies'} ({lost}); nothing was recorded for the "
                "kernel: check the cluster (`accelopt backends --cluster ...`), then resume"
            )
        finally:
            with self._lock:
                self._busy -= 1

    def _devices_now(self) -> int:
        """The cluster's devices for the backend, asked of the GCS at most once per poll
        however many evaluations are waiting."""
        with self._lock:
            if time.monotonic() - self._capacity_at < _POLL_S:
                return self._capacity
        found = capacity(self.ray, self.info.device_kind)
        with self._lock:
            self._capacity, self._capacity_at = found, time.monotonic()
        return found

    def _wait(self, ref: Any) -> dict[str, Any] | str:
        """The task's result, or why this try was lost (a string). A node that cannot run the
        backend at all raises BackendUnavailableError."""
        ray = self.ray
        exceptions = ray.exceptions
        with self._lock:
            self._refs.add(ref)
        try:
            started = time.monotonic()
            no_device_since: float | None = None
            while True:
                try:
                    ready, _ = ray.wait([ref], timeout=_POLL_S)
                    if ready:
                        break
                    devices = self._devices_now()
                except Exception as exc:  # the cluster itself did not answer
                    with contextlib.suppress(Exception):
                        ray.cancel(ref, force=True)
                    return f"the cluster did not answer: {first_line(exc)}"
                if self._closed or time.monotonic() - started > self.task_timeout_s:
                    with contextlib.suppress(Exception):
                        ray.cancel(ref, force=True)
                    if self._closed:
                        return "the pool was closed"
                    return f"no answer within {self.task_timeout_s:.0f} s ({TASK_TIMEOUT_ENV})"
                # Waiting is normal while every device is busy; not when none is left.
                if devices > 0:
                    no_device_since = None
                    continue
                no_device_since = no_device_since or time.monotonic()
                if time.monotonic() - no_device_since > self.no_device_s:
                    with contextlib.suppress(Exception):
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
                    raise BackendUnavailableError(f"on a node of the cluster: {cause}") from None
                # Our node code failed (not the kernel: its failures are evaluations).
                return f"the node's evaluator raised {first_line(cause)}"
            except Exception as exc:  # a worker or node died, OOM-killed, object lost, ...
                return f"{type(exc).__name__}: {first_line(exc)}"
            return value
        finally:
            with self._lock:
                self._refs.discard(ref)

    local = False

    def hardware(self, backend_factory: BackendFactory | None = None) -> str | None:
        """What a node that has the backend's device reports for it (asked once per address
        and backend). ClusterError when no node answers, runs another accelopt-mcp version,
        or would run kernels without a jail; BackendUnavailableError when the backend cannot
        run there."""
        key = (self.address, self.info.name)
        if key in _hardware_seen:
            return _hardware_seen[key]
        import accelopt_mcp

        ray = self.ray
        node = next((n for n in alive_nodes(ray) if n.devices.get(self.resource, 0) >= 1), None)
        if node is None:
            raise ClusterError(f"the Ray cluster at {self.address} has no {self.resource} left")
        ref = ask_node(ray, node.node_id)
        try:
            found = ray.get(ref, timeout=60)
        except Exception as exc:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
            raise ClusterError(
                f"node {node.address} of the Ray cluster at {self.address} did not report what "
                f"it runs: {first_line(exc)} (is accelopt-mcp installed there?)"
            ) from None
        where = f"node {found['hostname']} ({node.address}) of the Ray cluster at {self.address}"
        if found.get("version") != accelopt_mcp.__version__:
            raise ClusterError(
                f"{where} runs accelopt-mcp {found.get('version')}, this process "
                f"{accelopt_mcp.__version__}: install the same version on every node"
            )
        if found.get("jail") != "bwrap" and not found.get("unjailed_allowed"):
            raise ClusterError(
                f"{where} has no bubblewrap jail, so a kernel there could read the cluster's "
                f"token and reach its ports: install bubblewrap on it (or set {UNJAILED_ENV}=1 "
                "on the node to accept that)"
            )
        for availability in found["backends"]:
            if availability["name"] == self.info.name:
                if not availability["usable"]:
                    raise BackendUnavailableError(
                        f"backend {self.info.name!r} cannot run on {where}: "
                        f"{availability['reason']}"
                    )
                hardware = availability.get("hardware")
                _hardware_seen[key] = str(hardware) if hardware else None
                return _hardware_seen[key]
        return None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        hold_connection(-1)
        with self._lock:
            refs = list(self._refs)
        for ref in refs:
            # Already finished, or gone with its node.
            with contextlib.suppress(Exception):
                self.ray.cancel(ref, force=True)
        self._executor.shutdown(wait=True, cancel_futures=True)
