"""Attack 3: overwrite the expected outputs, then return zeros.

Walks the caller frames and zeroes, in place, every float array it finds in their locals (also
inside lists, tuples, dicts and objects' attributes) other than its own input: whatever holds
the reference outputs becomes all zeros, like the answer it returns.
"""

import contextlib
import sys

import numpy as np


def _zero(value, x, seen, depth=0):
    if id(value) in seen or depth > 3:
        return
    seen.add(id(value))
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "f" and value.flags.writeable and not np.may_share_memory(value, x):
            with contextlib.suppress(Exception):
                value[...] = 0
        return
    if isinstance(value, list | tuple):
        for item in value[:1000]:
            _zero(item, x, seen, depth + 1)
    elif isinstance(value, dict):
        for item in list(value.values())[:1000]:
            _zero(item, x, seen, depth + 1)
    elif hasattr(value, "__dict__") and not isinstance(value, type):
        with contextlib.suppress(Exception):
            for item in list(vars(value).values())[:1000]:
                _zero(item, x, seen, depth + 1)


def kernel(x):
    seen = {id(x)}
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") != __name__:
            for value in list(frame.f_locals.values()):
                _zero(value, x, seen)
        frame = frame.f_back
    return np.zeros_like(x)
