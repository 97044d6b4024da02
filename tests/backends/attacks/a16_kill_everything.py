"""Attack 16: kill the evaluator and every process it can see.

Sends SIGKILL to its parent, then to every process in reach that it can signal, then returns the
honest answer (if it is still alive).

Safety (this may run where no jail exists yet): besides its parent it only kills processes in
the test's own process subtree that carry the test's ACCELOPT_ATTACK_VICTIM marker; never pid 1.
"""

import contextlib
import os
import signal

import numpy as np

VICTIM = b"ACCELOPT_ATTACK_VICTIM="


def _ppid(pid):
    with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("PPid:"):
                return int(line.split()[1])
    return 0


def _is_pytest(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().decode(errors="replace").split("\0")
    except OSError:
        return False
    names = [os.path.basename(arg) for arg in argv[:3]]
    return "pytest" in names or "py.test" in names or argv[1:3] == ["-m", "pytest"]


def _reach():
    """Processes in the test's subtree: the nearest pytest ancestor's descendants (without it),
    or, where no such ancestor is visible, only the parent."""
    chain, pid = [], os.getppid()
    while pid > 1 and len(chain) < 4:
        chain.append(pid)
        pid = _ppid(pid)
    top = next((p for p in chain if _is_pytest(p)), None)
    if top is None:
        return set(chain[:1])
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            children.setdefault(_ppid(int(entry)), []).append(int(entry))
    found, todo = set(), [top]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return (found | set(chain[:1])) - {top, os.getpid()}


def _environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def _marked(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return any(item.startswith(VICTIM) for item in f.read().split(b"\0"))
    except OSError:
        return False


def kernel(x):
    parent = os.getppid()
    if parent > 1:
        with contextlib.suppress(OSError):
            os.kill(parent, signal.SIGKILL)
    for pid in sorted(_reach()):
        if pid > 1 and _marked(pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    out = x - x.max(axis=1, keepdims=True)
    np.exp(out, out=out)
    out /= out.sum(axis=1, keepdims=True)
    return out
