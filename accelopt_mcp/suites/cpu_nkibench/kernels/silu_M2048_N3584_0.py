import numpy as np


def kernel(x):
    # First draft: one row at a time, sigmoid first, then multiply.
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        row = x[i]
        sigmoid = 1.0 / (1.0 + np.exp(-row))
        out[i] = row * sigmoid
    return out
