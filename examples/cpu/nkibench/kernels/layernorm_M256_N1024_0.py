import numpy as np


def kernel(x, gamma, beta):
    # Deliberately slow baseline: per row, mean and variance in separate passes, float64.
    rows, cols = x.shape
    out = np.empty((rows, cols), dtype=np.float32)
    for i in range(rows):
        row = x[i].astype(np.float64)
        mean = row.sum() / cols
        centered = row - mean
        var = (centered * centered).sum() / cols
        normed = centered / np.sqrt(var + 1e-5)
        out[i] = (normed * gamma.astype(np.float64) + beta.astype(np.float64)).astype(np.float32)
    return out
