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
from _reach import _reach  # accelopt-attack-include: inlined by attack_source

VICTIM = b"ACCELOPT_ATTACK_VICTIM="


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
