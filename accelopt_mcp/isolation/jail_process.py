"""The handle on a running jail: `JailedProcess`, which jail.spawn_jailed returns. It reads
the program's state (exit status, memory and fork limits hit, output, CPU time), freezes and
thaws it, and kills everything it started and removes its cgroups (`JailGroups`, made here
too: which groups a jail gets and what they enforce is this module's to know).

Over ~600 lines for one reason: `JailedProcess` is one lifecycle (reap, read the limits hit,
freeze and thaw, stop, kill and clean up) over the same pid namespace, pidfd and cgroups,
whose steps depend on one another's order (a frozen jail must be thawed before it is killed,
a group read before it is removed); apart, that order would be read in two places."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, Literal

from accelopt_mcp.isolation.cgroups import (
    CpuacctGroup,
    CpusetGroup,
    FreezerGroup,
    Group,
    MemoryGroup,
    PidsGroup,
    V2Group,
    kill_pids,
)
from accelopt_mcp.isolation.sandbox import (
    CappedReader,
    group_members,
    marked_pids,
    memory_suspected,
    process_state,
)

if TYPE_CHECKING:
    import resource

__all__ = ["FreezeMethod", "JailGroups", "JailedProcess", "MemoryLimitBy"]

FreezeMethod = Literal["cgroup-v1", "cgroup-v2", "signals"]
FreezerChoice = Literal["auto", "cgroup-v1", "cgroup-v2", "signals"]
MemoryLimitBy = Literal["cgroup-v1", "cgroup-v2", "rlimit"]
"""What enforces a jail's memory_limit_mb: its memory cgroup (v1 `memory` group, v2
`memory.max`), over all its processes and tmpfs pages together, or, where no such group could
be made, RLIMIT_AS on each process alone."""

_FREEZE_TIMEOUT_S = 10.0


@dataclasses.dataclass(frozen=True)
class JailGroups:
    """The cgroups one jail runs in, each None where this host could not make it. A v2 group
    (the freezer) also counts the jail's processes, CPU time and memory."""

    pids: PidsGroup | None
    freezer: FreezerGroup | V2Group | None
    cpuset: CpusetGroup | None
    """The jail's CPUs, which it cannot widen (None: affinity only)."""
    cpuacct: CpuacctGroup | None
    """The jail's CPU time (v1; a v2 freezer keeps it in cpu.stat)."""
    memory: MemoryGroup | None
    """The jail's one memory limit (v1; a v2 freezer holds it itself)."""
    memory_limit_by: MemoryLimitBy

    @classmethod
    def make(
        cls,
        freezer: FreezerChoice,
        *,
        max_processes: int | None,
        extra_processes: int,
        memory_limit_mb: int,
        cpus: set[int] | None,
    ) -> JailGroups:
        """The groups for a jail of at most `max_processes` (plus `extra_processes` of the
        jail's own: bwrap's) and `memory_limit_mb`, pinned to `cpus`. ValueError when the
        `freezer` asked for by name cannot be made here."""
        pids = PidsGroup.make(
            max_processes + extra_processes if max_processes is not None else None
        )
        frozen_by = _make_freezer(
            freezer, max_processes + extra_processes if max_processes else None
        )
        # One limit for the whole jail (RLIMIT_AS binds each process alone: children and tmpfs
        # files would add up past it); v2 keeps it on the freezer's group.
        memory = None
        memory_limit_by: MemoryLimitBy = "rlimit"
        if isinstance(frozen_by, V2Group):
            if frozen_by.set_memory_limit(memory_limit_mb):
                memory_limit_by = "cgroup-v2"
        else:
            memory = MemoryGroup.make(memory_limit_mb)
            if memory is not None:
                memory_limit_by = "cgroup-v1"
        return cls(
            pids=pids,
            freezer=frozen_by,
            cpuset=CpusetGroup.make(cpus) if cpus else None,
            # The CPU time of the whole jail, for the harness's contention correction.
            cpuacct=None if isinstance(frozen_by, V2Group) else CpuacctGroup.make(),
            memory=memory,
            memory_limit_by=memory_limit_by,
        )

    @property
    def freeze_method(self) -> FreezeMethod:
        return "signals" if self.freezer is None else self.freezer.method

    def memory_peak_mb(self) -> float | None:
        """The most memory the jail held at once, as the group that holds its limit counts it
        (None without one)."""
        if self.memory is not None:
            return self.memory.peak_mb()
        return self.freezer.peak_mb() if isinstance(self.freezer, V2Group) else None

    def memory_limit_hit(self) -> bool:
        """The group that holds the jail's memory limit saw it reached (False without one)."""
        if self.memory is not None:
            return self.memory.limit_hit()
        return isinstance(self.freezer, V2Group) and self.freezer.memory_limit_hit()

    def made(self) -> list[Group]:
        """The groups that exist."""
        every = (self.pids, self.freezer, self.cpuset, self.cpuacct, self.memory)
        return [g for g in every if g is not None]


def _make_freezer(
    freezer: FreezerChoice, max_processes: int | None
) -> FreezerGroup | V2Group | None:
    if freezer == "signals":
        return None
    if freezer in ("auto", "cgroup-v1"):
        v1 = FreezerGroup.make()
        if v1 is not None or freezer == "cgroup-v1":
            if v1 is None:
                raise ValueError("no writable cgroup-v1 freezer hierarchy on this host")
            return v1
    v2 = V2Group.make(max_processes)
    if v2 is None and freezer == "cgroup-v2":
        raise ValueError("no writable cgroup-v2 hierarchy with cgroup.freeze on this host")
    return v2


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):
        return None


def _pids_in_namespace(inode: int) -> list[int]:
    """Host pids of every live process in the pid namespace `inode`. Zombies do not count:
    bwrap's pid 1 is left as one for the host's init to reap, which may take a while."""
    want = f"pid:[{inode}]"
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if os.readlink(f"/proc/{entry.name}/ns/pid") != want:
                    continue
            except OSError:
                continue
            if process_state(entry.name) not in ("", "Z", "X"):
                found.append(int(entry.name))
    return found


def _stopped(pid: int) -> bool:
    """Every thread of `pid` is stopped (or it is gone or a zombie)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    return all(process_state(f"{pid}/task/{tid}") in ("", "T", "t", "Z", "X") for tid in tasks)


class JailedProcess:
    """A running jailed program. End it with `kill()` (or use it as a context manager): that
    kills everything it started and removes its cgroups.

    `returncode` follows subprocess.Popen: None while it runs, the exit code, or -N when signal
    N ended it. Under bwrap, an exit code 128+N also reads as signal N (bwrap reports its
    child's death by a signal that way)."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        argv: list[str],
        *,
        kind: Literal["bwrap", "none"],
        groups: JailGroups,
        work_quota: tuple[str, int] | None = None,
        init_pid: int | None,
        pid_namespace: int | None,
        marker: bytes | None,
        memory_limit_mb: int,
        max_processes: int | None,
        stdout_limit_bytes: int,
        stderr_limit_bytes: int,
    ) -> None:
        self.args = argv
        self.kind = kind
        self.isolated = kind == "bwrap"
        self.freeze_method: FreezeMethod = groups.freeze_method
        self.cpus_enforced = groups.cpuset is not None
        """The CPUs are a cpuset cgroup the program cannot widen (else affinity only)."""
        self.pid = popen.pid
        """Host pid of the direct child: bwrap, or the program itself in kind "none"."""
        self.init_pid = init_pid
        """Host pid of the jail's pid 1 (bwrap's reaper), when known."""
        self._delay_pids: list[int] | None = None
        self.pid_namespace = pid_namespace
        self._popen = popen
        self._cgroups = groups
        self._freezer = groups.freezer
        self._pids_group = groups.pids
        self._cpuacct = groups.cpuacct
        self.memory_limit_by: MemoryLimitBy = groups.memory_limit_by
        """What enforces memory_limit_mb: the jail's memory cgroup ("cgroup-v1", "cgroup-v2":
        all processes and tmpfs files together; RLIMIT_AS is then only a loose backstop), or
        "rlimit" (RLIMIT_AS = memory_limit_mb on each process alone)."""
        self._work_quota = work_quota
        self._memory_limit_hit = False
        self._memory_peak_mb: float | None = None
        self._quota_hit = False
        self._quota_fd: int | None = None
        self._marker = marker
        self._memory_limit_mb = memory_limit_mb
        self._max_processes = max_processes
        self._lock = threading.RLock()
        self._frozen = False
        self._killed = False
        self._cleaned = False
        self._fork_limit_hit = False
        self._status: int | None = None
        self._reap_lock = threading.Lock()
        self._reaped = False
        """True from the moment the reaper reaps the pid (under _reap_lock)."""
        self._usage: resource.struct_rusage | None = None
        self._exited = threading.Event()
        # pidfds name these processes for good: a plain pid may be reused once reaped.
        self._pidfd = _pidfd(popen.pid)
        self._init_pidfd = _pidfd(init_pid) if init_pid is not None else None
        if self._init_pidfd is not None and pid_namespace is not None:
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{init_pid}/ns/pid") != f"pid:[{pid_namespace}]":
                    os.close(self._init_pidfd)
                    self._init_pidfd = None
        assert popen.stdout is not None and popen.stderr is not None
        self._readers = (
            CappedReader(os.dup(popen.stdout.fileno()), stdout_limit_bytes),
            CappedReader(os.dup(popen.stderr.fileno()), stderr_limit_bytes),
        )
        popen.stdout.close()
        popen.stderr.close()
        for reader in self._readers:
            reader.start()
        threading.Thread(target=self._reap, daemon=True, name="jail-reaper").start()

    # -- state

    def _reap(self) -> None:
        try:
            # Seen first, reaped under the lock: while _terminate signals by pid (a group id,
            # a process without a pidfd), the zombie keeps the number from being reused.
            os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)
            with self._reap_lock:
                self._reaped = True
                _, status, usage = os.wait4(self.pid, 0)
                self._status, self._usage = status, usage
        except ChildProcessError:  # reaped elsewhere: the number is not ours to signal any more
            with self._reap_lock:
                self._reaped = True
            self._status = None
        # Nothing else will ever wait for this pid: tell Popen so it does not try.
        self._popen.returncode = self._code() if self._status is not None else -1
        self._exited.set()

    def _code(self) -> int:
        assert self._status is not None
        code = os.waitstatus_to_exitcode(self._status)
        if self.kind == "bwrap" and 128 < code < 128 + signal.NSIG:
            return -(code - 128)
        return code

    @property
    def returncode(self) -> int | None:
        if not self._exited.is_set():
            return None
        return self._code() if self._status is not None else None

    @property
    def signal(self) -> int | None:
        """The signal that ended the program, if one did."""
        code = self.returncode
        return -code if code is not None and code < 0 else None

    @property
    def killed(self) -> bool:
        """`kill()` ended it (it had not exited on its own)."""
        return self._killed

    @property
    def frozen(self) -> bool:
        return self._frozen

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        """The returncode once the program has exited; subprocess.TimeoutExpired after
        `timeout` seconds. Waiting does not thaw a frozen jail."""
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return self.returncode

    @property
    def max_rss_mb(self) -> float | None:
        """Peak resident memory of the largest process of the jail that was reaped (None
        while it runs)."""
        if self._usage is None:
            return None
        return self._usage.ru_maxrss / 1024.0

    @property
    def memory_peak_mb(self) -> float | None:
        """The most memory the whole jail held at once: all its processes (exited ones
        included) and its tmpfs pages (/tmp, /dev/shm, the work dir), from its memory cgroup;
        None where no such group could be made."""
        if not self._cleaned:
            self._memory_peak_mb = self._cgroups.memory_peak_mb()
        return self._memory_peak_mb

    @property
    def memory_limit_hit(self) -> bool:
        """The jail as a whole reached `memory_limit_mb` (its cgroup's OOM killer ran, or it is
        stuck at the limit): sticky, and readable after `kill()`."""
        if not self._memory_limit_hit and not self._cleaned:
            self._memory_limit_hit = self._cgroups.memory_limit_hit()
        return self._memory_limit_hit

    @property
    def work_quota_hit(self) -> bool:
        """The work dir's size-capped tmpfs (`work_quota_mb`) is full: sticky, and readable
        after `kill()`. Read through the jail's pid 1, whose mounts are the jail's."""
        if self._quota_hit or self._cleaned or self._work_quota is None:
            return self._quota_hit
        work, quota_mb = self._work_quota
        if self._quota_fd is None and self.init_pid is not None and not self._exited.is_set():
            # Held open from the first look on: the tmpfs then outlives the jail's mount
            # namespace, so that it can still be read once the program has exited.
            with contextlib.suppress(OSError):
                fd = os.open(f"/proc/{self.init_pid}/root{work}", os.O_PATH | os.O_DIRECTORY)
                found = os.fstatvfs(fd)
                if found.f_blocks * found.f_frsize == quota_mb << 20:
                    self._quota_fd = fd
                else:  # not (yet) the jail's tmpfs
                    os.close(fd)
        if self._quota_fd is not None:
            with contextlib.suppress(OSError):
                found = os.fstatvfs(self._quota_fd)
                # Full to within two pages: a write that did not fit was refused.
                self._quota_hit = found.f_bavail < 3
        return self._quota_hit

    @property
    def memory_exceeded(self) -> bool:
        """Best effort, as the sandbox reports it: an allocation failure on stderr, peak RSS
        near the limit, or a SIGKILL that `kill()` did not send."""
        if self.memory_limit_hit:
            return True
        if self.returncode is None:
            return False
        killed_by_other = self.signal == signal.SIGKILL and not self._killed
        return memory_suspected(
            self._readers[1].text(), self.max_rss_mb or 0.0, self._memory_limit_mb, killed_by_other
        )

    @property
    def fork_limit_hit(self) -> bool:
        """The program tried to start more processes or threads than `max_processes`."""
        if self._fork_limit_hit:
            return True
        if self._pids_group is not None and not self._cleaned:
            self._fork_limit_hit = self._pids_group.limit_hit()
        if isinstance(self._freezer, V2Group) and not self._cleaned:
            self._fork_limit_hit = self._fork_limit_hit or self._freezer.limit_hit()
        if not self._fork_limit_hit and self._max_processes is not None:
            stderr = self._readers[1].text()
            return "Resource temporarily unavailable" in stderr and "fork" in stderr.lower()
        return self._fork_limit_hit

    def stderr_tail(self, n: int = 4000) -> str:
        """The last `n` characters of what the program wrote on stderr so far (capped: the
        middle of a huge output is dropped)."""
        return self._readers[1].text()[-n:] if n > 0 else ""

    def stdout_tail(self, n: int = 4000) -> str:
        return self._readers[0].text()[-n:] if n > 0 else ""

    @property
    def output_truncated(self) -> bool:
        return self._readers[0].truncated or self._readers[1].truncated

    def jail_pids(self) -> list[int]:
        """Host pids of every live process of the jail (bwrap's own included)."""
        found: set[int] = set()
        for group in self._cgroups.made():
            found.update(group.pids())
        if not found:
            if self.pid_namespace is not None:
                found.update(_pids_in_namespace(self.pid_namespace))
            elif self._marker is not None:
                found.update(marked_pids(self._marker))
            if not self._reaped:
                found.add(self.pid)
        return sorted(found)

    def cpu_usage_ns(self) -> int | None:
        """Nanoseconds every task of the jail has spent on a CPU so far, threads and processes
        that already exited included (its cpuacct group, or its cgroup-v2 group); None where
        no such group could be made. Per-task counters (/proc/PID/schedstat) cannot stand in:
        a thread that does the work and exits before it is read would take its time along."""
        if self._cpuacct is not None:
            return self._cpuacct.usage_ns()
        if isinstance(self._freezer, V2Group):
            return self._freezer.usage_ns()
        return None

    def run_queue_wait_ns(self) -> int:
        """Nanoseconds the jail's threads have so far spent runnable but waiting for a CPU
        (/proc/PID/task/TID/schedstat), over the processes seen the first time this was
        asked (not bwrap's own); 0 where the kernel does not keep it. A thread that exits
        takes its wait along, so this can only under-read."""
        if self._delay_pids is None:
            self._delay_pids = [
                pid for pid in self.jail_pids() if pid not in (self.pid, self.init_pid)
            ] or [self.pid]
        waiting = 0
        for pid in self._delay_pids:
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                try:
                    with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                        waiting += int(f.read().split()[1])
                except (OSError, ValueError, IndexError):
                    continue
        return waiting

    # -- freezing

    def freeze(self) -> None:
        """Stop every process of the jail; returns once all of them are stopped. A no-op when
        already frozen or after `kill()`. TimeoutError when it cannot be done (the jail is
        thawed again)."""
        with self._lock:
            if self._frozen or self._cleaned:
                return
            try:
                if self._freezer is not None:
                    self._freezer.set_frozen(True, _FREEZE_TIMEOUT_S)
                else:
                    self._stop_all()
            except (TimeoutError, OSError):
                with contextlib.suppress(TimeoutError, OSError):
                    self._set_running()
                raise
            self._frozen = True

    def thaw(self) -> None:
        """Let every process of the jail run again."""
        with self._lock:
            if not self._frozen or self._cleaned:
                return
            self._set_running()
            self._frozen = False

    def _set_running(self) -> None:
        if self._freezer is not None:
            self._freezer.set_frozen(False, _FREEZE_TIMEOUT_S)
        else:
            for pid in self.jail_pids():
                self._signal(pid, signal.SIGCONT)

    def _signal(self, pid: int, signum: int) -> None:
        """os.kill, except for the jail's own child: by its pidfd, else by number only while
        it is unreaped (a reaped number may already be someone else's)."""
        with contextlib.suppress(OSError):  # gone, not ours, or its pidfd already closed
            if pid != self.pid:
                os.kill(pid, signum)
            elif self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, signum)
            else:
                with self._reap_lock:
                    if not self._reaped:
                        os.kill(pid, signum)

    def _stop_all(self) -> None:
        """SIGSTOP every process until one full listing finds all of them stopped and no new
        one (best effort: a program can race SIGCONT between its own processes while they are
        being stopped; the cgroup freezers are exact)."""
        deadline = time.monotonic() + _FREEZE_TIMEOUT_S
        stopped: set[int] = set()
        while True:
            members = set(self.jail_pids())
            for pid in members - stopped:
                self._signal(pid, signal.SIGSTOP)
            while not all(_stopped(pid) for pid in members):
                if time.monotonic() > deadline:
                    raise TimeoutError("the jail's processes did not all stop")
                time.sleep(0.0002)
            stopped |= members
            again = set(self.jail_pids())
            if again <= members and all(_stopped(pid) for pid in again):
                return
            if time.monotonic() > deadline:
                raise TimeoutError("the jail's processes did not all stop")

    # -- a program that stops itself

    def program_stopped(self) -> bool:
        """Every thread of every process of the program (bwrap's own processes aside) is
        stopped by a signal, or gone. For a program that stops itself when it has answered
        (cpu_candidate's reply: SIGSTOP to all of the jail): see `continue_program`."""
        group = self._freezer or self._pids_group
        pids = group.pids() if group is not None else self.jail_pids()
        ours = {self.pid, self.init_pid} if self.init_pid is not None else set()
        return all(_stopped(pid) for pid in pids if pid not in ours)

    def continue_program(self) -> None:
        """SIGCONT every process of the jail, after a thaw (a no-op for those not stopped):
        what stopped itself runs again."""
        group = self._freezer or self._pids_group
        for pid in group.pids() if group is not None else self.jail_pids():
            self._signal(pid, signal.SIGCONT)

    # -- the end

    def kill(self) -> None:
        """Kill everything the jail started (daemons that left the session or were reparented
        included), wait for it, and remove its cgroups. Safe to call more than once, and after
        the program has exited on its own."""
        with self._lock:
            if self._cleaned:
                return
            if not self._exited.is_set():
                self._killed = True
            _ = self.work_quota_hit  # read while the jail's mounts still exist
            self._terminate()
            self._cleanup()

    def _terminate(self) -> None:
        deadline = time.monotonic() + 10
        while True:
            # The jail's pid 1 first: its death takes down the whole pid namespace.
            if self._init_pidfd is not None:
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(self._init_pidfd, signal.SIGKILL)
            self._signal(self.pid, signal.SIGKILL)
            with self._reap_lock:
                # The group by its id while that cannot be anyone else's: its leader unreaped
                # (the reaper waits for this lock), or a live member holding the id.
                if not self._reaped or group_members(self.pid):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(self.pid, signal.SIGKILL)
            if isinstance(self._freezer, V2Group):
                self._freezer.kill_all()
            remaining = self.jail_pids()
            # kill_pids thaws a v1 freezer group of ours: its processes cannot die frozen.
            # The jail's own child was signalled above, the safe way.
            kill_pids([pid for pid in remaining if pid != self.pid])
            if isinstance(self._freezer, FreezerGroup):
                self._freezer.write("freezer.state", "THAWED")
            elif isinstance(self._freezer, V2Group):
                self._freezer.write("cgroup.freeze", "0")
            self._frozen = False
            if self._exited.is_set() and not remaining:
                return
            if time.monotonic() > deadline:
                return
            self._exited.wait(0.005)

    def _cleanup(self) -> None:
        self._exited.wait(5)
        for reader in self._readers:
            reader.join(timeout=5)
        if self._pids_group is not None:
            self._fork_limit_hit = self._fork_limit_hit or self._pids_group.limit_hit()
        if isinstance(self._freezer, V2Group):
            self._fork_limit_hit = self._fork_limit_hit or self._freezer.limit_hit()
        # Kept for after the groups are gone.
        _ = self.memory_limit_hit, self.memory_peak_mb
        for group in self._cgroups.made():
            group.remove()
        _ = self.work_quota_hit
        for fd in (self._pidfd, self._init_pidfd, self._quota_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._pidfd = self._init_pidfd = self._quota_fd = None
        self._cleaned = True

    def __enter__(self) -> JailedProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.kill()

    def __repr__(self) -> str:
        return (
            f"<JailedProcess pid={self.pid} kind={self.kind} freeze={self.freeze_method} "
            f"returncode={self.returncode}>"
        )
