"""Shared by the attacks that read other processes (a10, a11, a14, a16): their line
`from _reach import ...  # accelopt-attack-include: ...` is replaced by this file
(tests/backends/test_attacks.attack_source), since a kernel is one file.

Safety (an attack may run where no jail exists yet): `_reach` keeps to the test's own process
subtree, so an attack never touches a process the test did not start."""

import contextlib
import os


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
