"""Per-run control groups: a process limit, a freezer, a CPU set, and finding every process a
run started, wherever it moved. Shared by the sandbox (one-shot children) and the jail
(long-lived ones).

Each group is made as a child of the caller's own group in its hierarchy (a child of the
hierarchy's root when that is not visible), so a caller that is itself confined (the cpu harness
runs inside a sandbox's pids group) keeps its children inside its own limits. Group names carry
the pid namespace and the owner's pid and start time (a reused pid is not the owner), so that
`remove_stale_groups` can tell which ones nobody will ever remove: groups of an owner killed
mid-run (a crash, the OOM killer, kill -9 of the CLI), whose processes may still be running (or
frozen, which in a cgroup-v1 freezer means they cannot even die) inside. The sweep needs nothing
of the dead owner: every sandbox and jail start runs it, and so do `accelopt` and the MCP server
at start-up. And none of that waits for a next start: the first group a process makes also
starts its reaper (`ensure_reaper`), a detached watcher that outlives it, waits for it to die,
then kills, thaws and removes whatever groups it left (see `reap_after`).

This module imports only the standard library, and must keep to it: the reaper runs it alone,
in a bare `python -I -S`.

A memory group per run (`MemoryGroup`, v1 `memory`; in v2 `memory.max` on the run's group)
holds every process of the run and every tmpfs page they touched (/tmp, /dev/shm, a tmpfs work
dir: shmem pages are charged to the group of the task that first faults them in) to one limit,
and keeps the true peak of all of it together.

Over ~600 lines for one reason: five controllers (pids, freezer, cpuset, cpuacct, memory) on two
hierarchies (cgroup v1 and v2), and the orphan sweep that must know all of them; each is short,
and they share the group naming and the owner bookkeeping.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
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


def _stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat from field 3 (the state) on; [] when gone."""
    text = _read(Path(f"/proc/{pid}/stat"))
    if text is None:
        return []
    # The command name (field 2) may hold spaces and parentheses: count from its end.
    return text[text.rfind(")") + 2 :].split()


def start_time(pid: int) -> str | None:
    """`pid`'s start time (clock ticks since boot, /proc/PID/stat field 22), None when gone."""
    fields = _stat_fields(pid)
    return fields[19] if len(fields) > 19 else None


def owner_alive(name: str) -> bool:
    """Whether the owner named in a group's name (after the prefix: PID.START-..., or the
    older PID-...) is still the same running process (a zombie is not: it will never remove
    anything again)."""
    owner = name.split("-")[0]
    pid, _, started = owner.partition(".")
    if not pid.isdigit():
        return True  # not a name of ours: never touch it
    fields = _stat_fields(int(pid))
    if len(fields) <= 19 or fields[0] in ("Z", "X"):
        return False
    return not started or fields[19] == started


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
        owner = f"{os.getpid()}.{start_time(os.getpid()) or 0}"
        path = parent / f"{group_prefix()}{owner}-{uuid.uuid4().hex[:12]}"
        try:
            path.mkdir()
        except OSError:
            return None
        ensure_reaper()
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


def _count(text: str | None, key: str) -> int:
    """The value of `key` in a flat-keyed control file ("oom_kill 3"), 0 when absent."""
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


class MemoryGroup(Group):
    """A cgroup-v1 `memory` group: one limit for all of a run's processes together with the
    tmpfs pages they touched, where RLIMIT_AS only caps each process's address space."""

    @classmethod
    def make(cls, limit_mb: int) -> MemoryGroup | None:
        group = cls.create(v1_parent("memory"))
        if group is None:
            return None
        limit = str(limit_mb << 20)
        if not group.write("memory.limit_in_bytes", limit):
            group.remove(1)
            return None
        # No swap beyond the limit either, where swap accounting is on (memsw must be >= the
        # memory limit, hence written after it).
        if (group.path / "memory.memsw.limit_in_bytes").exists():
            group.write("memory.memsw.limit_in_bytes", limit)
        return group

    def peak_mb(self) -> float | None:
        """The most the whole group ever held at once (processes, tmpfs, page cache)."""
        text = self.read("memory.max_usage_in_bytes")
        return int(text) / (1 << 20) if text is not None and text.strip().isdigit() else None

    def limit_hit(self) -> bool:
        """The group's OOM killer ran, or it is stuck at the limit (a tmpfs the killer cannot
        empty) ."""
        control = self.read("memory.oom_control")
        if _count(control, "oom_kill") > 0 or _count(control, "under_oom") > 0:
            return True
        # Reached the limit at all (memory.failcnt counts every charge refused there, even one
        # that reclaim then absorbed): a busy host's reclaim can keep a jail alive at exactly
        # its limit, which is no pass. The peak at the limit says the same.
        failed = self.read("memory.failcnt")
        return failed is not None and failed.strip().isdigit() and int(failed) > 0


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

    def set_memory_limit(self, limit_mb: int) -> bool:
        """memory.max (and no swap) where the parent delegates the memory controller."""
        if not (self.path / "memory.max").exists():
            return False
        if (self.path / "memory.swap.max").exists():
            self.write("memory.swap.max", "0")
        return self.write("memory.max", str(limit_mb << 20))

    def peak_mb(self) -> float | None:
        """memory.peak (kernel 5.19+): the group's most at once, tmpfs pages included."""
        text = self.read("memory.peak")
        return int(text) / (1 << 20) if text is not None and text.strip().isdigit() else None

    def memory_limit_hit(self) -> bool:
        events = self.read("memory.events")
        # "max": charges that reached memory.max, absorbed by reclaim or not (as v1's failcnt).
        return any(_count(events, key) > 0 for key in ("oom_kill", "oom", "max"))

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


def owners_checkable() -> bool:
    """Whether an owner pid read from a group's or a work dir's name can be looked up here:
    /proc is there (the pid namespace is known) and answers for this process's namespace
    (/proc/self names our pid). Not so in a new pid namespace that did not mount its own
    /proc: a pid would be looked up among another namespace's processes, and a live owner
    taken for dead. The sweeps of what dead owners left stand down then."""
    if pid_namespace() == "0":
        return False
    try:
        return os.readlink("/proc/self") == str(os.getpid())
    except OSError:
        return False


def _stale_groups() -> list[Group]:
    if not owners_checkable():
        return []
    prefix = group_prefix()
    controllers = ("pids", "freezer", "cpuset", "cpuacct", "memory")
    parents = [v1_parent(c) for c in controllers] + [v2_parent()]
    stale: list[Group] = []
    for parent in parents:
        if parent is None:
            continue
        try:
            found = list(parent.glob(f"{prefix}*"))
        except OSError:
            continue
        for path in found:
            if not owner_alive(path.name.removeprefix(prefix)):
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


# -- the reaper: nothing outlives its owner's death

# Runs with `python -I -S -c`: forks once more and lets the middle process exit, so that the
# watcher is nobody's child (no zombie for the owner to reap, no PDEATHSIG, reparented to the
# host's reaper), then loads this very file (nothing else of the package) and waits.
_REAPER = r"""
import os, sys
if os.fork():
    os._exit(0)
import importlib.util
spec = importlib.util.spec_from_file_location("accelopt_cgroups_reaper", sys.argv[2])
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
spec.loader.exec_module(module)
module.reap_after(int(sys.argv[3]), sys.argv[4], module.json.loads(sys.argv[5]))
"""
REAPER_TAG = "accelopt-reaper"
"""argv[1] of every reaper (then the owner's pid and start time): how to find one in /proc."""
_REAPER_SWEEP_S = 60.0
"""How long a reaper keeps at a group that will not empty (a process stuck in the kernel)."""

_reaper_lock = threading.Lock()
_reaper_for: int | None = None
"""The pid whose reaper is running: a forked child is another owner and gets its own."""


def _new_lock_after_fork() -> None:
    global _reaper_lock
    _reaper_lock = threading.Lock()  # another thread may have held it at the fork


os.register_at_fork(after_in_child=_new_lock_after_fork)


def _all_parents() -> list[Path]:
    """Every directory per-run groups of this process are made in (see `_stale_groups`)."""
    controllers = ("pids", "freezer", "cpuset", "cpuacct", "memory")
    found = [v1_parent(c) for c in controllers] + [v2_parent()]
    return list(dict.fromkeys(p for p in found if p is not None))


def ensure_reaper() -> None:
    """Start this process's reaper unless it runs already. Called by every `Group.create`, so
    that wherever a group exists, its owner's death (SIGKILL, the OOM killer: nothing of the
    owner runs then) still ends everything in it. Never raises: without a reaper, the next
    start's sweep (`remove_stale_groups`) is the fallback."""
    global _reaper_for
    pid = os.getpid()
    if _reaper_for == pid:
        return
    with _reaper_lock:
        if _reaper_for == pid:
            return
        if _start_reaper(pid):
            _reaper_for = pid


def _start_reaper(pid: int) -> bool:
    started = start_time(pid)
    if started is None or not sys.executable:
        return False
    parents = json.dumps([str(p) for p in _all_parents()])
    argv = [sys.executable, "-I", "-S", "-c", _REAPER, REAPER_TAG, __file__, str(pid), started]
    try:
        middle = subprocess.Popen(
            [*argv, parents],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            start_new_session=True,
            cwd="/",
        )
    except (OSError, subprocess.SubprocessError):
        return False
    try:
        # Only the interpreter's start and one fork: the watcher itself goes on alone.
        return middle.wait(timeout=30) == 0
    except subprocess.TimeoutExpired:
        return True


def _running(pid: int, started: str) -> bool:
    """`pid` is still the process that started at `started`, and not a zombie."""
    fields = _stat_fields(pid)
    return len(fields) > 19 and fields[19] == started and fields[0] not in ("Z", "X")


def _wait_for_death(pid: int, started: str) -> None:
    """Block until the owner has exited (or was never there any more)."""
    fd: int | None
    try:
        fd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        fd = None
    try:
        if not _running(pid, started):
            return  # gone already, or the pid names someone else now
        if fd is not None:
            # A pidfd is readable once the process has exited (a zombie counts).
            with contextlib.suppress(OSError):
                select.select([fd], [], [])
                return
        while _running(pid, started):
            time.sleep(0.25)
    finally:
        if fd is not None:
            os.close(fd)


def reap_after(pid: int, started: str, parents: list[str]) -> None:
    """The reaper's body: wait for the owner `pid` (started at `started`, clock ticks) to die,
    then sweep its groups in `parents` (and this process's own view of them): SIGKILL every
    process inside, thaw them (a frozen v1 process cannot die), cgroup.kill in v2, and remove
    the groups once empty. Groups of other owners that are dead by then are swept as well: an
    owner that lived inside one of these (the cpu harness in the sandbox's pids group) died
    with it, and its own reaper may have died with it too."""
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(signum, signal.SIG_IGN)
    _wait_for_death(pid, started)
    roots = list(dict.fromkeys([*map(Path, parents), *_all_parents()]))
    sweep_owner(f"{pid}.{started}", roots, timeout_s=_REAPER_SWEEP_S)


def sweep_owner(owner: str, parents: Iterable[Path], *, timeout_s: float) -> bool:
    """Kill, thaw and remove every group of the dead `owner` ("PID.START") and every other
    stale group under `parents`, over and over until none is left; False when some were still
    there after `timeout_s`. The calling process is never killed, even from inside one.

    Not done until every process it killed is dead too: one of them may own groups of its own
    (the harness in the sandbox's pids group, whose reaper lived there as well and died with
    it), which are stale, and so swept here, only from then on."""
    prefix = group_prefix()
    roots = list(parents)
    victims: dict[int, str] = {}
    deadline = time.monotonic() + timeout_s
    while True:
        found: list[Group] = []
        for parent in roots:
            try:
                paths = list(parent.glob(f"{prefix}*"))
            except OSError:
                continue
            for path in paths:
                name = path.name.removeprefix(prefix)
                if name.startswith(f"{owner}-") or not owner_alive(name):
                    found.append(Group(path))
        if not found and not any(_running(p, s) for p, s in victims.items()):
            return True
        for group in found:
            victims.update(_end_group(group))
        for group in found:
            group.remove(attempts=1)
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)


def _end_group(group: Group) -> dict[int, str]:
    """SIGKILL everything in `group` (and below) but the caller, and let it die: thaw it (the
    v1 freezer of each process too, wherever it is) and, in v2, cgroup.kill. Returns what it
    killed (pid -> start time)."""
    me = os.getpid()
    dirs = group._dirs()
    inside = group.pids()
    killed = {p: t for p in inside if p != me and (t := start_time(p)) is not None}
    kill_pids(killed)
    for path in dirs:
        if (path / "freezer.state").exists():
            _write(path / "freezer.state", "THAWED")
        if (path / "cgroup.freeze").exists():
            _write(path / "cgroup.freeze", "0")
        if me not in inside and (path / "cgroup.kill").exists():
            _write(path / "cgroup.kill", "1")
    return killed
