"""The pure builder of a bubblewrap jail's command line and environment: it takes values (what
the probe found out about this host's bwrap, the host paths it lays out, the mounts and the
program's argv) and returns lists, dicts and bytes. It reads no file, starts nothing and
consults neither os.environ nor the process's uid or cwd: what it needs of the host arrives as
a `Bwrap` (from jail_probe.probe_bwrap) and a `HostLayout` (from jail_probe.host_layout).

The entry points, in the order jail.spawn_jailed uses them:

- `jail_environment`: the program's whole environment.
- `bwrap_args`: bwrap's options, "--", then the command bwrap runs (as root: setpriv and env
  in front of the program's argv).
- `work_as_tmpfs`: those arguments with the work dir turned into a size-capped tmpfs.
- `args_file_contents` and `launch_command`: the same split for launching, so that the jail's
  /proc/1/cmdline holds nothing of the host (jail_probe.bwrap_command puts the first into a
  memfd and passes its number to the second).
- `translate_paths`: for the kind "none" fallback, jail paths in an argv -> host paths.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from accelopt_mcp.isolation.sandbox import SECRET_NAME, THREAD_VARS

__all__ = [
    "JAIL_GID",
    "JAIL_UID",
    "ROOT_LINKS",
    "Bwrap",
    "HostLayout",
    "args_file_contents",
    "bwrap_args",
    "jail_environment",
    "launch_command",
    "translate_paths",
    "work_as_tmpfs",
]

JAIL_UID = 65534
JAIL_GID = 65534
ROOT_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
"""The top-level names that hold programs and libraries besides /usr: symlinks into /usr on a
merged-/usr host, directories otherwise (see `HostLayout.root_entries`)."""
# Holds the program's command line for the shell that starts it inside (see args_file_contents).
_EXEC_VARIABLE = "ACCELOPT_JAIL_EXEC"


@dataclass(frozen=True)
class Bwrap:
    """This host's bubblewrap, as jail_probe found it working."""

    path: str
    version: tuple[int, ...]
    as_root: bool
    setpriv: str | None
    """As root: the setpriv that drops to JAIL_UID just before the program."""
    env: str = "/usr/bin/env"
    """As root: the env (coreutils 8.28+) that enters the work dir as JAIL_UID."""
    shell: str = "/bin/sh"
    """The POSIX shell that starts the program (see `launch_command`)."""


@dataclass(frozen=True)
class HostLayout:
    """What of the host's file system every jail shows, read by jail_probe.host_layout."""

    python_prefixes: tuple[str, ...]
    """The interpreter's install prefixes outside /usr, bound read-only at their own paths."""
    root_entries: tuple[tuple[str, str | None], ...]
    """The `ROOT_LINKS` this host has, in that order: (path, symlink target), or (path, None)
    for a directory that is bound read-only."""


def jail_environment(
    work_dir: str, extra: Mapping[str, str] | None, cpus: set[int] | None
) -> dict[str, str]:
    """The jail's whole environment: a fixed minimum (TMPDIR is `work_dir`), the thread-count
    variables set to len(cpus) when `cpus` is given, then `extra` less its secret-looking
    names. Nothing of the caller's own environment."""
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


def bwrap_args(
    bwrap: Bwrap,
    *,
    argv: Sequence[str],
    work_dir: str,
    mounts: Sequence[tuple[str, str, bool]],
    env: Mapping[str, str],
    tmpfs_bytes: int,
    info_fd: int | None,
    host: HostLayout,
) -> list[str]:
    """bwrap's arguments: its options, "--", then the command it runs.

    Namespaces: as root pid, net, ipc, uts and cgroup (no user namespace), and the command is
    setpriv (to JAIL_UID/JAIL_GID, no groups, no capabilities, no_new_privs) and env (into
    `work_dir`) in front of `argv`; otherwise all of them plus a user namespace mapping the jail
    onto JAIL_UID/JAIL_GID (nested ones disabled from bwrap 0.8), and `argv` alone. The
    environment is cleared and `env` set. /usr, `host`'s root entries and python prefixes
    are read-only; /tmp and /dev/shm are tmpfs of `tmpfs_bytes` (bwrap 0.7+). `mounts` are
    (host path, jail path, writable), bound parents first, with the parents that no bind
    provides made 0755."""
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
    for path, target in host.root_entries:
        if target is not None:
            args += ["--symlink", target, path]
        else:
            args += ["--ro-bind", path, path]
    exists.update(f"/{name}" for name in ROOT_LINKS)
    size = ["--size", str(tmpfs_bytes)] if bwrap.version >= (0, 7) else []
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += ["--perms", "1777", *size, "--tmpfs", "/dev/shm"]
    args += ["--perms", "1777", *size, "--tmpfs", "/tmp"]

    every = [(p, p, False) for p in host.python_prefixes] + list(mounts)
    # Parents before children, so that a bind inside another bind lands on top of it.
    every.sort(key=lambda m: len(PurePosixPath(m[1]).parts))
    mounted: list[str] = []
    for host_path, jail, writable in every:
        for parent in reversed(PurePosixPath(jail).parents):
            name = str(parent)
            inside = any(name == m or name.startswith(m + "/") for m in mounted)
            if name in exists or inside:
                continue
            # Made explicitly: the parents bwrap makes on its own are 0700, which would hide a
            # bind under /root from uid 65534.
            args += ["--perms", "0755", "--dir", name]
            exists.add(name)
        args += ["--bind" if writable else "--ro-bind", host_path, jail]
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


def work_as_tmpfs(args: list[str], work: str, size_bytes: int) -> list[str]:
    """`args` with the work dir's writable bind turned into a tmpfs of `size_bytes`: a quota
    on everything written there (its pages count against the memory cgroup too)."""
    for i in range(len(args) - 2):
        if args[i : i + 3] == ["--bind", work, work]:
            tmpfs = ["--perms", "1777", "--size", str(size_bytes), "--tmpfs", work]
            return [*args[:i], *tmpfs, *args[i + 3 :]]
    raise RuntimeError(f"the work dir {work} is not among bwrap's binds")


def args_file_contents(args: Sequence[str], *, seccomp_fd: int) -> bytes:
    """What bwrap reads from `--args FD` for `args` (from `bwrap_args`): NUL-terminated
    options, starting with `--seccomp seccomp_fd`. The command after "--", which bwrap only
    takes on its argv, goes into a variable that those options set, as a shell line that
    unsets it again and execs the command (see `launch_command`)."""
    split = list(args).index("--")
    options, command = list(args[:split]), list(args[split + 1 :])
    script = f"unset {_EXEC_VARIABLE}; exec {shlex.join(command)}"
    listed = ["--seccomp", str(seccomp_fd), *options, "--setenv", _EXEC_VARIABLE, script]
    return b"".join(os.fsencode(a) + b"\0" for a in listed)


def launch_command(bwrap: Bwrap, *, args_fd: int) -> list[str]:
    """bwrap's own argv, which the jail reads as /proc/1/cmdline: its options come from
    `args_fd` (see `args_file_contents`), and its command is a shell that runs the line the
    variable holds. No host path but bwrap's and the shell's."""
    trampoline = [bwrap.shell, "-c", f'eval "${_EXEC_VARIABLE}"']
    return [bwrap.path, "--args", str(args_fd), "--", *trampoline]


def translate_paths(argv: Sequence[str], pairs: Sequence[tuple[str, str]]) -> list[str]:
    """Kind "none": argv items naming a jail path (or one under it) -> the host path. `pairs`
    are (host path, jail path); the first that matches an item wins."""
    out = []
    for arg in argv:
        for host, jail in pairs:
            if arg == jail or arg.startswith(jail + "/"):
                arg = host + arg[len(jail) :]
                break
        out.append(arg)
    return out
