"""A jail for one long-lived hostile program (an LLM-written kernel under test), which a trusted
harness talks to over pipes it passes in and shared-memory files it binds in.

`spawn_jailed` starts it with bubblewrap (`bwrap`) where `jail_status()` finds that it works,
and otherwise (kind "none": no bwrap, a host that forbids namespaces, or ACCELOPT_JAIL=none)
the plain sandbox way, with `isolated = False` on the process so that the caller can flag the
evaluation `not_isolated`. Both kinds get the same limits and controls: rlimits (address space,
file size, open files, no core dumps), a per-jail pids cgroup (`max_processes`, binds root too),
CPU pinning (a cpuset cgroup where one can be made, so that the program cannot widen it;
affinity otherwise), PDEATHSIG (it dies with the thread that started it), capped stdout/stderr,
a freezer (`freeze()`/`thaw()`), and `kill()` of everything it started.

What the program sees inside a bubblewrap jail:

- new pid, net, ipc, uts, cgroup and mount namespaces: /proc shows only the jail's own
  processes (pid 1 is bwrap's reaper, started with an empty environment and owned by root, so
  neither its environ nor its fds are readable); the network is a loopback of its own (nothing
  of the host's 127.0.0.1, no abstract unix sockets of the host); no /sys at all.
- read-only: /usr (with /bin, /sbin, /lib, /lib32, /lib64, /libx32 as this host lays them out:
  symlinks into /usr, or read-only binds), the interpreter (sys.prefix, sys.base_prefix,
  sys.exec_prefix, sys.base_exec_prefix and the real executable's install prefix; a venv
  inside a repository shows the venv only, never the repository), and the caller's `read_only`
  paths. Nothing from /etc (Python and NumPy need none of it: UTC, no users, no hosts),
  HOME, /root, /home, /var, /opt, /srv, /mnt or /run, and no other file of the host.
- writable: the work dir (at its host path; it is the cwd and TMPDIR), the caller's `writable`
  paths, and a fresh size-capped tmpfs on /tmp and on /dev/shm. /dev holds only null, zero,
  full, random, urandom, tty, ptmx, a new pts and the fd/stdin/stdout/stderr links; /proc is
  the jail's own. What it can learn of the host's layout: the host paths of its binds (in
  /proc/self/mountinfo and its own cmdline), never their neighbours. pid 1's cmdline is only
  `bwrap --args N -- /bin/sh -c ...`: bwrap's options come from a memfd, and the command from
  a variable that is unset before the program starts (see `_bwrap_command`).
- the environment is exactly: PATH, HOME=/nonexistent, TMPDIR, LANG=C.UTF-8, PYTHONHASHSEED,
  PYTHONDONTWRITEBYTECODE, MALLOC_ARENA_MAX, the thread-count variables when `cpus` is given,
  then the caller's `env` (secret-looking names dropped). Nothing of the caller's own.
- its uid on the host is 65534 (nobody), with no capabilities, an empty bounding set and
  no_new_privs. As root no user namespace is used (one would map the jail's uid onto host root
  and make root-owned files "ours"): bwrap runs as root and `setpriv` drops to 65534 just
  before the program, so `spawn_jailed` hands the work dir and the writable paths to 65534
  (chown, symlinks not followed). Not as root (a laptop) a user namespace maps the jail's 65534
  onto the caller's own unprivileged uid, and further user namespaces are disabled inside.
- a seccomp filter (accelopt_mcp/isolation/seccomp.py, loaded by bwrap's --seccomp) refuses
  with EPERM every new namespace (unshare, clone with CLONE_NEW*; clone3 gets ENOSYS so that
  glibc falls back to clone), setns, mounts, keyrings, io_uring, ptrace, process_vm_*, bpf,
  perf_event_open, kexec, modules, userfaultfd and personality changes. As root, where no
  user namespace is used and --disable-userns cannot apply, this is what stops the program
  from making one. The kind "none" fallback loads the same filter (prctl, before the exec).
- descriptors: stdin is /dev/null, stdout and stderr go to the capped readers, and only the
  `pass_fds` are open besides.

What the kind "none" fallback hides: the caller's environment (the sandbox's allowlist) and
nothing else; the program runs as the caller's uid and sees the caller's files, network and
processes. `read_only`/`writable` are not enforced there; an argv item naming a jail path
(or a path under one) is translated to its host path, so one argv serves both kinds.

Threads: PDEATHSIG fires when the *thread* that called `spawn_jailed` exits, so call it from
a thread that outlives the jail (the main thread, or a long-lived worker).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import platform
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
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
    remove_stale_groups,
)
from accelopt_mcp.isolation.sandbox import (
    RUN_MARKER,
    SECRET_NAME,
    THREAD_VARS,
    CappedReader,
    address_space_backstop_mb,
    check_cpus,
    group_members,
    launcher_command,
    marked_pids,
    memory_suspected,
    process_state,
    resource_limits,
    sandbox_environment,
)
from accelopt_mcp.isolation.seccomp import FILTER_ARCHS, filter_program, filtered_command

if TYPE_CHECKING:
    import resource

__all__ = [
    "JAIL_GID",
    "JAIL_UID",
    "FreezeMethod",
    "JailStatus",
    "JailUnavailable",
    "JailedProcess",
    "MemoryLimitBy",
    "jail_status",
    "python_for_jail",
    "spawn_jailed",
]

JAIL_UID = 65534
JAIL_GID = 65534
MODE_VARIABLE = "ACCELOPT_JAIL"
FreezeMethod = Literal["cgroup-v1", "cgroup-v2", "signals"]
MemoryLimitBy = Literal["cgroup-v1", "cgroup-v2", "rlimit"]
"""What enforces a jail's memory_limit_mb: its memory cgroup (v1 `memory` group, v2
`memory.max`), over all its processes and tmpfs pages together, or, where no such group could
be made, RLIMIT_AS on each process alone."""
PathLike = str | os.PathLike[str]
Mount = PathLike | tuple[PathLike, PathLike]

# bwrap's outer process and the reaper it runs as pid 1 inside count against pids.max too.
_BWRAP_PROCESSES = 2
_FREEZE_TIMEOUT_S = 10.0
_SETPRIV_CANDIDATES = ("/usr/bin/setpriv", "/bin/setpriv")
_ROOT_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# Holds the program's command line for the shell that starts it inside (see _bwrap_command).
_EXEC_VARIABLE = "ACCELOPT_JAIL_EXEC"


@dataclass(frozen=True)
class JailStatus:
    """Which jail `spawn_jailed` uses on this host, and why. A plain dataclass: the cpu
    harness imports this module in every evaluation, and must not load pydantic."""

    kind: Literal["bwrap", "none"]
    reason: str
    """What is active, or why no jail can run here and how to get one."""


class JailUnavailable(RuntimeError):
    """ACCELOPT_JAIL=bwrap asked for a jail and none can run here."""


@dataclass(frozen=True)
class _Bwrap:
    path: str
    version: tuple[int, ...]
    as_root: bool
    setpriv: str | None
    """As root: the setpriv that drops to JAIL_UID just before the program."""
    env: str = "/usr/bin/env"
    """As root: the env (coreutils 8.28+) that enters the work dir as JAIL_UID."""
    shell: str = "/bin/sh"
    """The POSIX shell that starts the program (see `_bwrap_command`)."""


def python_for_jail() -> str:
    """The interpreter to name in a jailed argv: this process's own (the venv's), which works
    inside because its prefixes are bound read-only at the same paths, NumPy included."""
    if not sys.executable:
        raise RuntimeError("sys.executable is empty: cannot tell which Python to jail")
    return sys.executable


def _python_prefixes() -> list[str]:
    real = os.path.realpath(sys.executable)
    found = [
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.dirname(real)),
    ]
    out: list[str] = []
    for prefix in found:
        path = os.path.abspath(prefix)
        covered = path == "/usr" or path.startswith("/usr/")
        if path != "/" and not covered and path not in out and os.path.isdir(path):
            out.append(path)
    return out


def _version(path: str) -> tuple[int, ...]:
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    words = done.stdout.split()
    digits = words[-1].split(".") if words else []
    return tuple(int(d) for d in digits if d.isdigit())


@functools.cache
def _probe() -> tuple[_Bwrap | None, str]:
    """Start one trivial jail, exactly as `spawn_jailed` would, to learn whether it works."""
    path = shutil.which("bwrap")
    if path is None:
        return None, (
            "bubblewrap is not installed: apt-get install bubblewrap (dnf install bubblewrap)"
        )
    version = _version(path)
    as_root = os.geteuid() == 0
    setpriv = None
    if as_root:
        setpriv = shutil.which("setpriv") or next(
            (p for p in _SETPRIV_CANDIDATES if os.access(p, os.X_OK)), None
        )
        if setpriv is None:
            return None, (
                "running as root, the jail needs setpriv to drop to uid 65534 inside: "
                "apt-get install util-linux"
            )
    env = next((p for p in ("/usr/bin/env", "/bin/env") if os.access(p, os.X_OK)), "env")
    shell = next((p for p in ("/bin/sh", "/usr/bin/sh") if os.access(p, os.X_OK)), None)
    if shell is None:
        return None, "the jail needs a POSIX shell at /bin/sh: apt-get install dash"
    bwrap = _Bwrap(path, version, as_root, setpriv, env, shell)
    work_dir = Path(tempfile.mkdtemp(prefix="accelopt-jail-probe-"))
    try:
        if as_root:
            os.chown(work_dir, JAIL_UID, JAIL_GID)
        args = _bwrap_args(
            bwrap,
            argv=[python_for_jail(), "-I", "-S", "-c", "pass"],
            work_dir=str(work_dir),
            mounts=[(str(work_dir), str(work_dir), True)],
            env=_jail_environment(str(work_dir), None, None),
            tmpfs_bytes=1 << 20,
            info_fd=None,
        )
        command, fds = _bwrap_command(bwrap, args)
        try:
            done = subprocess.run(
                command,
                env={},
                cwd="/",
                capture_output=True,
                text=True,
                timeout=30,
                pass_fds=fds,
            )
        finally:
            for fd in fds:
                os.close(fd)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"bubblewrap could not be started ({type(exc).__name__}: {exc})"
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    shown = ".".join(map(str, version)) or "?"
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return None, (
            f"bubblewrap {shown} cannot start a jail here ({said}): this host forbids "
            "namespaces (a container without CAP_SYS_ADMIN, or unprivileged user namespaces "
            "switched off: sysctl kernel.unprivileged_userns_clone=1 user.max_user_namespaces"
            "=10000)"
        )
    how = (
        "setpriv drops to uid 65534, no user namespace"
        if as_root
        else "a user namespace maps uid 65534 onto the caller's uid"
    )
    return bwrap, (
        f"bubblewrap {shown}: new pid, net, ipc, uts, cgroup and mount namespaces; {how}"
    )


def _mode() -> str:
    mode = os.environ.get(MODE_VARIABLE, "").strip().lower()
    if mode not in ("", "auto", "bwrap", "none"):
        raise ValueError(f"{MODE_VARIABLE}={mode!r}: use 'none', 'bwrap' or 'auto'")
    return mode


def jail_status() -> JailStatus:
    """The jail `spawn_jailed` uses here. The probe (one trivial jail) runs once per process;
    ACCELOPT_JAIL=none is read on every call."""
    if _mode() == "none":
        return JailStatus(
            kind="none",
            reason=f"{MODE_VARIABLE}=none: the jail is switched off; programs run in the "
            "plain sandbox (environment allowlist and limits only)",
        )
    bwrap, reason = _probe()
    return JailStatus(kind="bwrap" if bwrap is not None else "none", reason=reason)


def _jail_environment(
    work_dir: str, extra: Mapping[str, str] | None, cpus: set[int] | None
) -> dict[str, str]:
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/nonexistent",
        "TMPDIR": work_dir,
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        # glibc reserves 64 MiB of address space per thread arena; with RLIMIT_AS that would
        # turn a few BLAS threads into spurious MemoryErrors.
        "MALLOC_ARENA_MAX": "2",
    }
    if cpus:
        for name in THREAD_VARS:
            env[name] = str(len(cpus))
    for name, value in (extra or {}).items():
        if not SECRET_NAME.search(name):
            env[name] = value
    return env


def _bwrap_args(
    bwrap: _Bwrap,
    *,
    argv: Sequence[str],
    work_dir: str,
    mounts: Sequence[tuple[str, str, bool]],
    env: Mapping[str, str],
    tmpfs_bytes: int,
    info_fd: int | None,
) -> list[str]:
    """bwrap's arguments. `mounts` are (host path, jail path, writable); the interpreter's
    prefixes are added here."""
    if bwrap.as_root:
        args = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"]
        args.append("--unshare-cgroup-try")
    else:
        args = ["--unshare-all", "--unshare-user", "--uid", str(JAIL_UID)]
        args += ["--gid", str(JAIL_GID)]
        if bwrap.version >= (0, 8):
            args.append("--disable-userns")
    args += ["--die-with-parent", "--new-session", "--hostname", "jail", "--clearenv"]
    for name, value in env.items():
        args += ["--setenv", name, value]

    args += ["--ro-bind", "/usr", "/usr"]
    exists = {"/", "/usr", "/proc", "/dev", "/dev/shm", "/tmp"}
    for name in _ROOT_LINKS:
        path = f"/{name}"
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
        exists.add(path)
    size = ["--size", str(tmpfs_bytes)] if bwrap.version >= (0, 7) else []
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += ["--perms", "1777", *size, "--tmpfs", "/dev/shm"]
    args += ["--perms", "1777", *size, "--tmpfs", "/tmp"]

    every = [(p, p, False) for p in _python_prefixes()] + list(mounts)
    # Parents before children, so that a bind inside another bind lands on top of it.
    every.sort(key=lambda m: len(Path(m[1]).parts))
    mounted: list[str] = []
    for host, jail, writable in every:
        for parent in reversed(Path(jail).parents):
            name = str(parent)
            inside = any(name == m or name.startswith(m + "/") for m in mounted)
            if name in exists or inside:
                continue
            # Made explicitly: the parents bwrap makes on its own are 0700, which would hide a
            # bind under /root from uid 65534.
            args += ["--perms", "0755", "--dir", name]
            exists.add(name)
        args += ["--bind" if writable else "--ro-bind", host, jail]
        mounted.append(jail)
        exists.add(jail)
    if not bwrap.as_root:
        args += ["--chdir", work_dir]
    if info_fd is not None:
        args += ["--info-fd", str(info_fd)]
    args += ["--cap-drop", "ALL"]
    if bwrap.as_root:
        # Just enough for setpriv to change uid and empty the bounding set; all gone after it.
        for cap in ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"):
            args += ["--cap-add", cap]
    args.append("--")
    if bwrap.as_root:
        assert bwrap.setpriv is not None
        args += [
            bwrap.setpriv,
            f"--reuid={JAIL_UID}",
            f"--regid={JAIL_GID}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
            # bwrap's own --chdir runs as root without CAP_DAC_OVERRIDE, which may not enter
            # a 0700 work dir that now belongs to JAIL_UID; after setpriv the owner can.
            bwrap.env,
            f"--chdir={work_dir}",
            "--",
        ]
    args += list(argv)
    return args


def _filled_memfd(name: str, data: bytes) -> int:
    """A memfd holding `data`, positioned at its start, for bwrap to read and close."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _bwrap_command(bwrap: _Bwrap, args: Sequence[str]) -> tuple[list[str], tuple[int, int]]:
    """(the command line, the two descriptors it needs passed) for bwrap with `args`.

    bwrap's argv is what the jail reads as /proc/1/cmdline, so it holds nothing of the host:
    the options travel in a memfd (`--args FD`, read and closed by bwrap), and the command,
    which bwrap only takes on its argv, is a shell that runs the real one from a variable set
    by those options (and unset again before the exec). The seccomp filter travels in another
    memfd (`--seccomp FD`), read and closed by bwrap before the program starts. The caller
    closes its copies of both descriptors once bwrap has been started."""
    split = list(args).index("--")
    options, command = list(args[:split]), list(args[split + 1 :])
    script = f"unset {_EXEC_VARIABLE}; exec {shlex.join(command)}"
    seccomp_fd = _filled_memfd("accelopt-seccomp", filter_program())
    try:
        listed = ["--seccomp", str(seccomp_fd), *options, "--setenv", _EXEC_VARIABLE, script]
        data = b"".join(os.fsencode(a) + b"\0" for a in listed)
        args_fd = _filled_memfd("accelopt-bwrap-args", data)
    except BaseException:
        os.close(seccomp_fd)
        raise
    trampoline = [bwrap.shell, "-c", f'eval "${_EXEC_VARIABLE}"']
    return [bwrap.path, "--args", str(args_fd), "--", *trampoline], (args_fd, seccomp_fd)


def _work_as_tmpfs(args: list[str], work: str, size_bytes: int) -> list[str]:
    """`args` with the work dir's writable bind turned into a tmpfs of `size_bytes`: a quota
    on everything written there (its pages count against the memory cgroup too)."""
    for i in range(len(args) - 2):
        if args[i : i + 3] == ["--bind", work, work]:
            tmpfs = ["--perms", "1777", "--size", str(size_bytes), "--tmpfs", work]
            return [*args[:i], *tmpfs, *args[i + 3 :]]
    raise RuntimeError(f"the work dir {work} is not among bwrap's binds")


def _mount_pairs(items: Iterable[Mount], what: str) -> list[tuple[str, str]]:
    pairs = []
    for item in items:
        host, jail = item if isinstance(item, tuple) else (item, item)
        host_s, jail_s = os.path.abspath(os.fspath(host)), os.fspath(jail)
        if not os.path.isabs(jail_s) or os.path.normpath(jail_s) != jail_s or jail_s == "/":
            raise ValueError(f"{what}: jail path {jail_s!r} must be absolute and normalized")
        system = jail_s in ("/proc", "/dev") or jail_s.startswith(("/proc/", "/dev/"))
        if system and not jail_s.startswith("/dev/shm/"):
            raise ValueError(f"{what}: cannot mount on {jail_s} (only under /dev/shm)")
        if not os.path.lexists(host_s):
            raise ValueError(f"{what}: {host_s} does not exist")
        pairs.append((host_s, jail_s))
    return pairs


def _check_can_hand_over(path: str) -> None:
    """Refuse to chown what must never belong to the jail's uid."""
    if os.path.islink(path):
        raise ValueError(f"writable path {path} is a symlink: give the real path")
    real = Path(os.path.realpath(path))
    if len(real.parts) < 3:
        raise ValueError(f"writable path {path} is a top-level directory")
    protected = [Path.home(), Path.cwd(), *(Path(p) for p in _python_prefixes())]
    for keep in protected:
        keep = Path(os.path.realpath(keep))
        if real == keep or real in keep.parents:
            raise ValueError(f"writable path {path} contains {keep}")


def _hand_over(path: str) -> None:
    """chown `path` (and, for a directory, everything below it) to the jail's uid. Symlinks
    are changed themselves, never followed: a previous program may have planted some."""
    os.lchown(path, JAIL_UID, JAIL_GID)
    if os.path.isdir(path) and not os.path.islink(path):
        for root, dirs, files in os.walk(path):
            for name in dirs + files:
                os.lchown(os.path.join(root, name), JAIL_UID, JAIL_GID)


def _translate(argv: Sequence[str], pairs: Sequence[tuple[str, str]]) -> list[str]:
    """Kind "none": argv items naming a jail path (or one under it) -> the host path."""
    out = []
    for arg in argv:
        for host, jail in pairs:
            if arg == jail or arg.startswith(jail + "/"):
                arg = host + arg[len(jail) :]
                break
        out.append(arg)
    return out


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
        freeze_method: FreezeMethod,
        freezer: FreezerGroup | V2Group | None,
        pids_group: PidsGroup | None,
        cpuset: CpusetGroup | None,
        cpuacct: CpuacctGroup | None = None,
        memory: MemoryGroup | None = None,
        memory_limit_by: MemoryLimitBy = "rlimit",
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
        self.freeze_method: FreezeMethod = freeze_method
        self.cpus_enforced = cpuset is not None
        """The CPUs are a cpuset cgroup the program cannot widen (else affinity only)."""
        self.pid = popen.pid
        """Host pid of the direct child: bwrap, or the program itself in kind "none"."""
        self.init_pid = init_pid
        """Host pid of the jail's pid 1 (bwrap's reaper), when known."""
        self._delay_pids: list[int] | None = None
        self.pid_namespace = pid_namespace
        self._popen = popen
        self._freezer = freezer
        self._pids_group = pids_group
        self._cpuset = cpuset
        self._cpuacct = cpuacct
        self._memory = memory
        self.memory_limit_by: MemoryLimitBy = memory_limit_by
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
            if self._memory is not None:
                self._memory_peak_mb = self._memory.peak_mb()
            elif isinstance(self._freezer, V2Group):
                self._memory_peak_mb = self._freezer.peak_mb()
        return self._memory_peak_mb

    @property
    def memory_limit_hit(self) -> bool:
        """The jail as a whole reached `memory_limit_mb` (its cgroup's OOM killer ran, or it is
        stuck at the limit): sticky, and readable after `kill()`."""
        if not self._memory_limit_hit and not self._cleaned:
            if self._memory is not None:
                self._memory_limit_hit = self._memory.limit_hit()
            elif isinstance(self._freezer, V2Group):
                self._memory_limit_hit = self._freezer.memory_limit_hit()
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
        for group in self._groups():
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

    def _groups(self) -> list[Group]:
        groups: list[Group | None] = [
            self._pids_group,
            self._freezer,
            self._cpuset,
            self._cpuacct,
            self._memory,
        ]
        return [g for g in groups if g is not None]

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
        for group in self._groups():
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


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):
        return None


def _read_info(fd: int, timeout_s: float = 10.0) -> dict[str, int]:
    """bwrap's --info-fd report (the jail's pid 1 and namespaces); {} when it never came."""
    data = b""
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                break
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
            with contextlib.suppress(ValueError):
                parsed = json.loads(data)
                if isinstance(parsed, dict):
                    return {k: v for k, v in parsed.items() if isinstance(v, int)}
    finally:
        os.close(fd)
    return {}


def _make_freezer(
    freezer: Literal["auto", "cgroup-v1", "cgroup-v2", "signals"], max_processes: int | None
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


def spawn_jailed(
    argv: Sequence[str],
    *,
    work_dir: PathLike,
    read_only: Iterable[Mount] = (),
    writable: Iterable[Mount] = (),
    pass_fds: Sequence[int] = (),
    env: Mapping[str, str] | None = None,
    cpus: set[int] | None = None,
    memory_limit_mb: int,
    max_processes: int | None,
    stdout_limit_bytes: int = 1 << 20,
    stderr_limit_bytes: int = 1 << 20,
    max_file_bytes: int = 1 << 30,
    max_open_files: int = 1024,
    tmpfs_mb: int = 256,
    work_quota_mb: int | None = None,
    freezer: Literal["auto", "cgroup-v1", "cgroup-v2", "signals"] = "auto",
) -> JailedProcess:
    """Start `argv` jailed (see the module docstring for what it sees) and return at once.

    work_dir: an existing directory, bound writable at its own path; the cwd and TMPDIR.
    read_only / writable: host paths, or (host path, path inside the jail) pairs. As root,
    `work_dir` and the `writable` paths are chowned to JAIL_UID first (files the caller makes
    there later must be chowned by it); `read_only` ones must be readable by JAIL_UID.
    pass_fds: descriptors that stay open, at the same numbers, in the program.
    env: variables on top of the jail's minimum (secret-looking names are dropped).
    cpus: cores the program may run on.
    memory_limit_mb: the jail's memory cgroup, where one can be made, holds all its processes
    together with the tmpfs pages they wrote to it (see `memory_limit_by`, `memory_limit_hit`,
    `memory_peak_mb`); each process's RLIMIT_AS is then a loose backstop
    (sandbox.address_space_backstop_mb). Without such a group, RLIMIT_AS of each process.
    max_processes: processes and threads the program may have at once (pids cgroup).
    tmpfs_mb: size of each of /tmp and /dev/shm inside (bwrap 0.7+).
    work_quota_mb: under bwrap 0.7+, the work dir inside is a tmpfs of this size, with what
    the host work dir held bound read-only into it (kernel "none": not enforced).
    freezer: "auto" picks the cgroup-v1 freezer, else cgroup v2, else signals.

    ValueError for bad arguments, JailUnavailable when ACCELOPT_JAIL=bwrap and no jail can
    run, OSError when nothing can be started at all; never for what the program does."""
    if not argv:
        raise ValueError("argv is empty: give the command to run")
    if memory_limit_mb < 16:
        raise ValueError(f"memory_limit_mb must be at least 16, got {memory_limit_mb}")
    if max_processes is not None and max_processes < 1:
        raise ValueError(f"max_processes must be positive, got {max_processes}")
    check_cpus(cpus)
    for fd in pass_fds:
        if fd < 3:
            raise ValueError(f"pass_fds: {fd} is one of stdin/stdout/stderr")
        os.fstat(fd)  # OSError now rather than a confusing failure inside
    work = os.path.abspath(os.fspath(work_dir))
    if not os.path.isdir(work):
        raise ValueError(f"work_dir {work} is not a directory")
    ro_pairs = _mount_pairs(read_only, "read_only")
    rw_pairs = _mount_pairs(writable, "writable")
    mounts: dict[str, tuple[str, bool]] = {}
    for (host, jail), rw in [*((p, False) for p in ro_pairs), *((p, True) for p in rw_pairs)]:
        if jail in mounts and mounts[jail][0] != host:
            raise ValueError(f"{jail} is given twice, for {mounts[jail][0]} and {host}")
        mounts[jail] = (host, rw or mounts.get(jail, (host, False))[1])
    if work in mounts and mounts[work][0] != work:
        raise ValueError(f"{work} is the work dir and also a mount of {mounts[work][0]}")
    mounts[work] = (work, True)

    status = jail_status()
    if status.kind == "none" and _mode() == "bwrap":
        raise JailUnavailable(f"{MODE_VARIABLE}=bwrap, but {status.reason}")
    bwrap = _probe()[0] if status.kind == "bwrap" else None
    if bwrap is not None and bwrap.as_root:
        handed = [host for host, rw in mounts.values() if rw]
        for host in handed:
            _check_can_hand_over(host)
        for host in handed:
            _hand_over(host)

    remove_stale_groups()
    extra = _BWRAP_PROCESSES if bwrap is not None else 0
    pids_group = PidsGroup.make(max_processes + extra if max_processes is not None else None)
    freezer_group = _make_freezer(freezer, max_processes + extra if max_processes else None)
    # One limit for the whole jail (RLIMIT_AS binds each process alone: children and tmpfs
    # files would add up past it); v2 keeps it on the freezer's group.
    memory_group = None
    memory_limit_by: MemoryLimitBy = "rlimit"
    if isinstance(freezer_group, V2Group):
        if freezer_group.set_memory_limit(memory_limit_mb):
            memory_limit_by = "cgroup-v2"
    else:
        memory_group = MemoryGroup.make(memory_limit_mb)
        if memory_group is not None:
            memory_limit_by = "cgroup-v1"
    quota = None
    if bwrap is not None and work_quota_mb is not None and bwrap.version >= (0, 7):
        quota = (work, work_quota_mb)
        # What the host work dir holds stays visible (read-only); new files go to the tmpfs.
        for entry in sorted(os.listdir(work)):
            inner = os.path.join(work, entry)
            mounts.setdefault(inner, (inner, False))
    cpuset = CpusetGroup.make(cpus) if cpus else None
    # The CPU time of the whole jail, for the harness's contention correction (a v2 group
    # keeps it in cpu.stat already).
    cpuacct = None if isinstance(freezer_group, V2Group) else CpuacctGroup.make()
    every_group = (pids_group, freezer_group, cpuset, cpuacct, memory_group)
    groups: list[Group] = [g for g in every_group if g is not None]
    method: FreezeMethod = "signals" if freezer_group is None else freezer_group.method
    # As root the program runs as JAIL_UID, which RLIMIT_NPROC does bind; it counts every
    # process of that uid on the host (all jails), so there it is only the fallback for a
    # missing pids cgroup.
    as_root_jail = bwrap is not None and bwrap.as_root
    nproc = pids_group is None if as_root_jail else os.geteuid() != 0
    limits = resource_limits(
        memory_limit_mb=memory_limit_mb,
        # Where the group holds the jail it is the limit: RLIMIT_AS, which binds each process
        # alone and counts address space (not memory), is then only a backstop against
        # address-space bombs, loose enough that the group always acts first.
        address_space_mb=(
            address_space_backstop_mb(memory_limit_mb) if memory_limit_by != "rlimit" else None
        ),
        max_file_bytes=max_file_bytes,
        max_processes=max_processes,
        nproc=nproc,
        max_open_files=max_open_files,
    )
    info_r = info_w = -1
    launch_fds: tuple[int, ...] = ()
    marker: bytes | None = None
    try:
        if bwrap is not None:
            info_r, info_w = os.pipe()
            args = _bwrap_args(
                bwrap,
                argv=argv,
                work_dir=work,
                mounts=[(host, jail, rw) for jail, (host, rw) in mounts.items()],
                env=_jail_environment(work, env, cpus),
                tmpfs_bytes=tmpfs_mb << 20,
                info_fd=info_w,
            )
            if quota is not None:
                args = _work_as_tmpfs(args, work, quota[1] << 20)
            command, launch_fds = _bwrap_command(bwrap, args)
            # bwrap is pid 1 inside: with any environment of ours, /proc/1/environ would show it.
            child_env: dict[str, str] = {}
            cwd = "/"
            fds = (*pass_fds, info_w, *launch_fds)
        else:
            command = _translate(argv, [(h, j) for j, (h, _) in mounts.items()])
            if platform.machine() in FILTER_ARCHS:
                # The same seccomp filter, loaded by a wrapper that then execs the program.
                command = filtered_command(sys.executable, command)
            child_env = sandbox_environment(Path(work), dict(env or {}), cpus)
            child_env[RUN_MARKER] = uuid.uuid4().hex
            marker = f"{RUN_MARKER}={child_env[RUN_MARKER]}".encode()
            cwd = work
            fds = tuple(pass_fds)
        popen = subprocess.Popen(
            launcher_command(
                list(command), cgroups=[g.procs_file for g in groups], limits=limits, cpus=cpus
            ),
            cwd=cwd,
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=fds,
            start_new_session=True,
        )
    except BaseException:
        for fd in (info_r, info_w, *launch_fds):
            if fd >= 0:
                os.close(fd)
        for group in groups:
            group.remove()
        raise
    info: dict[str, int] = {}
    for fd in launch_fds:
        os.close(fd)
    if bwrap is not None:
        os.close(info_w)
        info = _read_info(info_r)
    return JailedProcess(
        popen,
        list(argv),
        kind="bwrap" if bwrap is not None else "none",
        freeze_method=method,
        freezer=freezer_group,
        pids_group=pids_group,
        cpuset=cpuset,
        memory=memory_group,
        memory_limit_by=memory_limit_by,
        work_quota=quota,
        cpuacct=cpuacct,
        init_pid=info.get("child-pid"),
        pid_namespace=info.get("pid-namespace"),
        marker=marker,
        memory_limit_mb=memory_limit_mb,
        max_processes=max_processes,
        stdout_limit_bytes=stdout_limit_bytes,
        stderr_limit_bytes=stderr_limit_bytes,
    )
