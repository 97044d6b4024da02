import numpy as np


def kernel(lhs, rhs):
    # First draft: loop over the batch and over output rows, one vector-matrix product each.
    batch, rows, _ = lhs.shape
    out = np.empty((batch, rows, rhs.shape[2]), dtype=np.float32)
    for b in range(batch):
        for i in range(rows):
            out[b, i] = lhs[b, i] @ rhs[b]
    return out
