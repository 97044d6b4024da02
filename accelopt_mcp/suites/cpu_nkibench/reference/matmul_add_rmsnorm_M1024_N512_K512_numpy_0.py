import numpy as np

# out = RMSNorm(x @ w + z) * g, RMSNorm over the last axis (N) with eps = 1e-5.
# NKIBench passes eps as a Python float input; here it is the module constant EPS.
M = 1024
N = 512
K = 512
EPS = 1e-5


def get_inputs():
    x = np.random.normal(loc=0.0, scale=1.0, size=(M, K)).astype(np.float32)
    w = np.random.normal(loc=0.0, scale=1.0, size=(K, N)).astype(np.float32)
    z = np.random.normal(loc=0.0, scale=1.0, size=(M, N)).astype(np.float32)
    g = np.random.normal(loc=0.0, scale=1.0, size=(N,)).astype(np.float32)
    return [x, w, z, g]


def forward(x, w, z, g):
    y = x @ w
    y += z
    mean_square = np.einsum("ij,ij->i", y, y) / np.float32(N)
    inv = (np.float32(1.0) / np.sqrt(mean_square + np.float32(EPS))).astype(np.float32)
    y *= inv[:, None]
    y *= g
    return y


def roofline():
    # one MxKxN matmul + 6 vector ops per (M,N) element; bytes: read x, w, z, g, write out.
    return {
        "matmul_flops": 2 * M * N * K,
        "vector_flops": 6 * M * N,
        "bytes_moved": 4 * (M * K + N * K + M * N + N + M * N),
    }
