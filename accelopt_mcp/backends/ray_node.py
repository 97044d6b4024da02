"""What runs on a Ray node: one evaluation, one comparison, or a report of what the node can run.

Ray imports these functions by reference on the node, so the node needs accelopt-mcp
installed (the same version as the server's); nothing else is shared. The task, the kernel and
the settings travel as JSON arguments, and the result comes back as JSON: no shared filesystem,
no database. The evaluation runs the node's own backend, so its candidate runs in the node's
jail and its environment names the node's hardware.

Devices on a node: Ray counts them (num_cpus=1, num_gpus=1, neuron_cores=1 per task) but pins
nothing for CPUs, so a cpu evaluation takes one core of its own here, under a lock file per
core that every Ray worker of this host shares (two Ray nodes on one host included); a GPU
or NeuronCore evaluation uses the one Ray assigned to the task.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from accelopt_mcp.backends.base import Backend, BackendUnavailableError, Baseline
from accelopt_mcp.backends.registry import backend_class, list_backends
from accelopt_mcp.isolation.jail_probe import jail_status
from accelopt_mcp.models import BenchmarkConfig, Solution, Task

UNJAILED_ENV = "ACCELOPT_RAY_ALLOW_UNJAILED"

_backends: dict[tuple[str, str], Backend] = {}
"""One backend per (name, device) in this Ray worker, so caches (reference timings) survive
from one task to the next."""


def _lock_dir() -> Path:
    path = Path(tempfile.gettempdir()) / f"accelopt-ray-cores-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


@contextlib.contextmanager
def _one_core() -> Iterator[int]:
    """A core of this host no other evaluation here holds, for as long as the block runs."""
    cores = sorted(os.sched_getaffinity(0))
    directory = _lock_dir()
    while True:
        for core in cores:
            handle = open(directory / f"core{core}.lock", "a+b")  # noqa: SIM115 (held open)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            try:
                yield core
            finally:
                handle.close()  # closing the file releases the lock (so does dying)
            return
        # More Ray CPUs than cores on this host: wait for one rather than share a core.
        time.sleep(0.05)


def _device(device_kind: str) -> contextlib.AbstractContextManager[tuple[str, dict[str, Any]]]:
    @contextlib.contextmanager
    def cpu() -> Iterator[tuple[str, dict[str, Any]]]:
        with _one_core() as core:
            yield f"cpu{core}", {"cpus": {core}}

    @contextlib.contextmanager
    def assigned() -> Iterator[tuple[str, dict[str, Any]]]:
        import ray

        ids = ray.get_runtime_context().get_accelerator_ids()
        key = "GPU" if device_kind == "gpu" else "neuron_cores"
        given = list(ids.get(key) or [])
        if not given or not str(given[0]).isdigit():
            raise BackendUnavailableError(
                f"Ray assigned this task no usable {key} index (got {given!r}); start the node "
                "with devices numbered 0..N-1"
            )
        index = int(given[0])
        if device_kind == "gpu":
            # The backend sets CUDA_VISIBLE_DEVICES for its child from the index it is given;
            # Ray's own setting here would renumber the GPUs under it.
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
            yield f"cuda:{index}", {"device": f"cuda:{index}"}
        else:
            os.environ.pop("NEURON_RT_VISIBLE_CORES", None)
            yield f"nc{index}", {"core_id": index}

    return cpu() if device_kind == "cpu" else assigned()


def _backend(name: str, device: str, kwargs: dict[str, Any]) -> Backend:
    backend = _backends.get((name, device))
    if backend is None:
        backend = backend_class(name)(**kwargs)
        _backends[(name, device)] = backend
    return backend


def where() -> dict[str, str]:
    """This node, as results name it."""
    node_id = ""
    with contextlib.suppress(Exception):
        import ray

        node_id = ray.get_runtime_context().get_node_id()
    return {"node_id": node_id, "hostname": socket.gethostname()}


def evaluate_here(
    backend: str,
    device_kind: str,
    task_json: str,
    solution_json: str,
    config_json: str | None,
    baselines_json: list[str],
) -> dict[str, Any]:
    """Backend.evaluate on a device of this node; the Evaluation as JSON, with where it ran."""
    _check_jailed()
    task = Task.model_validate_json(task_json)
    solution = Solution.model_validate_json(solution_json)
    config = BenchmarkConfig.model_validate_json(config_json) if config_json else None
    baselines = [Baseline.model_validate_json(b) for b in baselines_json]
    with _device(device_kind) as (device, kwargs):
        engine = _backend(backend, device, kwargs)
        started = time.time()
        evaluation = engine.evaluate(task, solution, config, baselines)
        finished = time.time()
    return {
        "evaluation": evaluation.model_dump_json(),
        "device": device,
        "started_at": started,
        "finished_at": finished,
        **where(),
    }


def compare_here(
    backend: str,
    device_kind: str,
    task_json: str,
    kernels_json: list[str],
    config_json: str | None,
) -> dict[str, Any]:
    """Backend.compare on one device of this node (every kernel under the same conditions)."""
    _check_jailed()
    task = Task.model_validate_json(task_json)
    kernels = [Baseline.model_validate_json(k) for k in kernels_json]
    config = BenchmarkConfig.model_validate_json(config_json) if config_json else None
    with _device(device_kind) as (device, kwargs):
        found = _backend(backend, device, kwargs).compare(task, kernels, config)
    return {"comparison": found.model_dump_json(), "device": device, **where()}


def _unjailed_allowed() -> bool:
    return os.environ.get(UNJAILED_ENV, "") == "1"


def _check_jailed() -> None:
    """A kernel without the jail would run as the Ray worker, next to the cluster's token and
    ports: refused unless the node's owner accepted that."""
    status = jail_status()
    if status.kind != "bwrap" and not _unjailed_allowed():
        raise BackendUnavailableError(
            f"no bubblewrap jail on this node ({status.reason}); install bubblewrap here, or "
            f"set {UNJAILED_ENV}=1 on the node to run kernels without one"
        )


def report_here() -> dict[str, Any]:
    """What this node can run: every backend's availability here, as `accelopt backends`
    shows it for a host, its jail and accelopt-mcp's version."""
    import accelopt_mcp

    return {
        "backends": [a.model_dump(mode="json") for a in list_backends()],
        "usable_cores": len(os.sched_getaffinity(0)),
        "version": accelopt_mcp.__version__,
        "jail": jail_status().kind,
        "unjailed_allowed": _unjailed_allowed(),
        **where(),
    }
