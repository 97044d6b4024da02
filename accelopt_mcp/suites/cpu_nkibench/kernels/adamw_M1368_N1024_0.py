import numpy as np


def kernel(theta, g, m, v):
    # First draft: the update formula written out literally, one row at a time.
    rows = theta.shape[0]
    out = np.empty_like(theta)
    for i in range(rows):
        decayed = theta[i] - 1e-5 * theta[i]
        m_t = 0.9 * m[i] + 0.1 * g[i]
        v_t = 0.999 * v[i] + 0.001 * g[i] * g[i]
        v_hat = v_t * 1000
        out[i] = decayed - 0.01 * m_t / (np.sqrt(v_hat) + 1e-8)
    return out
