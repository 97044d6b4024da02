"""Run one untrusted command in a child process that cannot take the caller down with it.

What the child gets: its own session and process group, its own working directory (a fresh
temp dir unless the caller names one), an environment built from an allowlist (no inherited
secrets), resource limits (address space, file size, no core dumps, processes), optional CPU
pinning, and a wall-clock timeout after which everything it started is killed. Its stdout and
stderr are read concurrently and capped (head and tail kept), so a kernel printing gigabytes
costs CPU time, never memory.

Limits are applied by a tiny launcher interpreter that then `exec`s the real command: setting
them in `preexec_fn` is unsafe when the caller has threads (the device pool does).

Fork bombs: RLIMIT_NPROC does not bind root, so where the cgroup-v1 `pids` controller is
writable (root in a container) each run also gets its own pids cgroup with `pids.max`; the cgroup
also finds descendants that left the process group, so they are killed at the end too. Without
that cgroup (cgroup v2 hosts, or not root) such descendants are found by a per-run marker
variable in their environment, which every process the child starts inherits.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from accelopt_mcp.isolation.cgroups import (
    Group,
    PidsGroup,
    kill_pids,
    owners_checkable,
    pid_namespace,
    remove_stale_groups,
)

# Variables copied from the parent when set. Everything else is dropped.
_ALLOWED_NAMES = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "PYTHONHASHSEED", "TERM"})
_ALLOWED_PREFIXES = ("LC_", "OMP_", "OPENBLAS_", "MKL_", "NUMEXPR_", "VECLIB_", "GOTO_")
# A name matching this never reaches the child, even when the caller passes it explicitly.
SECRET_NAME = re.compile(
    r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|DSN|CREDENTIAL|COOKIE|AUTH|PRIVATE)",
    re.IGNORECASE,
)
# Set to a fresh token in each child's environment: finds its descendants without a cgroup.
RUN_MARKER = "ACCELOPT_SANDBOX_RUN"
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")

_MEMORY_MARKERS = (
    "MemoryError",
    "Unable to allocate",
    "Cannot allocate memory",
    "std::bad_alloc",
    "out of memory",
    "OutOfMemory",
)

# Runs with `python -I -S -c`: no site, no user code. Asks for SIGKILL when the thread that
# started it dies (a server or worker killed mid-run can no longer enforce the timeout), applies
# the limits, joins the cgroups, then becomes the real command (for the jail: bubblewrap). Any
# failure here is reported on stderr with exit code 125.
_LAUNCHER = r"""
import json, os, resource, sys
cfg = json.loads(sys.argv[1])
try:
    try:
        import ctypes
        PR_SET_PDEATHSIG = 1
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, 9)
        # A fresh, empty session keyring (KEYCTL_JOIN_SESSION_KEYRING with no name): keys a
        # previous run of the same uid left in its session keyring are out of reach. Refused
        # (a seccomp filter, no keyctl) is fine: then nothing here can reach a keyring either.
        keyctl = {"x86_64": 250, "aarch64": 219}.get(os.uname().machine)
        if keyctl is not None:
            libc.syscall(keyctl, 1, None)
    except (ImportError, OSError, AttributeError):
        pass
    if os.getppid() != cfg["parent"]:
        os._exit(125)  # the caller died before the request above took effect
    for procs in cfg["cgroups"]:
        with open(procs, "w") as f:
            f.write(str(os.getpid()))
    for name, value in cfg["limits"].items():
        res = getattr(resource, name)
        resource.setrlimit(res, (value, value))
    if cfg["cpus"]:
        os.sched_setaffinity(0, cfg["cpus"])
    argv = cfg["argv"]
    os.execvp(argv[0], argv)
except Exception as exc:
    sys.stderr.write("sandbox launcher failed: %s: %s\n" % (type(exc).__name__, exc))
    sys.stderr.flush()
    os._exit(125)
"""
LAUNCHER_FAILED_EXIT = 125


def launcher_command(
    argv: list[str], *, cgroups: list[str], limits: dict[str, int], cpus: set[int] | None
) -> list[str]:
    """The command line that starts `argv` through the launcher: PDEATHSIG, a fresh session
    keyring, the cgroups joined (their cgroup.procs files), the rlimits (resource module names
    -> value) and CPU affinity."""
    cfg = {
        "parent": os.getpid(),
        "cgroups": cgroups,
        "limits": limits,
        "cpus": sorted(cpus) if cpus else None,
        "argv": list(argv),
    }
    return [sys.executable, "-I", "-S", "-c", _LAUNCHER, json.dumps(cfg)]


def address_space_backstop_mb(memory_limit_mb: int) -> int:
    """RLIMIT_AS of a process whose memory_limit_mb a memory cgroup enforces: only a backstop
    against address-space bombs, well above the limit so that the group (which counts memory
    actually held, by all the processes and their tmpfs files together) always acts first,
    while an address space merely reserved (thread stacks, arenas, a fork's copy of its
    parent's) never fails first."""
    return max(2 * memory_limit_mb, memory_limit_mb + 1024)


def _can_raise_hard_limits() -> bool:
    """Whether this process holds CAP_SYS_RESOURCE (may raise a hard rlimit)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> 24 & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def resource_limits(
    *,
    memory_limit_mb: int,
    max_file_bytes: int,
    max_processes: int | None,
    nproc: bool,
    max_open_files: int | None = None,
    address_space_mb: int | None = None,
) -> dict[str, int]:
    """The rlimits of a child: address space, no core dumps, file size, and (with `nproc`,
    for a child that does not run as root) a per-user process count.

    RLIMIT_AS is memory_limit_mb, or `address_space_mb` where something else enforces the
    memory limit (a memory cgroup; see address_space_backstop_mb). That backstop never goes
    above this process's own hard limit, which a child without CAP_SYS_RESOURCE cannot raise
    (the launcher would fail)."""
    address_space = memory_limit_mb << 20
    if address_space_mb is not None:
        address_space = address_space_mb << 20
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        too_high = hard != resource.RLIM_INFINITY and hard < address_space
        if too_high and not _can_raise_hard_limits():
            address_space = max(memory_limit_mb << 20, hard)
    limits = {
        "RLIMIT_AS": address_space,
        "RLIMIT_CORE": 0,
        "RLIMIT_FSIZE": max_file_bytes,
    }
    if max_open_files is not None:
        limits["RLIMIT_NOFILE"] = max_open_files
    if max_processes is not None and nproc:
        # Counted per user, so leave room for the other processes of the same user.
        limits["RLIMIT_NPROC"] = max_processes + len(os.listdir("/proc"))
    return limits


def check_cpus(cpus: set[int] | None) -> None:
    if cpus is not None:
        usable = os.sched_getaffinity(0)
        if not cpus or not cpus <= usable:
            raise ValueError(f"cpus {sorted(cpus)} must be a non-empty subset of {sorted(usable)}")


@dataclass
class SandboxResult:
    """How one sandboxed child ended. A plain dataclass, not a pydantic model: the cpu
    harness's jails import this module, and pydantic costs every evaluation ~0.15 s."""

    returncode: int | None
    """Exit code; None when the child was killed by a signal (see `signal`)."""
    signal: int | None
    """Terminating signal number (e.g. SIGSEGV, SIGKILL), if any."""
    timed_out: bool
    memory_exceeded: bool
    """Best effort: MemoryError or an allocation failure in the child's stderr, or peak RSS
    near the limit, or a SIGKILL we did not send."""
    stdout: str
    stderr: str
    output_truncated: bool
    wall_s: float
    max_rss_mb: float = 0.0
    """Peak resident memory of the direct child."""
    fork_limit_hit: bool = False
    """The child tried to start more processes than `max_processes` allowed."""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def describe(self) -> str:
        """One line saying how the child ended, for logs."""
        if self.timed_out:
            return f"killed after the {self.wall_s:.1f} s time limit"
        if self.signal is not None:
            what = describe_signal(self.signal, memory_exceeded=self.memory_exceeded)
            return f"child {what}"
        return f"child exited with code {self.returncode}"


def describe_signal(signum: int, *, memory_exceeded: bool = False) -> str:
    """How a process killed by `signum` ended, in words: 'crashed with a segmentation fault
    (SIGSEGV)', 'was killed by SIGKILL, probably out of memory', ..."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    what = {
        "SIGSEGV": "crashed with a segmentation fault (SIGSEGV)",
        "SIGBUS": "crashed with a bus error (SIGBUS)",
        "SIGABRT": "aborted (SIGABRT)",
        "SIGFPE": "crashed with a floating-point exception (SIGFPE)",
        "SIGXFSZ": "wrote a file larger than the sandbox allows (SIGXFSZ)",
        "SIGXCPU": "ran past the CPU-time limit (SIGXCPU)",
    }.get(name, f"was killed by {name}")
    if name == "SIGKILL" and memory_exceeded:
        what += ", probably out of memory"
    return what


def sandbox_environment(
    cwd: Path, extra: dict[str, str] | None, cpus: set[int] | None
) -> dict[str, str]:
    """The child's environment: allowlisted parent variables, sandbox paths, then `extra`,
    with any secret-looking name removed at every step."""
    env = {
        name: value
        for name, value in os.environ.items()
        if (name in _ALLOWED_NAMES or name.startswith(_ALLOWED_PREFIXES))
        and not SECRET_NAME.search(name)
    }
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.setdefault("PYTHONHASHSEED", "0")
    env["HOME"] = str(cwd)
    env["TMPDIR"] = str(cwd)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # glibc reserves 64 MiB of address space per thread arena; with RLIMIT_AS that would turn
    # a few BLAS threads into spurious MemoryErrors.
    env["MALLOC_ARENA_MAX"] = "2"
    if cpus:
        for name in THREAD_VARS:
            env.setdefault(name, str(len(cpus)))
    for name, value in (extra or {}).items():
        if not SECRET_NAME.search(name):
            env[name] = value
    return env


class CappedReader(threading.Thread):
    """Drains one pipe, keeping the first and last `limit // 2` bytes. `text()` may be called
    while it still reads (a long-lived jail's stderr)."""

    def __init__(self, fd: int, limit: int) -> None:
        super().__init__(daemon=True)
        self._fd = fd
        self._half = max(limit // 2, 1)
        self._head = bytearray()
        self._tail = bytearray()
        self._lock = threading.Lock()
        self.total = 0

    def run(self) -> None:
        while True:
            try:
                chunk = os.read(self._fd, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            with self._lock:
                self.total += len(chunk)
                room = self._half - len(self._head)
                if room > 0:
                    self._head += chunk[:room]
                    chunk = chunk[room:]
                if chunk:
                    self._tail += chunk
                    if len(self._tail) > 2 * self._half:
                        del self._tail[: len(self._tail) - self._half]
        with contextlib.suppress(OSError):
            os.close(self._fd)

    @property
    def truncated(self) -> bool:
        with self._lock:
            return self._truncated()

    def _truncated(self) -> bool:
        return self.total > len(self._head) + min(len(self._tail), self._half)

    def text(self) -> str:
        with self._lock:
            tail = bytes(self._tail[-self._half :]) if self._tail else b""
            if self._truncated():
                dropped = self.total - len(self._head) - len(tail)
                middle = f"\n[... {dropped} bytes of output dropped by the sandbox ...]\n"
                data = bytes(self._head) + middle.encode() + tail
            else:
                data = bytes(self._head) + tail
        return data.decode("utf-8", errors="replace")


def marked_pids(marker: bytes) -> list[int]:
    """Live processes whose environment holds `marker` (NAME=token): the child's descendants,
    wherever they moved (another session, reparented to init). Zombies show no environment."""
    own = os.getpid()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == own:
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if marker in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def work_dir_prefix(kind: str) -> str:
    """Prefix for a backend's per-evaluation temp dirs: kind, pid namespace and owner pid, so
    that `remove_abandoned_work_dirs` can tell which ones nobody will remove."""
    return f"accelopt-{kind}-{pid_namespace()}-{os.getpid()}-"


SANDBOX_DIR_KIND = "sandbox"
"""The kind of run_sandboxed's own work dirs (accelopt-sandbox-NS-PID-...)."""


def remove_abandoned_work_dirs(kind: str) -> None:
    """Remove the temp dirs of `kind` whose owner died mid-evaluation (a killed server or job
    worker never ran its cleanup). Only this pid namespace's, and only of dead owners."""
    if not owners_checkable():
        return
    prefix = f"accelopt-{kind}-{pid_namespace()}-"
    try:
        found = list(Path(tempfile.gettempdir()).glob(f"{prefix}*"))
    except OSError:
        return
    for path in found:
        owner = path.name.removeprefix(prefix).split("-")[0]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            shutil.rmtree(path, ignore_errors=True)


def kill_everything(pgid: int, cgroup: Group | None, marker: bytes | None) -> None:
    """SIGKILL the child's process group and everything in its cgroup (without one: every
    process carrying the run's marker), until nothing is left. Frozen ones are thawed so that
    they can die. The caller keeps the group's leader unreaped meanwhile (a zombie), so that
    `pgid` cannot name anyone else's group."""
    for _ in range(200):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        if cgroup is not None:
            remaining = cgroup.pids()
        else:
            remaining = marked_pids(marker) if marker is not None else []
        kill_pids(remaining)
        if not remaining and not group_members(pgid):
            return
        time.sleep(0.005)


def process_state(pid: int | str) -> str:
    """The one-letter scheduler state of a process ("" when it is gone)."""
    fields = proc_stat_fields(pid)
    return fields[0] if fields else ""


def proc_stat_fields(pid: int | str) -> list[str]:
    """/proc/PID/stat after the command name: state, ppid, pgrp, ... ([] when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def group_members(pgid: int) -> list[int]:
    """Live processes of process group `pgid`; zombies (its unreaped leader) do not count."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = proc_stat_fields(entry.name)
            if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
                found.append(int(entry.name))
    return found


def _exit_code_seen(seen: os.waitid_result | None) -> int:
    """The exit code (negative: the signal) from a waitid result. Nothing seen: this process
    reaped its own child elsewhere, a bug of ours, never the child's doing."""
    if seen is None:
        raise RuntimeError("the sandboxed child was reaped by someone else in this process")
    if seen.si_code == os.CLD_EXITED:
        return seen.si_status
    return -seen.si_status


def memory_suspected(stderr: str, max_rss_mb: float, limit_mb: int, killed: bool) -> bool:
    if any(marker in stderr for marker in _MEMORY_MARKERS):
        return True
    return max_rss_mb >= 0.9 * limit_mb or (killed and max_rss_mb >= 0.5 * limit_mb)


RESULT_FILE_MAX_BYTES = 16 << 20


def read_result_file(path: Path, max_bytes: int = RESULT_FILE_MAX_BYTES) -> str | None:
    """The text a child left in its result file, or None when there is none or it is larger
    than `max_bytes`: a candidate that floods its result file must not flood the parent."""
    try:
        if path.stat().st_size > max_bytes:
            return None
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def run_sandboxed(
    argv: list[str],
    *,
    timeout_s: float,
    memory_limit_mb: int,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    cpus: set[int] | None = None,
    max_output_bytes: int = 1 << 20,
    max_processes: int | None = 64,
    max_file_bytes: int = 1 << 30,
) -> SandboxResult:
    """Run `argv` sandboxed and report how it ended. Never raises for anything the child does;
    raises ValueError for bad arguments and OSError when the child cannot be started at all.

    cwd: working directory and HOME/TMPDIR of the child; None gives a fresh temp dir that is
    removed afterwards. env: extra variables on top of the allowlisted minimum (secret-looking
    names are dropped even here). cpus: cores the child (and its threads) may run on.
    max_processes: cap on processes/threads the child may create (RLIMIT_NPROC; plus a pids
    cgroup where available, which also binds root).
    """
    if not argv:
        raise ValueError("argv is empty: give the command to run")
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    if memory_limit_mb < 16:
        raise ValueError(f"memory_limit_mb must be at least 16, got {memory_limit_mb}")
    check_cpus(cpus)

    own_dir = cwd is None
    if cwd is None:
        # Named after this process, like the backends' work dirs, so that what a killed owner
        # left (it never reached the rmtree below) is removed by the next run on the host.
        remove_abandoned_work_dirs(SANDBOX_DIR_KIND)
        work_dir = Path(tempfile.mkdtemp(prefix=work_dir_prefix(SANDBOX_DIR_KIND)))
    else:
        work_dir = Path(cwd)
    remove_stale_groups()
    cgroup = PidsGroup.make(max_processes)
    limits = resource_limits(
        memory_limit_mb=memory_limit_mb,
        max_file_bytes=max_file_bytes,
        max_processes=max_processes,
        nproc=os.geteuid() != 0,
    )
    command = launcher_command(
        list(argv), cgroups=[cgroup.procs_file] if cgroup else [], limits=limits, cpus=cpus
    )
    child_env = sandbox_environment(work_dir, env, cpus)
    child_env[RUN_MARKER] = uuid.uuid4().hex
    marker = f"{RUN_MARKER}={child_env[RUN_MARKER]}".encode()
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            command,
            cwd=work_dir,
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except BaseException:
        if cgroup is not None:
            cgroup.remove()
        if own_dir:
            shutil.rmtree(work_dir, ignore_errors=True)
        raise

    assert proc.stdout is not None and proc.stderr is not None
    readers = [
        CappedReader(os.dup(proc.stdout.fileno()), max_output_bytes),
        CappedReader(os.dup(proc.stderr.fileno()), max_output_bytes),
    ]
    proc.stdout.close()
    proc.stderr.close()
    for reader in readers:
        reader.start()

    exited = threading.Event()
    seen: list[os.waitid_result | None] = []  # None only under WNOHANG, which is not used

    def notice_exit() -> None:
        # Seen, not reaped: the child stays a zombie, holding its pid (our process group's id)
        # until the group is killed. Reaped first, the number could be handed to a stranger's
        # new session before the killpg below, which would then kill that.
        try:
            seen.append(os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT))
        finally:
            exited.set()

    threading.Thread(target=notice_exit, daemon=True, name="sandbox-exit").start()
    timed_out = not exited.wait(timeout_s)
    wall_s = time.monotonic() - started
    try:
        kill_everything(proc.pid, cgroup, marker)
        exited.wait()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
            returncode: int | None = os.waitstatus_to_exitcode(status)
            max_rss_mb = usage.ru_maxrss / 1024.0
        except ChildProcessError:
            # Reaped by someone else in this process (SIGCHLD ignored, a waitpid(-1)): what
            # the notice saw is all there is; no usage figures.
            returncode, max_rss_mb = _exit_code_seen(seen[0] if seen else None), 0.0
        # Nothing else will ever wait for this pid: tell Popen so it does not try.
        proc.returncode = -1
        for reader in readers:
            reader.join(timeout=5)
        fork_limit_hit = cgroup is not None and cgroup.limit_hit()
    finally:
        if cgroup is not None:
            cgroup.remove()
        if own_dir:
            shutil.rmtree(work_dir, ignore_errors=True)

    term_signal: int | None = None
    if returncode is not None and returncode < 0:
        term_signal, returncode = -returncode, None
    stdout, stderr = readers[0].text(), readers[1].text()
    killed_by_other = term_signal == signal.SIGKILL and not timed_out
    if not fork_limit_hit and max_processes is not None:
        fork_limit_hit = "Resource temporarily unavailable" in stderr and "fork" in stderr.lower()
    return SandboxResult(
        returncode=returncode,
        signal=term_signal,
        timed_out=timed_out,
        memory_exceeded=not timed_out
        and memory_suspected(stderr, max_rss_mb, memory_limit_mb, killed_by_other),
        stdout=stdout,
        stderr=stderr,
        output_truncated=readers[0].truncated or readers[1].truncated,
        wall_s=wall_s,
        max_rss_mb=max_rss_mb,
        fork_limit_hit=fork_limit_hit,
    )
