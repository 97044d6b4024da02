import numpy as np

# RMSNorm without eps or learnable gain, then a matmul: out = (x / sqrt(mean(x^2, axis=1))) @ w.
M = 1024
N = 512
K = 256


def get_inputs():
    x = np.random.normal(loc=0.0, scale=1.0, size=(M, K)).astype(np.float32)
    w = np.random.normal(loc=0.0, scale=1.0, size=(K, N)).astype(np.float32)
    return [x, w]


def forward(x, w):
    mean_square = np.einsum("ij,ij->i", x, x) / np.float32(K)
    inv = (np.float32(1.0) / np.sqrt(mean_square)).astype(np.float32)
    return (x * inv[:, None]) @ w


def roofline():
    # 4 vector ops per element of x + one MxKxN matmul; bytes: read x and w, write out.
    return {
        "matmul_flops": 2 * M * N * K,
        "vector_flops": 4 * M * K,
        "bytes_moved": 4 * (M * K + K * N + M * N),
    }
