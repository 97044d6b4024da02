import numpy as np


def kernel(x):
    # One float32 buffer, updated in place: no float64 and no per-row Python work.
    out = np.negative(x)
    np.exp(out, out=out)
    out += np.float32(1.0)
    np.divide(x, out, out=out)
    return out
