import numpy as np


def kernel(x, w_up, w_down, w_gate):
    # First draft: one token (row) at a time through gate, up and down projections.
    rows = x.shape[0]
    out = np.empty((rows, w_down.shape[1]), dtype=np.float32)
    for i in range(rows):
        gate = x[i] @ w_gate
        up = x[i] @ w_up
        hidden = gate / (1.0 + np.exp(-gate)) * up
        out[i] = hidden @ w_down
    return out
