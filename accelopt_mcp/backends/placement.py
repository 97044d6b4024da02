"""Where evaluations run: this host's devices or a Ray cluster's, chosen by a cluster address
(backends/cluster.py: None reads ACCELOPT_RAY_ADDRESS). Ray is imported only when a cluster is
named."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from accelopt_mcp.backends.base import Backend, BackendInfo
from accelopt_mcp.backends.pool import DevicePool, EvaluationPool


def open_pool(
    info: BackendInfo, workers: int | None = None, cluster: str | None = None
) -> EvaluationPool:
    """The pool for a backend: on the Ray cluster at `cluster` (see backends/cluster.py:
    None reads ACCELOPT_RAY_ADDRESS), else this host's devices (DevicePool.for_backend).
    ClusterError (one line) when the cluster cannot be used."""
    from accelopt_mcp.backends.cluster import cluster_address

    address = cluster_address(cluster)
    if address is None:
        return DevicePool.for_backend(info, workers)
    from accelopt_mcp.backends.ray_pool import RayPool

    return RayPool(address, info, workers=workers)


def require_backend_where(name: str, cluster: str | None = None) -> str | None:
    """Where a backend's evaluations would run, checked: on the cluster (a node that has its
    device runs it: its hardware), else this host (registry.require_backend). Raises
    BackendUnavailableError or ClusterError, one line each, when it cannot run there."""
    from accelopt_mcp.backends.cluster import cluster_address
    from accelopt_mcp.backends.registry import backend_class, require_backend

    address = cluster_address(cluster)
    if address is None:
        return require_backend(name).hardware
    factory = backend_class(name)
    with open_pool(factory.info, cluster=address) as pool:
        return pool.hardware(factory)


def local_options_only(options: Mapping[str, Any] | None, address: str | None) -> None:
    """Backend constructor options (cores, a profiler path ...) describe this host's backend;
    a node of a cluster builds its own from its own devices. Given both, ValueError: dropping
    the options without a word would time the kernel under settings the caller did not ask
    for."""
    if options and address is not None:
        raise ValueError(
            f"backend options ({', '.join(sorted(options))}) apply to this host's backend, but "
            f"the evaluation runs on the Ray cluster at {address}, whose nodes build their own: "
            "drop the options, or the cluster (cluster='local')"
        )


def local_backend(name: str, options: Mapping[str, Any] | None = None) -> Backend:
    """A backend for one evaluation on this host. A cpu one is pinned to the quietest usable
    core unless `options` name the cores: on one core, with one BLAS thread, as a run's pooled
    evaluations are, so that a figure from `accelopt profile` or an MCP tool means what a run's
    does (and its percent of peak is against one core's peak)."""
    from accelopt_mcp.backends.host_facts import quietest_core
    from accelopt_mcp.backends.registry import get_backend

    chosen = dict(options or {})
    if name == "cpu" and chosen.get("cpus") is None:
        chosen["cpus"] = {quietest_core()}
    return get_backend(name, **chosen)
