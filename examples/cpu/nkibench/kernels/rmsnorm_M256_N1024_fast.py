import numpy as np


def kernel(x, g):
    # Whole-array: one pass for the mean square (einsum avoids the x*x temporary), then scale.
    mean_square = np.einsum("ij,ij->i", x, x) / np.float32(x.shape[1])
    inv = 1.0 / np.sqrt(mean_square + np.float32(1e-6))
    out = x * inv[:, None]
    out *= g
    return out
