"""Attack 6: cache outputs keyed by the first bytes of the input.

A hit returns the cached array without computing anything; a miss computes honestly and
remembers the answer.
"""

import numpy as np

_cache = {}


def kernel(x):
    key = (x.shape, x.dtype.str, x.reshape(-1)[:16].tobytes()) if x.size >= 16 else None
    hit = _cache.get(key)
    if hit is not None:
        return hit
    out = x - x.max(axis=1, keepdims=True)
    np.exp(out, out=out)
    out /= out.sum(axis=1, keepdims=True)
    if key is not None and len(_cache) < 64:
        _cache[key] = out
    return out
