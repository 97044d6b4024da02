"""Whether and how bubblewrap can jail a program on this host: `jail_status` (the kind
jail.spawn_jailed will use, and why), the probe behind it (`probe_bwrap`: finds bwrap, setpriv
and a shell, then starts one trivial jail exactly as spawn_jailed would), the host facts every
jail lays out (`host_layout`, `python_prefixes`), the interpreter to jail (`python_for_jail`)
and `bwrap_command`, the one launch step the probe and spawn_jailed share (it puts the pure
builder's output, from jail_argv, into memfds).

A plain-dataclass module: the cpu harness imports it in every evaluation, and must not load
pydantic."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from accelopt_mcp.isolation.jail_argv import (
    JAIL_GID,
    JAIL_UID,
    ROOT_LINKS,
    Bwrap,
    HostLayout,
    args_file_contents,
    bwrap_args,
    jail_environment,
    launch_command,
)
from accelopt_mcp.isolation.seccomp import filter_program

__all__ = [
    "MODE_VARIABLE",
    "JailStatus",
    "JailUnavailable",
    "bwrap_command",
    "host_layout",
    "jail_mode",
    "jail_status",
    "probe_bwrap",
    "python_for_jail",
    "python_prefixes",
]

MODE_VARIABLE = "ACCELOPT_JAIL"
_SETPRIV_CANDIDATES = ("/usr/bin/setpriv", "/bin/setpriv")


@dataclass(frozen=True)
class JailStatus:
    """Which jail `spawn_jailed` uses on this host, and why. A plain dataclass: the cpu
    harness imports this module in every evaluation, and must not load pydantic."""

    kind: Literal["bwrap", "none"]
    reason: str
    """What is active, or why no jail can run here and how to get one."""


class JailUnavailable(RuntimeError):
    """ACCELOPT_JAIL=bwrap asked for a jail and none can run here."""


def python_for_jail() -> str:
    """The interpreter to name in a jailed argv: this process's own (the venv's), which works
    inside because its prefixes are bound read-only at the same paths, NumPy included."""
    if not sys.executable:
        raise RuntimeError("sys.executable is empty: cannot tell which Python to jail")
    return sys.executable


def python_prefixes() -> list[str]:
    """The interpreter's install prefixes (sys.prefix and the like, and the real executable's)
    that exist, outside /usr, and are not /: what a jail binds read-only for it."""
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


def host_layout() -> HostLayout:
    """What of this host every jail shows, as jail_argv.bwrap_args takes it: the python
    prefixes, and which of /bin, /sbin, /lib... are symlinks (and to what) or directories."""
    root: list[tuple[str, str | None]] = []
    for name in ROOT_LINKS:
        path = f"/{name}"
        if os.path.islink(path):
            root.append((path, os.readlink(path)))
        elif os.path.isdir(path):
            root.append((path, None))
    return HostLayout(python_prefixes=tuple(python_prefixes()), root_entries=tuple(root))


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


def bwrap_command(bwrap: Bwrap, args: Sequence[str]) -> tuple[list[str], tuple[int, int]]:
    """(the command line, the two descriptors it needs passed) for bwrap with `args` (from
    jail_argv.bwrap_args).

    bwrap's argv is what the jail reads as /proc/1/cmdline, so it holds nothing of the host:
    the options travel in a memfd (`--args FD`, read and closed by bwrap), and the command,
    which bwrap only takes on its argv, is a shell that runs the real one from a variable set
    by those options (and unset again before the exec). The seccomp filter travels in another
    memfd (`--seccomp FD`), read and closed by bwrap before the program starts. The caller
    closes its copies of both descriptors once bwrap has been started."""
    seccomp_fd = _filled_memfd("accelopt-seccomp", filter_program())
    try:
        data = args_file_contents(args, seccomp_fd=seccomp_fd)
        args_fd = _filled_memfd("accelopt-bwrap-args", data)
    except BaseException:
        os.close(seccomp_fd)
        raise
    return launch_command(bwrap, args_fd=args_fd), (args_fd, seccomp_fd)


def _version(path: str) -> tuple[int, ...]:
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    words = done.stdout.split()
    digits = words[-1].split(".") if words else []
    return tuple(int(d) for d in digits if d.isdigit())


@functools.cache
def probe_bwrap() -> tuple[Bwrap | None, str]:
    """(this host's working bwrap, or None; what is active, or why none works and how to get
    one). Starts one trivial jail, exactly as `spawn_jailed` would, to learn whether it works;
    runs once per process."""
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
    bwrap = Bwrap(path, version, as_root, setpriv, env, shell)
    work_dir = Path(tempfile.mkdtemp(prefix="accelopt-jail-probe-"))
    try:
        if as_root:
            os.chown(work_dir, JAIL_UID, JAIL_GID)
        args = bwrap_args(
            bwrap,
            argv=[python_for_jail(), "-I", "-S", "-c", "pass"],
            work_dir=str(work_dir),
            mounts=[(str(work_dir), str(work_dir), True)],
            env=jail_environment(str(work_dir), None, None),
            tmpfs_bytes=1 << 20,
            info_fd=None,
            host=host_layout(),
        )
        command, fds = bwrap_command(bwrap, args)
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


def jail_mode() -> str:
    """ACCELOPT_JAIL as asked ("" when unset): "none", "bwrap" or "auto"; ValueError else."""
    mode = os.environ.get(MODE_VARIABLE, "").strip().lower()
    if mode not in ("", "auto", "bwrap", "none"):
        raise ValueError(f"{MODE_VARIABLE}={mode!r}: use 'none', 'bwrap' or 'auto'")
    return mode


def jail_status() -> JailStatus:
    """The jail `spawn_jailed` uses here. The probe (one trivial jail) runs once per process;
    ACCELOPT_JAIL=none is read on every call."""
    if jail_mode() == "none":
        return JailStatus(
            kind="none",
            reason=f"{MODE_VARIABLE}=none: the jail is switched off; programs run in the "
            "plain sandbox (environment allowlist and limits only)",
        )
    bwrap, reason = probe_bwrap()
    return JailStatus(kind="bwrap" if bwrap is not None else "none", reason=reason)
