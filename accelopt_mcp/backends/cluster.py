"""Reaching a Ray cluster, and what its nodes can run.

A cluster is named by an address: `host:port` (the head's GCS port, 6379 by default; the
process must then run on a node of the cluster), `ray://host:port` (Ray Client, port 10001:
what a laptop outside the cluster uses, through an SSH tunnel), or `auto` (a cluster already
running on this machine). `--cluster`, the MCP tools' `cluster` argument and
`ACCELOPT_RAY_ADDRESS` carry it; nothing given means this host's own devices.

Ray is an optional extra (`pip install 'accelopt-mcp[ray]'`) and is imported here only, on
first use. Token authentication (Ray >= 2.52) is Ray's own: RAY_AUTH_MODE=token with the
token in RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token, read by Ray from this
process's environment; the token never appears in our messages.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import socket
import threading
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, Field

from accelopt_mcp.redaction import redact

RAY_ADDRESS_ENV = "ACCELOPT_RAY_ADDRESS"
LOCAL_WORDS = frozenset({"", "local", "none", "off"})
"""Addresses that mean "no cluster: this host's devices"."""

# What one evaluation of a backend's device kind asks Ray for. Ray knows NeuronCores as the
# accelerator resource `neuron_cores` and sets NEURON_RT_VISIBLE_CORES for the task; GPUs as
# num_gpus, with CUDA_VISIBLE_DEVICES.
RESOURCE_OF_KIND: dict[str, str] = {"cpu": "CPU", "gpu": "GPU", "neuron": "neuron_cores"}


class ClusterError(RuntimeError):
    """The cluster cannot be used (not installed, unreachable, refused, nothing to run on, a
    malformed ACCELOPT_RAY_* setting); the message is one line naming what was wrong (the
    address, or the variable) and what to do."""


class EvaluationLost(ClusterError):
    """An evaluation the cluster lost, every try (nodes or workers died under it, no node has
    its device any more, it outran its deadline): nothing is known about the kernel, so
    nothing is recorded for it and the run stops (failed, with this reason; resumable)."""


def cluster_address(given: str | None = None) -> str | None:
    """The cluster to use: `given`, else ACCELOPT_RAY_ADDRESS; None for this host."""
    address = given if given is not None else os.environ.get(RAY_ADDRESS_ENV, "")
    address = address.strip()
    return None if address.lower() in LOCAL_WORDS else address


def ray_options(device_kind: str) -> dict[str, Any]:
    """The Ray task options one evaluation of this device kind requests."""
    if device_kind == "cpu":
        return {"num_cpus": 1}
    if device_kind == "gpu":
        return {"num_cpus": 0, "num_gpus": 1}
    if device_kind == "neuron":
        return {"num_cpus": 0, "resources": {"neuron_cores": 1}}
    raise ValueError(f"no Ray resource for device kind {device_kind!r}")


def first_line(exc: BaseException) -> str:
    """An exception as one short line, secrets masked: Ray's messages run to many lines."""
    return redact((str(exc).strip().splitlines() or [type(exc).__name__])[0])[:300]


def import_ray() -> Any:
    try:
        import ray
    except ModuleNotFoundError:
        raise ClusterError(
            "Ray is not installed here: pip install 'accelopt-mcp[ray]' (or drop --cluster / "
            f"{RAY_ADDRESS_ENV} to use this host's devices)"
        ) from None
    return ray


_lock = threading.Lock()
_connected: str | None = None
_in_use = 0
"""Pools open on the connection: Ray allows one cluster per process, so while any is open a
different address is refused rather than pulled from under them."""


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """One TCP connect before ray.init, which retries an unreachable address for minutes."""
    if address == "auto":
        return
    parts = urlsplit(address if "://" in address else f"gcs://{address}")
    host, port = parts.hostname, parts.port
    if not host:
        raise ClusterError(
            f"cluster address {address!r} has no host: use host:port or ray://host:port"
        )
    if port is None:
        port = 10001 if parts.scheme == "ray" else 6379
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as exc:
        raise ClusterError(
            f"cannot reach the Ray cluster at {address} ({exc.strerror or exc}): start it with "
            "`ray start --head`, check the address (and the SSH tunnel), or drop --cluster"
        ) from None


def connect(address: str) -> Any:
    """Connect this process to the cluster (once; a different address reconnects) and return
    the ray module. ClusterError, in one line, when that cannot be done."""
    global _connected
    ray = import_ray()
    with _lock:
        if _connected == address and ray.is_initialized():
            return ray
        if ray.is_initialized() and _in_use:
            raise ClusterError(
                f"this process profiles on the Ray cluster at {_connected} right now; one "
                f"cluster per process: use {_connected}, or a separate process for {address}"
            )
        _check_reachable(address)
        if ray.is_initialized():
            ray.shutdown()
        # Ray prints progress and warnings itself; an MCP stdio server's stdout is the protocol.
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                ray.init(
                    address=address,
                    logging_level=logging.WARNING,
                    log_to_driver=False,
                    configure_logging=True,
                    namespace="accelopt",
                )
        except Exception as exc:  # Ray raises ConnectionError, RuntimeError, grpc errors ...
            raise ClusterError(
                f"cannot use the Ray cluster at {address}: {first_line(exc)} (with token "
                "authentication on, set RAY_AUTH_MODE=token and the cluster's RAY_AUTH_TOKEN)"
            ) from None
        _connected = address
        return ray


def hold_connection(delta: int) -> None:
    """A pool opening (+1) or closing (-1) on the current connection."""
    global _in_use
    with _lock:
        _in_use = max(0, _in_use + delta)


class ClusterNode(BaseModel):
    """One node of the cluster, as `accelopt backends --cluster` shows it."""

    node_id: str
    address: str
    """The node's IP address in the cluster."""
    alive: bool
    devices: dict[str, float] = Field(default_factory=dict)
    """Device resources: CPU, GPU, neuron_cores (and custom ones), as the node declares them."""
    backends: list[str] = Field(default_factory=list)
    """Backends whose device resource this node has."""


def alive_nodes(ray: Any) -> list[ClusterNode]:
    found = []
    for node in ray.nodes():
        resources = {
            key: float(value)
            for key, value in (node.get("Resources") or {}).items()
            if not key.startswith("node:") and key not in ("memory", "object_store_memory")
        }
        found.append(
            ClusterNode(
                node_id=str(node.get("NodeID", "")),
                address=str(node.get("NodeManagerAddress", "")),
                alive=bool(node.get("Alive")),
                devices=resources,
            )
        )
    return [n for n in found if n.alive]


def capacity(ray: Any, device_kind: str) -> int:
    """How many evaluations of this device kind the cluster's live nodes can run at once."""
    key = RESOURCE_OF_KIND[device_kind]
    return int(sum(n.devices.get(key, 0.0) for n in alive_nodes(ray)))


class NodeReport(ClusterNode):
    """A node and what it can run, as it says itself (backends/ray_node.report_here)."""

    hostname: str = ""
    usable_cores: int = 0
    availability: list[dict[str, Any]] = Field(default_factory=list)
    """Every backend's Availability on the node (name, usable, hardware, reason, isolation)."""
    problem: str | None = None
    """Why the node did not answer, when it did not."""


def ask_node(ray: Any, node_id: str) -> Any:
    """Start ray_node.report_here on that node (its ObjectRef). It takes no device, so it
    answers while every device of the node is busy."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from accelopt_mcp.backends import ray_node

    strategy = NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
    report = ray.remote(max_retries=0)(ray_node.report_here)
    return report.options(num_cpus=0, scheduling_strategy=strategy).remote()


def describe_nodes(address: str, timeout_s: float = 60.0) -> list[NodeReport]:
    """Every live node of the cluster with its devices and the backends it can run: a backend
    counts when it is usable on the node and the node has its device resource."""
    from accelopt_mcp.backends.registry import backend_info

    ray = connect(address)
    nodes = alive_nodes(ray)
    refs = [ask_node(ray, n.node_id) for n in nodes]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    out = []
    for node, ref in zip(nodes, refs, strict=True):
        entry = NodeReport(**node.model_dump())
        if ref not in ready:
            entry.problem = f"did not answer within {timeout_s:.0f} s"
            ray.cancel(ref, force=True)
            out.append(entry)
            continue
        try:
            found = ray.get(ref)
        except Exception as exc:  # the node died, or accelopt-mcp is missing there
            entry.problem = first_line(exc)
            out.append(entry)
            continue
        entry.hostname = found["hostname"]
        entry.usable_cores = found["usable_cores"]
        entry.availability = found["backends"]
        for availability in found["backends"]:
            try:
                kind = backend_info(availability["name"]).device_kind
            except Exception:  # a backend this build does not know
                continue
            if availability["usable"] and node.devices.get(RESOURCE_OF_KIND[kind], 0) >= 1:
                entry.backends.append(availability["name"])
        out.append(entry)
    return out
