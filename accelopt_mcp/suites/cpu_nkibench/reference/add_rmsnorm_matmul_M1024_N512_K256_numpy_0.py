import numpy as np

# out = RMSNorm(x + z) * g @ w, with RMSNorm over the last axis (K) and eps = 1e-5.
# NKIBench passes eps as a Python float input; here it is the module constant EPS.
M = 1024
N = 512
K = 256
EPS = 1e-5


def get_inputs():
    x = np.random.normal(loc=0.0, scale=1.0, size=(M, K)).astype(np.float32)
    w = np.random.normal(loc=0.0, scale=1.0, size=(K, N)).astype(np.float32)
    z = np.random.normal(loc=0.0, scale=1.0, size=(M, K)).astype(np.float32)
    g = np.random.normal(loc=0.0, scale=1.0, size=(K,)).astype(np.float32)
    return [x, w, z, g]


def forward(x, w, z, g):
    y = np.add(x, z)
    mean_square = np.einsum("ij,ij->i", y, y) / np.float32(K)
    inv = (np.float32(1.0) / np.sqrt(mean_square + np.float32(EPS))).astype(np.float32)
    y *= inv[:, None]
    y *= g
    return y @ w


def roofline():
    # 6 vector ops per (M,K) element + one MxKxN matmul; bytes: read x, z, w, g, write (M,N) out.
    return {
        "matmul_flops": 2 * M * N * K,
        "vector_flops": 6 * M * K,
        "bytes_moved": 4 * (2 * M * K + K * N + K + M * N),
    }
