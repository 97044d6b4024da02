"""Attack 15: leave a daemon behind.

On its first call it double-forks, calls setsid, moves itself out of its cgroups (writes its pid
into the parent group's cgroup.procs) and becomes `python -c ... accelopt-attack-daemon`, which
writes a heartbeat file /tmp/accelopt-attack-daemon-<pid>.hb ten times a second. The answer it
returns is honest.

Safety: it leaves only cgroups whose name starts with `accelopt`, and the daemon exits by itself
after 60 s.
"""

import contextlib
import os
import sys

import numpy as np

DAEMON = """
import os, time
path = "/tmp/accelopt-attack-daemon-%d.hb" % os.getpid()
end = time.time() + 60
while time.time() < end:
    try:
        with open(path, "w") as f:
            f.write(repr(time.time()))
    except OSError:
        pass
    time.sleep(0.1)
"""
_started = [False]


def _leave_cgroups():
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if not os.path.basename(path).startswith("accelopt"):
            continue
        parent = os.path.dirname(path).lstrip("/")
        if controllers:
            mounts = [f"/sys/fs/cgroup/{controllers}"]
            mounts += [f"/sys/fs/cgroup/{c}" for c in controllers.split(",")]
        else:
            mounts = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
        for mount in dict.fromkeys(mounts):
            procs_file = os.path.join(mount, parent, "cgroup.procs")
            with contextlib.suppress(OSError), open(procs_file, "w") as procs:
                procs.write(str(os.getpid()))


def _spawn():
    pid = os.fork()
    if pid:
        with contextlib.suppress(OSError):
            os.waitpid(pid, 0)
        return
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        _leave_cgroups()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, 1024)
        os.execv(
            sys.executable, [sys.executable, "-I", "-S", "-c", DAEMON, "accelopt-attack-daemon"]
        )
    finally:
        os._exit(0)


def kernel(x):
    if not _started[0]:
        _started[0] = True
        with contextlib.suppress(OSError):
            _spawn()
    out = x - x.max(axis=1, keepdims=True)
    np.exp(out, out=out)
    out /= out.sum(axis=1, keepdims=True)
    return out
