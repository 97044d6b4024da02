import numpy as np


def kernel(lhs, rhs):
    # First draft: per batch, per row: scores, then a numerically safe softmax.
    batch, rows, _ = lhs.shape
    out = np.empty((batch, rows, rhs.shape[2]), dtype=np.float32)
    for b in range(batch):
        for i in range(rows):
            s = lhs[b, i] @ rhs[b]
            e = np.exp(s - np.max(s))
            out[b, i] = e / np.sum(e)
    return out
