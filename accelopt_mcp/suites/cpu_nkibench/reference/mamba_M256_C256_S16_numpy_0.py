import numpy as np

# Selective-scan (Mamba) core over M time steps, C channels, S state dims:
#   state[c, s, t] = exp(delta[c, t] * a[c, s]) * state[c, s, t-1] + delta[c, t] * b[s, t] * u[c, t]
#   out[c, t]      = sum_s c[s, t] * state[c, s, t]
M = 256
C = 256
S = 16


def get_inputs():
    delta = np.random.normal(loc=0.0, scale=0.05, size=(C, M)).astype(np.float32)
    u = np.random.normal(loc=0.0, scale=0.05, size=(C, M)).astype(np.float32)
    a = np.random.normal(loc=0.0, scale=0.05, size=(C, S)).astype(np.float32)
    b = np.random.normal(loc=0.0, scale=0.05, size=(S, M)).astype(np.float32)
    c = np.random.normal(loc=0.0, scale=0.05, size=(S, M)).astype(np.float32)
    return [delta, u, a, b, c]


def forward(delta, u, a, b, c):
    # Time-major layout (M, S, C): each scan step updates one contiguous (S, C) block, and the
    # broadcasts below run over the long C axis.
    dt = np.ascontiguousarray(delta.T)  # (M, C)
    decay = dt[:, None, :] * a.T[None, :, :]  # (M, S, C)
    np.exp(decay, out=decay)
    states = (dt * u.T)[:, None, :] * b.T[:, :, None]  # (M, S, C), becomes the scan states
    tmp = np.empty((S, C), dtype=np.float32)
    for t in range(1, M):
        np.multiply(decay[t], states[t - 1], out=tmp)
        states[t] += tmp
    out = np.matmul(c.T[:, None, :], states)  # (M, 1, C): sum over S
    return np.ascontiguousarray(out[:, 0, :].T)


def roofline():
    # AccelOpt count: 8 vector ops per (t,c,s); bytes: read delta, u, a, b, c, write (C,M) out.
    return {
        "matmul_flops": 0,
        "vector_flops": 8 * M * C * S,
        "bytes_moved": 4 * (2 * C * M + C * S + 2 * S * M + C * M),
    }
