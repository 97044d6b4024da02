"""Profiling on a Ray cluster against this host's pool, side by side in one run.

    .venv/bin/python benchmarks/bench_ray.py [--evaluations 40]

Runs itself inside a private network and pid namespace (`unshare --net --pid --fork
--mount-proc`, as root), where it starts a real Ray cluster on loopback (token authentication
on) and ends with it. Every evaluation is the real cpu backend (jail, reference, candidate,
correctness and timing) of a kernel that spends ~150 ms per call mostly waiting, so that two
1-CPU Ray nodes on a 2-core host are not limited by the host's cores, only by the pool.
Reported:
- local: the evaluations on this host's pool with 1 worker (DevicePool);
- ray_1_node: the same on a one-node cluster (1 CPU): the overhead Ray adds per evaluation;
- ray_2_nodes: the same with a second node (1 CPU): the scaling, target >= 1.8x over one node.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.ray_cluster import IN_NETNS_ENV, RayCluster, in_private_network  # noqa: E402

KERNEL = textwrap.dedent(
    """
    import time
    import numpy as np

    def run(x, scale):
        time.sleep(0.15)
        return x * np.float32(scale) + np.float32(1.0)
    """
)


def timed(pool: object, jobs: list[object], config: object) -> tuple[float, list[object]]:
    from accelopt_mcp.backends.cpu import CpuBackend

    start = time.monotonic()
    results = pool.map(CpuBackend, jobs, config)  # type: ignore[attr-defined]
    return time.monotonic() - start, results


def inside(evaluations: int) -> None:
    from accelopt_mcp.backends.pool import DevicePool
    from accelopt_mcp.backends.ray_pool import RayPool
    from accelopt_mcp.models import BenchmarkConfig
    from tests.backends.test_cpu_backend import python_solution, scale_task

    config = BenchmarkConfig(
        seeds=[0], warmup_runs=0, iterations=2, min_processes=1, max_processes=1,
        max_measurement_rounds=1, max_timing_seconds=0.5,
    )  # fmt: skip
    jobs = [(scale_task(), python_solution(KERNEL))] * evaluations
    figures: dict[str, float | int | str] = {"evaluations": evaluations}

    with DevicePool.for_cpu(1) as local:
        timed(local, jobs[:2], config)  # warm: imports, the jail probe
        figures["local_1_worker_s"], results = timed(local, jobs, config)
    assert all(r.evaluation.passed for r in results)  # type: ignore[attr-defined]

    cluster = RayCluster(home=Path(tempfile.mkdtemp(prefix="bench-ray-")))
    cluster.start(nodes=1)
    import ray  # after the cluster's token is in the environment: Ray reads it once

    with RayPool(cluster.address, _cpu_info()) as one:
        timed(one, jobs[:2], config)  # warm the node's worker
        figures["ray_1_node_s"], results = timed(one, jobs, config)
    assert all(r.evaluation.passed for r in results)  # type: ignore[attr-defined]
    cluster.add_node("node_b")
    with RayPool(cluster.address, _cpu_info()) as two:
        timed(two, jobs[:4], config)
        figures["ray_2_nodes_s"], results = timed(two, jobs, config)
    assert all(r.evaluation.passed for r in results)  # type: ignore[attr-defined]
    nodes = {r.node for r in results}  # type: ignore[attr-defined]
    ray.shutdown()

    figures["nodes_used"] = len(nodes)
    figures["scaling_2_over_1"] = round(
        float(figures["ray_1_node_s"]) / float(figures["ray_2_nodes_s"]), 2
    )
    figures["ray_overhead_ms_per_evaluation"] = round(
        1000 * (float(figures["ray_1_node_s"]) - float(figures["local_1_worker_s"])) / evaluations,
        1,
    )
    figures["ms_per_evaluation_local"] = round(
        1000 * float(figures["local_1_worker_s"]) / evaluations, 1
    )
    for key in ("local_1_worker_s", "ray_1_node_s", "ray_2_nodes_s"):
        figures[key] = round(float(figures[key]), 2)
    print(json.dumps(figures, indent=2))
    targets = [
        ("2 nodes >= 1.8x one node", float(figures["scaling_2_over_1"]) >= 1.8),
        ("evaluations on both nodes", figures["nodes_used"] == 2),
    ]
    for name, ok in targets:
        print(f"{'PASS' if ok else 'MISS'}  {name}")


def _cpu_info() -> object:
    from accelopt_mcp.backends.cpu import CpuBackend

    return CpuBackend.info


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--evaluations", type=int, default=40)
    args = parser.parse_args()
    if in_private_network():
        inside(args.evaluations)
        return
    if shutil.which("unshare") is None or os.geteuid() != 0:
        sys.exit("needs root and util-linux unshare (a private network namespace for Ray)")
    inner = 'ip link set lo up && "$0" "$1" --evaluations "$2"'
    done = subprocess.run(
        ["unshare", "--net", "--pid", "--fork", "--mount-proc", "sh", "-c", inner,
         sys.executable, __file__, str(args.evaluations)],
        env={**os.environ, IN_NETNS_ENV: "1"},
        cwd=REPO,
    )  # fmt: skip
    sys.exit(done.returncode)


if __name__ == "__main__":
    main()
