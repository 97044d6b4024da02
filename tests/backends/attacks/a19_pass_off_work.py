"""Attack 19: have the work done by a thread that exits before "done", while the calling thread
waits runnable behind it, so that the harness takes the work for another program's.

A harness that takes out of each call the time its kernel spent waiting for a CPU (the time a
busy host took) must not count the kernel's own threads as that host. This kernel pins itself
to one core, lowers its calling thread's priority to the least, and spins there (runnable, so
its wait grows) while a fresh worker thread computes the answer and exits: a harness that adds
up the CPU time of the threads it can still see finds almost none, and a run-queue wait as long
as the call.
"""

import contextlib
import os
import threading
import time

import numpy as np


def _fill(x, out, done):
    np.subtract(x, x.max(axis=1, keepdims=True), out=out)
    np.exp(out, out=out)
    out /= out.sum(axis=1, keepdims=True)
    done.set()


def kernel(x):
    core = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(core)})
    out = np.empty_like(x)
    done = threading.Event()
    worker = threading.Thread(target=_fill, args=(x, out, done))
    me = threading.get_native_id()
    before = os.getpriority(os.PRIO_PROCESS, me)
    worker.start()
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, me, 19)
    while not done.is_set():  # runnable all along (sleep(0) lets the GIL go, not the CPU)
        time.sleep(0)
    worker.join()
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, me, before)
    return out
