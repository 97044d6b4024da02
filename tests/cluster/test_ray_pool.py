"""The Ray pool on a real two-node cluster: placement on both nodes with one pinned core per
evaluation, a node killed mid-evaluation, the cluster's token and ports out of a kernel's reach,
and the one-line errors."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest

from accelopt_mcp.backends.cluster import ClusterError, EvaluationLost
from accelopt_mcp.backends.cpu import CpuBackend
from accelopt_mcp.backends.nki import NkiBackend
from accelopt_mcp.backends.placement import open_pool
from accelopt_mcp.backends.ray_pool import RayPool
from accelopt_mcp.models import BenchmarkConfig
from tests.backends.test_cpu_backend import python_solution, scale_task
from tests.backends.test_pool import PINNED_KERNEL
from tests.ray_cluster import RayCluster, occupy, wait_until

CONFIG = BenchmarkConfig(
    warmup_runs=1, iterations=3, min_processes=1, max_processes=1, max_timing_seconds=1
)
ACCELOPT = os.path.join(os.path.dirname(sys.executable), "accelopt")


def node_names(ray: Any) -> dict[str, str]:
    """Ray node id -> our name for it (its custom resource)."""
    names = {}
    for node in ray.nodes():
        for key in node.get("Resources", {}):
            if key.startswith("node_") and not key.startswith("node:"):
                names[node["NodeID"]] = key
    return names


def test_evaluations_land_on_every_node_each_on_one_pinned_core(ray_cluster: RayCluster) -> None:
    import ray

    with open_pool(CpuBackend.info, cluster=ray_cluster.address) as pool:
        assert isinstance(pool, RayPool) and pool.size == 2
        assert "Ray cluster at 127.0.0.1" in pool.where
        results = pool.map(CpuBackend, [(scale_task(), python_solution(PINNED_KERNEL))] * 6, CONFIG)
    # PINNED_KERNEL is correct only when its process is pinned to exactly one core.
    assert all(r.evaluation.passed for r in results), [r.evaluation.log[-500:] for r in results]
    names = node_names(ray)
    assert {names[r.node] for r in results if r.node} == {"node_a", "node_b"}
    assert all(r.tries == 1 for r in results)
    assert all(r.evaluation.environment.hardware.startswith("cpu/") for r in results)
    # No two evaluations shared a core of this host at the same time.
    by_core: dict[str, list[tuple[float, float]]] = {}
    for r in results:
        by_core.setdefault(r.device.split("/")[-1], []).append((r.started_at, r.finished_at))
    for spans in by_core.values():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))


SLOW_KERNEL = textwrap.dedent(
    """
    import time
    import numpy as np

    def run(x, scale):
        time.sleep(0.4)
        return x * np.float32(scale) + np.float32(1.0)
    """
)


def test_a_node_killed_mid_evaluation_is_retried_on_another(ray_cluster: RayCluster) -> None:
    import ray

    ray_cluster.add_node("node_c")
    try:
        # Both other nodes busy for a while: the evaluation can only start on node_c.
        blockers = occupy(("node_a", "node_b"), 8)
        pool = RayPool(ray_cluster.address, CpuBackend.info)
        assert pool.size == 3
        future = pool.submit(CpuBackend, scale_task(), python_solution(SLOW_KERNEL), CONFIG)
        assert wait_until(lambda: pool.busy() == 1, 10)
        time.sleep(2.5)  # well into the evaluation on node_c
        ray_cluster.kill_node("node_c")
        result = future.result(timeout=120)
        pool.close()
        ray.get(blockers)
    finally:
        ray_cluster.nodes.pop("node_c", None)
    assert result.evaluation.passed, result.evaluation.log[-800:]
    assert result.tries == 2
    assert node_names(ray)[result.node or ""] in ("node_a", "node_b")


def test_an_evaluation_lost_with_no_tries_left_is_said_not_recorded(
    ray_cluster: RayCluster,
) -> None:
    import ray

    from accelopt_mcp.backends import ray_pool

    ray_cluster.add_node("node_d")
    try:
        blockers = occupy(("node_a", "node_b"), 8)
        # Every device busy: what the cluster runs is still asked and answered at once.
        ray_pool._hardware_seen.clear()
        with RayPool(ray_cluster.address, CpuBackend.info) as probe:
            started = time.monotonic()
            assert (probe.hardware() or "").startswith("cpu/")
            assert time.monotonic() - started < 30
        pool = RayPool(ray_cluster.address, CpuBackend.info, retries=0)
        future = pool.submit(CpuBackend, scale_task(), python_solution(SLOW_KERNEL), CONFIG)
        assert wait_until(lambda: pool.busy() == 1, 10)
        time.sleep(2.5)
        ray_cluster.kill_node("node_d")
        with pytest.raises(EvaluationLost) as caught:
            future.result(timeout=120)
        pool.close()
        ray.get(blockers)
    finally:
        ray_cluster.nodes.pop("node_d", None)
    message = str(caught.value)
    assert "after 1 try" in message and ray_cluster.address in message and "\n" not in message


# Tries everything a kernel on a cluster node might use to reach the cluster: the token in its
# environment or any process's, the token file, and Ray's ports on loopback. Correct only when
# every attempt fails.
REACH_FOR_THE_CLUSTER = textwrap.dedent(
    """
    import glob, os, socket
    import numpy as np

    def _found():
        token = os.environ.get("RAY_AUTH_TOKEN")
        if token:
            return "env"
        for path in glob.glob("/proc/*/environ"):
            try:
                if b"RAY_AUTH_TOKEN" in open(path, "rb").read():
                    return path
            except OSError:
                pass
        for path in glob.glob(os.path.expanduser("~/.ray/*")) + glob.glob("/tmp/ray/*"):
            return path
        for port in (6379, 10001, 8265):
            s = socket.socket()
            s.settimeout(0.5)
            try:
                s.connect(("127.0.0.1", port))
                return f"port {port}"
            except OSError:
                pass
            finally:
                s.close()
        return None

    def run(x, scale):
        found = _found()
        return x * np.float32(scale) + np.float32(1.0 if found is None else 9.0)
    """
)


def test_a_kernel_on_a_node_cannot_reach_the_cluster(ray_cluster: RayCluster) -> None:
    with RayPool(ray_cluster.address, CpuBackend.info) as pool:
        result = pool.submit(
            CpuBackend, scale_task(), python_solution(REACH_FOR_THE_CLUSTER), CONFIG
        ).result(timeout=120)
    assert result.evaluation.passed, result.evaluation.log[-800:]
    assert ray_cluster.token not in result.evaluation.log


def test_a_backend_without_devices_on_the_cluster_is_one_line(ray_cluster: RayCluster) -> None:
    with pytest.raises(ClusterError) as caught:
        RayPool(ray_cluster.address, NkiBackend.info)
    message = str(caught.value)
    assert "no neuron_cores" in message and ray_cluster.address in message
    assert "\n" not in message


def accelopt(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ACCELOPT, *args], capture_output=True, text=True, timeout=120, env=env)


def test_backends_lists_every_node_with_its_devices(ray_cluster: RayCluster) -> None:
    done = accelopt("backends", "--cluster", ray_cluster.address, "--json")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["cluster"] == ray_cluster.address
    nodes = {next(k for k in n["devices"] if k.startswith("node_")): n for n in found["nodes"]}
    assert {"node_a", "node_b"} <= set(nodes)
    for node in nodes.values():
        assert node["devices"]["CPU"] == 1
        assert node["backends"] == ["cpu"]  # no GPU or NeuronCore here
        assert {a["name"] for a in node["availability"]} == {"cpu", "nki", "flashinfer"}
    table = accelopt("backends", "--cluster", ray_cluster.address)
    assert table.returncode == 0 and "live node(s)" in table.stdout


def test_an_unreachable_cluster_is_one_line_naming_it() -> None:
    started = time.monotonic()
    done = accelopt("backends", "--cluster", "127.0.0.1:6390")
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "127.0.0.1:6390" in lines[0], done.stderr
    assert time.monotonic() - started < 60  # not Ray's minutes of retries


def test_a_driver_without_the_token_is_refused(ray_cluster: RayCluster) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_TOKEN"}
    env["HOME"] = str(ray_cluster.home / "no-token-here")
    done = accelopt("backends", "--cluster", ray_cluster.address, env=env)
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert ray_cluster.address in last and "token" in last
    assert ray_cluster.token not in done.stderr + done.stdout


def test_profile_on_the_cluster_stores_the_result_here(ray_cluster: RayCluster, work: Any) -> None:
    from tests.mcp.conftest import NKIBENCH_DIR

    task = NKIBENCH_DIR / "reference" / "silu_M512_N1024_numpy_0.py"
    kernel = NKIBENCH_DIR / "kernels" / "silu_M512_N1024_0.py"
    db = str(work / "kernels.db")
    done = accelopt(
        "profile",
        str(kernel),
        "--task",
        str(task),
        "--cluster",
        ray_cluster.address,
        "--store",
        db,
        "--iterations",
        "3",
        "--max-timing",
        "1",
        "--json",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    outcome = json.loads(done.stdout)
    assert outcome["evaluation"]["status"] == "PASSED"
    assert outcome["profile_id"]
