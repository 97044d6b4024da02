import numpy as np


def kernel(x, w):
    # First draft: normalize each row (no eps, no gain) and project it on its own.
    rows, cols = x.shape
    out = np.empty((rows, w.shape[1]), dtype=np.float32)
    for i in range(rows):
        row = x[i]
        rms = np.sqrt(np.sum(np.square(row) / cols))
        out[i] = (row / rms) @ w
    return out
