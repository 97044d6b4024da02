"""Attack 9: return an uninitialized array and let a background thread fill it in afterwards.

The first 4 calls (a harness's correctness checks and warm-up, presumably) are computed
synchronously; from then on the kernel returns np.empty at once and hands the work to a worker
thread it started earlier (with a short GIL switch interval, so the worker gets going while the
caller reads its clock).
"""

import queue
import sys
import threading

import numpy as np

_calls = [0]
_work = queue.SimpleQueue()


def _fill(x, out):
    np.subtract(x, x.max(axis=1, keepdims=True), out=out)
    np.exp(out, out=out)
    out /= out.sum(axis=1, keepdims=True)


def _worker():
    while True:
        x, out = _work.get()
        _fill(x, out)


threading.Thread(target=_worker, daemon=True).start()


def kernel(x):
    _calls[0] += 1
    out = np.empty_like(x)
    if _calls[0] <= 4:
        _fill(x, out)
        return out
    sys.setswitchinterval(1e-5)
    _work.put((x, out))
    return out
