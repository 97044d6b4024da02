"""Fixtures for the tests that need a real Ray cluster. They run only inside the private network
and pid namespace that tests/test_ray_cluster.py starts them in (the top-level conftest leaves
this folder out everywhere else): Ray binds to the machine's non-loopback address otherwise."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ray_cluster import RayCluster, in_private_network

if not in_private_network():  # pragma: no cover - guarded by the top-level conftest too
    pytest.skip(
        "needs the private network namespace of tests/test_ray_cluster.py", allow_module_level=True
    )


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    """Two nodes (head `node_a` and `node_b`), 1 CPU each, token authentication on; this
    process is a connected driver."""
    cluster = RayCluster(home=tmp_path_factory.mktemp("ray-home"))
    cluster.start()
    import ray

    ray.init(
        address=cluster.address, logging_level="ERROR", log_to_driver=False, namespace="accelopt"
    )
    try:
        yield cluster
    finally:
        ray.shutdown()
        # The namespace's end stops every Ray process; nothing to stop by name.


@pytest.fixture
def work(tmp_path: Path) -> Path:
    return tmp_path
