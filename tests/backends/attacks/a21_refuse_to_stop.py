"""Attack 21: keep running after "done" by disarming whatever stops the process when it answers.

The kernel computes honest answers, but first goes through the garbage collector for the
runner's functions and replaces every `kill` they hold in a closure with a no-op (so a runner
that stops itself after answering no longer does), and keeps a busy thread going: work that
would run untimed between calls if the harness believed the process had stopped. The harness
must notice that it did not stop and fail the evaluation, not time it.
"""

import gc
import threading
import types

import numpy as np


def _disarm():
    for obj in gc.get_objects():
        if isinstance(obj, types.FunctionType) and obj.__closure__:
            names = obj.__code__.co_freevars
            for name, cell in zip(names, obj.__closure__, strict=True):
                if name == "kill":
                    cell.cell_contents = lambda *args: None


def _busy():
    total = 0
    while True:
        total += 1


_disarm()
threading.Thread(target=_busy, daemon=True).start()


def kernel(x):
    _disarm()
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)
