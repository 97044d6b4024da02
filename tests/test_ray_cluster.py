"""Runs tests/cluster (a real multi-node Ray cluster) inside a private network and pid
namespace: `unshare --net --pid --fork --mount-proc`, loopback up, the test driver inside too.
Outside one, Ray binds and connects to the machine's non-loopback address, and tests send
traffic to loopback only; the pid namespace ends every Ray process when it exits. Also: the
local pool without Ray, and that nothing imports Ray unless a cluster is asked for."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from accelopt_mcp.backends.cluster import ClusterError, cluster_address
from accelopt_mcp.backends.cpu import CpuBackend
from accelopt_mcp.backends.placement import open_pool
from accelopt_mcp.backends.pool import DevicePool
from tests.ray_cluster import IN_NETNS_ENV

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(900)
def test_the_cluster_suite_in_a_private_network() -> None:
    if shutil.which("unshare") is None or shutil.which("ip") is None or os.geteuid() != 0:
        pytest.skip("needs root, unshare and ip for a private network namespace")
    inner = (
        'ip link set lo up && "$0" -m pytest tests/cluster -q -p no:cacheprovider '
        "-o addopts= --timeout 300 -rfE"
    )
    env = {**os.environ, IN_NETNS_ENV: "1"}
    done = subprocess.run(
        ["unshare", "--net", "--pid", "--fork", "--mount-proc", "sh", "-c", inner, sys.executable],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=850,
    )
    tail = (done.stdout + done.stderr)[-6000:]
    assert done.returncode == 0, tail
    assert " passed" in done.stdout and "skipped" not in done.stdout.splitlines()[-1], tail


def test_without_a_cluster_the_pool_is_this_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACCELOPT_RAY_ADDRESS", raising=False)
    for given in (None, "local", " none "):
        with open_pool(CpuBackend.info, workers=1, cluster=given) as pool:
            assert isinstance(pool, DevicePool) and pool.size == 1 and pool.local
    monkeypatch.setenv("ACCELOPT_RAY_ADDRESS", "local")
    assert cluster_address(None) is None
    monkeypatch.setenv("ACCELOPT_RAY_ADDRESS", "head:6379")
    assert cluster_address(None) == "head:6379" and cluster_address("local") is None


def test_a_closed_cluster_port_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    # Port 1 on loopback: refused at once, nothing leaves the machine.
    monkeypatch.setenv("ACCELOPT_RAY_ADDRESS", "127.0.0.1:1")
    with pytest.raises(ClusterError) as caught:
        open_pool(CpuBackend.info)
    message = str(caught.value)
    assert "127.0.0.1:1" in message and "\n" not in message


def test_nothing_imports_ray_unless_a_cluster_is_asked_for() -> None:
    code = (
        "import sys\n"
        "import accelopt_mcp.cli, accelopt_mcp.server, accelopt_mcp.engine.beam\n"
        "from accelopt_mcp.backends.placement import open_pool\n"
        "from accelopt_mcp.backends.cpu import CpuBackend\n"
        "open_pool(CpuBackend.info, workers=1, cluster='local').close()\n"
        "assert 'ray' not in sys.modules, 'ray was imported'\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "ACCELOPT_RAY_ADDRESS"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
