"""Per-run control groups: a process limit, a freezer, a CPU set, and finding every process a
run started, wherever it moved. Shared by the sandbox (one-shot children) and the jail
(long-lived ones).

Each group is made as a child of the caller's own group in its hierarchy (a child of the
hierarchy's root when that is not visible), so a caller that is itself confined (the cpu harness
runs inside a sandbox's pids group) keeps its children inside its own limits. Group names carry
the pid namespace and the owner's pid, so that `remove_stale_groups` can tell which ones nobody
will ever remove: groups of an owner killed mid-run, whose processes may still be running (or
frozen, which in a cgroup-v1 freezer means they cannot even die) inside.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar, Literal, Self

CGROUP_ROOT = Path("/sys/fs/cgroup")


def pid_namespace() -> str:
    """The inode number of this process's pid namespace ("0" when unreadable)."""
    try:
        return "".join(filter(str.isdigit, os.readlink("/proc/self/ns/pid"))) or "0"
    except OSError:
        return "0"


def group_prefix() -> str:
    """Names of per-run groups start with this, then the owner's pid. The pid namespace is in
    it so that a sweep never takes another namespace's (unknown to our /proc) for stale."""
    return f"accelopt-sandbox-{pid_namespace()}-"


def _own_groups() -> dict[str, str]:
    """controller -> this process's group path in that hierarchy ("" for cgroup v2)."""
    found: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(",") if parts[1] else [""]:
            found[controller] = parts[2]
    return found


def v1_parent(controller: str) -> Path | None:
    """Where per-run groups of a cgroup-v1 `controller` are made, or None when this host has no
    such writable hierarchy."""
    root = CGROUP_ROOT / controller
    if not (root / "cgroup.procs").exists() or not os.access(root, os.W_OK):
        return None
    own = root / _own_groups().get(controller, "/").lstrip("/")
    # Without a cgroup namespace a container sees its own path, which its mount does not have.
    return own if own.is_dir() and os.access(own, os.W_OK) else root


def v2_parent() -> Path | None:
    """Where per-run cgroup-v2 groups are made (under this process's own group, since v2 only
    lets us move processes within a subtree we can write), or None."""
    for mount in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
        if (mount / "cgroup.controllers").exists():
            break
    else:
        return None
    own = mount / _own_groups().get("", "/").lstrip("/")
    if (own / "cgroup.procs").exists() and os.access(own, os.W_OK):
        return own
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
    except OSError:
        return False
    return True


class Group:
    """One per-run group in one hierarchy."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, parent: Path | None) -> Self | None:
        """A fresh group under `parent`, or None when it cannot be made."""
        if parent is None:
            return None
        path = parent / f"{group_prefix()}{os.getpid()}-{uuid.uuid4().hex[:12]}"
        try:
            path.mkdir()
        except OSError:
            return None
        return cls(path)

    @property
    def procs_file(self) -> str:
        return str(self.path / "cgroup.procs")

    def read(self, name: str) -> str | None:
        return _read(self.path / name)

    def write(self, name: str, value: str) -> bool:
        return _write(self.path / name, value)

    def _dirs(self) -> list[Path]:
        """This group and every group below it (a jailed caller may have made some)."""
        found = [self.path]
        with contextlib.suppress(OSError):
            for root, dirs, _ in os.walk(self.path):
                found.extend(Path(root) / d for d in dirs)
        return found

    def pids(self) -> list[int]:
        """Every process in this group or below it."""
        found: list[int] = []
        for path in self._dirs():
            text = _read(path / "cgroup.procs") or ""
            found.extend(int(p) for p in text.split() if p.isdigit())
        return found

    def remove(self, attempts: int = 100) -> bool:
        """Remove the group (deepest groups first) once its processes are gone."""
        for _ in range(attempts):
            for path in reversed(self._dirs()):
                with contextlib.suppress(OSError):
                    path.rmdir()
            if not self.path.exists():
                return True
            time.sleep(0.01)
        return False


class PidsGroup(Group):
    """A cgroup-v1 `pids` group: a cap on processes and threads that also binds root."""

    @classmethod
    def make(cls, max_processes: int | None) -> PidsGroup | None:
        group = cls.create(v1_parent("pids"))
        if group is None or max_processes is None:
            return group
        if not group.write("pids.max", str(max_processes)):
            group.remove(1)
            return None
        return group

    def limit_hit(self) -> bool:
        events = self.read("pids.events") or ""
        return any(line.split()[-1] != "0" for line in events.splitlines() if line.strip())


class CpusetGroup(Group):
    """A cgroup-v1 `cpuset` group: unlike affinity, its CPUs cannot be widened from inside."""

    @classmethod
    def make(cls, cpus: set[int]) -> CpusetGroup | None:
        parent = v1_parent("cpuset")
        group = cls.create(parent)
        if group is None or parent is None:
            return None
        mems = (_read(parent / "cpuset.mems") or "").strip()
        # A new cpuset group has no CPUs and no memory nodes: both must be set before a process
        # may join it.
        if not (
            mems
            and group.write("cpuset.cpus", ",".join(map(str, sorted(cpus))))
            and group.write("cpuset.mems", mems)
        ):
            group.remove(1)
            return None
        return group


class CpuacctGroup(Group):
    """A cgroup-v1 `cpuacct` group: the CPU time of every task that was ever in it, threads and
    processes that already exited included (per-task counters lose those)."""

    @classmethod
    def make(cls) -> CpuacctGroup | None:
        group = cls.create(v1_parent("cpuacct"))
        if group is not None and group.usage_ns() is None:
            group.remove(1)
            return None
        return group

    def usage_ns(self) -> int | None:
        text = self.read("cpuacct.usage")
        return int(text) if text is not None and text.strip().isdigit() else None


class FreezerGroup(Group):
    """A cgroup-v1 `freezer` group. Its processes cannot die while frozen (SIGKILL waits for
    the thaw), which is why everything that kills also thaws."""

    method: ClassVar[Literal["cgroup-v1"]] = "cgroup-v1"

    @classmethod
    def make(cls) -> FreezerGroup | None:
        group = cls.create(v1_parent("freezer"))
        if group is not None and group.read("freezer.state") is None:
            group.remove(1)
            return None
        return group

    def set_frozen(self, frozen: bool, timeout_s: float) -> None:
        want = "FROZEN" if frozen else "THAWED"
        _set_and_wait(
            self.path / "freezer.state", want, self.path / "freezer.state", want, timeout_s
        )


class V2Group(Group):
    """A cgroup-v2 group: freezing (cgroup.freeze, kernel 5.2+), killing (cgroup.kill, 5.14+)
    and, where the parent delegates the controller, a process cap (pids.max)."""

    method: ClassVar[Literal["cgroup-v2"]] = "cgroup-v2"

    @classmethod
    def make(cls, max_processes: int | None) -> V2Group | None:
        group = cls.create(v2_parent())
        if group is None:
            return None
        if group.read("cgroup.freeze") is None:
            group.remove(1)
            return None
        if max_processes is not None and (group.path / "pids.max").exists():
            group.write("pids.max", str(max_processes))
        return group

    def set_frozen(self, frozen: bool, timeout_s: float) -> None:
        value = "1" if frozen else "0"
        _set_and_wait(
            self.path / "cgroup.freeze", value, self.path / "cgroup.events", value, timeout_s
        )

    def kill_all(self) -> None:
        self.write("cgroup.kill", "1")

    def usage_ns(self) -> int | None:
        """CPU time of everything that ever ran in the group (cpu.stat, microseconds)."""
        for line in (self.read("cpu.stat") or "").splitlines():
            name, _, value = line.partition(" ")
            if name == "usage_usec" and value.strip().isdigit():
                return int(value) * 1000
        return None

    def limit_hit(self) -> bool:
        events = self.read("pids.events") or ""
        return any(line.split()[-1] != "0" for line in events.splitlines() if line.strip())


def _set_and_wait(control: Path, value: str, state: Path, want: str, timeout_s: float) -> None:
    """Write `value` to a freezer control file, then poll until the state file says `want`
    (freezer.state: "FROZEN"; cgroup.events: the "frozen" line). Raises TimeoutError."""
    fd = os.open(control, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)
    deadline = time.monotonic() + timeout_s
    spins = 0
    while True:
        fd = os.open(state, os.O_RDONLY)
        try:
            text = os.read(fd, 4096).decode()
        finally:
            os.close(fd)
        if state.name == "cgroup.events":
            reached = f"frozen {want}" in text.splitlines()
        else:
            reached = text.strip() == want
        if reached:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{control} did not reach {want!r} within {timeout_s} s")
        spins += 1
        # Freezing normally completes within microseconds; a task in uninterruptible sleep
        # (disk, page faults) can hold it up, and spinning then only burns a core.
        if spins > 100:
            time.sleep(0.0005)


def _freezer_group_of(pid: int) -> Path | None:
    """The cgroup-v1 freezer group of `pid`, when it is one of ours (never a foreign one)."""
    text = _read(Path(f"/proc/{pid}/cgroup")) or ""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and "freezer" in parts[1].split(","):
            if group_prefix() not in parts[2]:
                return None
            return CGROUP_ROOT / "freezer" / parts[2].lstrip("/")
    return None


def kill_pids(pids: Iterable[int]) -> None:
    """SIGKILL each process, then thaw the freezer groups of ours they are in: a frozen
    process (a jail whose owner died while it was frozen) would otherwise never die."""
    thaw: set[Path] = set()
    have_freezer = (CGROUP_ROOT / "freezer" / "cgroup.procs").exists()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
        if have_freezer:
            group = _freezer_group_of(pid)
            if group is not None:
                thaw.add(group)
    for group in thaw:
        _write(group / "freezer.state", "THAWED")


def _stale_groups() -> list[Group]:
    prefix = group_prefix()
    parents = [v1_parent(c) for c in ("pids", "freezer", "cpuset", "cpuacct")] + [v2_parent()]
    stale: list[Group] = []
    for parent in parents:
        if parent is None:
            continue
        try:
            found = list(parent.glob(f"{prefix}*"))
        except OSError:
            continue
        for path in found:
            owner = path.name.removeprefix(prefix).split("-")[0]
            if owner.isdigit() and not Path(f"/proc/{owner}").exists():
                stale.append(Group(path))
    return stale


def remove_stale_groups() -> None:
    """Per-run groups whose owner died mid-run (a killed server, job worker or harness): kill
    what is still inside, thaw it so that it can die, and remove the groups once empty."""
    stale = _stale_groups()
    if not stale:
        return
    for group in stale:
        kill_pids(group.pids())
        group.write("cgroup.kill", "1")
        group.write("freezer.state", "THAWED")
        group.write("cgroup.freeze", "0")
    for group in stale:
        # Killed processes take a moment to exit; what is still busy goes on the next sweep.
        group.remove(attempts=5)
