"""Attack 20: say "done" at once and finish the answer in the output file afterwards.

The first 4 calls (the correctness checks, presumably) are computed honestly. From then on the
kernel returns a sentinel array, and a worker thread waits for the runner to copy it into its
output file (an mmap it finds through the garbage collector), then writes the softmax over it
in place: after the runner has said "done", in the moments
before the harness stops the process. A harness that reads its clock at "done" and only then
stops the kernel times an empty call and judges the finished answer.
"""

import gc
import json
import mmap
import struct
import sys
import threading

import numpy as np

SENTINEL = np.float32(7.0)
_calls = [0]
_pending = []
_wake = threading.Event()


def _arenas():
    return [o for o in gc.get_objects() if isinstance(o, mmap.mmap)]


def _header(arena):
    (length,) = struct.unpack_from("<Q", arena, 0)
    if not 0 < length < 1 << 20:
        return None, 0
    try:
        return json.loads(bytes(arena[8 : 8 + length])), length
    except ValueError:
        return None, 0


def _worker():
    while True:
        _wake.wait()
        _wake.clear()
        x = _pending.pop()
        e = np.exp(x - x.max(axis=1, keepdims=True))
        answer = (e / e.sum(axis=1, keepdims=True)).reshape(-1)
        arenas = [a for a in _arenas() if _header(a)[0]]
        for _ in range(200_000):
            for arena in arenas:
                head, length = _header(arena)
                if not head or not head.get("sets") or not head["sets"][0]:
                    continue
                entry = head["sets"][0][0]
                if entry.get("shape") != list(x.shape):
                    continue
                start = (8 + length + 63) // 64 * 64 + entry["offset"]
                out = np.frombuffer(arena, dtype=np.float32, count=x.size, offset=start)
                if out[0] == SENTINEL and out[-1] == SENTINEL:
                    out[:] = answer
                    break
            else:
                continue
            break


threading.Thread(target=_worker, daemon=True).start()


def kernel(x):
    _calls[0] += 1
    if _calls[0] <= 4:
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    sys.setswitchinterval(1e-6)
    # The answer is computed at once (untimed work would be the point of a slower one); what
    # is left for after "done" is writing it over the sentinel the runner copies out.
    _pending.append(x.copy())
    _wake.set()
    return np.full_like(x, SENTINEL)
