import numpy as np


def kernel(lhs, rhs):
    # First draft: one output row at a time (a vector-matrix product per row).
    rows = lhs.shape[0]
    out = np.empty((rows, rhs.shape[1]), dtype=np.float32)
    for i in range(rows):
        out[i] = lhs[i] @ rhs
    return out
