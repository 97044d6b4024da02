import numpy as np


def kernel(x, g):
    # Deliberately slow baseline: one row at a time, in float64, with needless copies.
    rows, cols = x.shape
    out = np.empty((rows, cols), dtype=np.float32)
    for i in range(rows):
        row = x[i].astype(np.float64).copy()
        total = 0.0
        for chunk in np.array_split(row, 16):
            total += float(np.sum(chunk * chunk))
        scale = 1.0 / np.sqrt(total / cols + 1e-6)
        out[i] = (row * scale * g.astype(np.float64)).astype(np.float32)
    return out
