"""A real Ray cluster of several nodes on this machine, for tests that run inside a private
network and pid namespace (tests/test_ray_cluster.py starts them in one).

Every node has 1 CPU and a custom resource named after it (`node_a`, `node_b`, ...), so where a
task ran is visible. Token authentication is on (RAY_AUTH_MODE=token, a fresh token per
cluster); the token is put in this process's environment, so drivers started here (CLI runs,
job workers) inherit it. Nodes are found and killed by their raylet's node-manager port, never
by name; the namespace ends every Ray process when its first process exits.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RAY = str(Path(sys.executable).with_name("ray"))
IN_NETNS_ENV = "ACCELOPT_IN_NETNS"
GCS_PORT = 6379
# Node deaths are noticed within ~3 s rather than Ray's default ~30 s.
_FAST_HEALTH = {
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
    "RAY_health_check_timeout_ms": "1000",
}


def in_private_network() -> bool:
    """Whether this process runs where tests may start Ray: only loopback exists here."""
    if os.environ.get(IN_NETNS_ENV) != "1":
        return False
    # /sys/class/net would show the namespace sysfs was mounted in; this asks the kernel.
    return [name for _, name in socket.if_nameindex()] == ["lo"]


@dataclass
class RayCluster:
    home: Path
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    nodes: dict[str, int] = field(default_factory=dict)
    """Node name -> its raylet's node-manager port."""
    _next_port: int = 46100

    @property
    def address(self) -> str:
        return f"127.0.0.1:{GCS_PORT}"

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "HOME": str(self.home),
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": self.token,
            "RAY_USAGE_STATS_ENABLED": "0",
            **_FAST_HEALTH,
        }

    def _ray_start(self, name: str, *args: str) -> None:
        port = self._next_port
        self._next_port += 10
        command = [
            RAY,
            "start",
            *args,
            "--node-ip-address=127.0.0.1",
            "--num-cpus=1",
            f'--resources={{"{name}": 1}}',
            f"--node-manager-port={port}",
            "--disable-usage-stats",
        ]
        done = subprocess.run(command, env=self.env(), capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"ray start for {name} failed: {done.stdout}\n{done.stderr}")
        self.nodes[name] = port

    def start(self, nodes: int = 2) -> None:
        """The head (`node_a`) and nodes-1 more (`node_b`, ...)."""
        self.home.mkdir(parents=True, exist_ok=True)
        self._ray_start("node_a", "--head", f"--port={GCS_PORT}", "--include-dashboard=false")
        for index in range(1, nodes):
            self.add_node(f"node_{chr(ord('a') + index)}")
        # This process and everything it starts talk to the cluster with its token.
        os.environ.update({k: v for k, v in self.env().items() if k.startswith("RAY_")})

    def add_node(self, name: str) -> None:
        self._ray_start(name, f"--address={self.address}")
        self.wait_for_nodes(len(self.nodes))

    def raylet_pids(self, name: str) -> list[int]:
        marker = f"--node_manager_port={self.nodes[name]}"
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if marker in command:
                found.append(int(entry.name))
        return found

    def kill_node(self, name: str) -> None:
        """SIGKILL the node's raylet and every process it started (its workers)."""
        raylets = self.raylet_pids(name)
        children = [
            int(entry.name)
            for entry in Path("/proc").iterdir()
            if entry.name.isdigit() and _parent_of(int(entry.name)) in raylets
        ]
        for pid in raylets + children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        del self.nodes[name]

    def wait_for_nodes(self, count: int, within_s: float = 60.0) -> None:
        """Until the cluster has exactly `count` live nodes (from a throwaway driver)."""
        code = (
            "import ray, sys, time\n"
            f"ray.init(address='{self.address}', logging_level='ERROR')\n"
            f"deadline = time.monotonic() + {within_s}\n"
            "while time.monotonic() < deadline:\n"
            "    alive = sum(1 for n in ray.nodes() if n.get('Alive'))\n"
            f"    if alive == {count}: sys.exit(0)\n"
            "    time.sleep(0.2)\n"
            "sys.exit(f'{alive} live nodes')\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], env=self.env(), capture_output=True, text=True
        )
        if done.returncode != 0:
            raise RuntimeError(f"the cluster never had {count} live nodes: {done.stderr[-2000:]}")


def _parent_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def wait_until(predicate: Callable[[], bool], within_s: float, step_s: float = 0.1) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step_s)
    return False


def occupy(names: Iterable[str], seconds: float) -> list[Any]:
    """Hold the one CPU of each named node for `seconds`; the refs to wait on."""
    import ray

    def hold(seconds: float) -> None:  # defined in here, so it travels by value
        import time

        time.sleep(seconds)

    return [ray.remote(num_cpus=1, resources={name: 1})(hold).remote(seconds) for name in names]
