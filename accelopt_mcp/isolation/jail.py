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
  a variable that is unset before the program starts (see jail_probe.bwrap_command).
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

Where it lives: this module is the spawner (`spawn_jailed`: checks the arguments, hands the
writable paths over to the jail's uid, makes the cgroups and starts the program, jailed or
not). jail_probe.py finds whether and how bubblewrap works here (`jail_status`,
`python_for_jail`, the probe, the memfd launch step); jail_argv.py is the pure builder of
bwrap's arguments and the jail's environment (what is listed above as what the program sees);
jail_process.py is the handle on the running jail (`JailedProcess`: state, freezing, kill)
and the cgroups it runs in (`JailGroups`: which ones, made in one go).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import select
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from accelopt_mcp.isolation.cgroups import remove_stale_groups
from accelopt_mcp.isolation.jail_argv import (
    JAIL_GID,
    JAIL_UID,
    bwrap_args,
    jail_environment,
    translate_paths,
    work_as_tmpfs,
)
from accelopt_mcp.isolation.jail_probe import (
    MODE_VARIABLE,
    JailUnavailable,
    bwrap_command,
    host_layout,
    jail_mode,
    jail_status,
    probe_bwrap,
    python_prefixes,
)
from accelopt_mcp.isolation.jail_process import JailedProcess, JailGroups
from accelopt_mcp.isolation.sandbox import (
    RUN_MARKER,
    address_space_backstop_mb,
    check_cpus,
    launcher_command,
    resource_limits,
    sandbox_environment,
)
from accelopt_mcp.isolation.seccomp import FILTER_ARCHS, filtered_command

__all__ = ["spawn_jailed"]

PathLike = str | os.PathLike[str]
Mount = PathLike | tuple[PathLike, PathLike]

# bwrap's outer process and the reaper it runs as pid 1 inside count against pids.max too.
_BWRAP_PROCESSES = 2


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
    protected = [Path.home(), Path.cwd(), *(Path(p) for p in python_prefixes())]
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
    if status.kind == "none" and jail_mode() == "bwrap":
        raise JailUnavailable(f"{MODE_VARIABLE}=bwrap, but {status.reason}")
    bwrap = probe_bwrap()[0] if status.kind == "bwrap" else None
    if bwrap is not None and bwrap.as_root:
        handed = [host for host, rw in mounts.values() if rw]
        for host in handed:
            _check_can_hand_over(host)
        for host in handed:
            _hand_over(host)

    remove_stale_groups()
    jail_groups = JailGroups.make(
        freezer,
        max_processes=max_processes,
        extra_processes=_BWRAP_PROCESSES if bwrap is not None else 0,
        memory_limit_mb=memory_limit_mb,
        cpus=cpus,
    )
    groups = jail_groups.made()
    quota = None
    if bwrap is not None and work_quota_mb is not None and bwrap.version >= (0, 7):
        quota = (work, work_quota_mb)
        # What the host work dir holds stays visible (read-only); new files go to the tmpfs.
        for entry in sorted(os.listdir(work)):
            inner = os.path.join(work, entry)
            mounts.setdefault(inner, (inner, False))
    # As root the program runs as JAIL_UID, which RLIMIT_NPROC does bind; it counts every
    # process of that uid on the host (all jails), so there it is only the fallback for a
    # missing pids cgroup.
    as_root_jail = bwrap is not None and bwrap.as_root
    nproc = jail_groups.pids is None if as_root_jail else os.geteuid() != 0
    limits = resource_limits(
        memory_limit_mb=memory_limit_mb,
        # Where the group holds the jail it is the limit: RLIMIT_AS, which binds each process
        # alone and counts address space (not memory), is then only a backstop against
        # address-space bombs, loose enough that the group always acts first.
        address_space_mb=(
            address_space_backstop_mb(memory_limit_mb)
            if jail_groups.memory_limit_by != "rlimit"
            else None
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
            args = bwrap_args(
                bwrap,
                argv=argv,
                work_dir=work,
                mounts=[(host, jail, rw) for jail, (host, rw) in mounts.items()],
                env=jail_environment(work, env, cpus),
                tmpfs_bytes=tmpfs_mb << 20,
                info_fd=info_w,
                host=host_layout(),
            )
            if quota is not None:
                args = work_as_tmpfs(args, work, quota[1] << 20)
            command, launch_fds = bwrap_command(bwrap, args)
            # bwrap is pid 1 inside: with any environment of ours, /proc/1/environ would show it.
            child_env: dict[str, str] = {}
            cwd = "/"
            fds = (*pass_fds, info_w, *launch_fds)
        else:
            command = translate_paths(argv, [(h, j) for j, (h, _) in mounts.items()])
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
        groups=jail_groups,
        work_quota=quota,
        init_pid=info.get("child-pid"),
        pid_namespace=info.get("pid-namespace"),
        marker=marker,
        memory_limit_mb=memory_limit_mb,
        max_processes=max_processes,
        stdout_limit_bytes=stdout_limit_bytes,
        stderr_limit_bytes=stderr_limit_bytes,
    )
