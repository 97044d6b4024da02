import numpy as np

# LoRA linear layer: out = x @ w + (x @ a) @ b.
M = 384
N = 1152
K = 512
R = 16


def get_inputs():
    x = np.random.normal(loc=0.0, scale=1.0, size=(M, K)).astype(np.float32)
    w = np.random.normal(loc=0.0, scale=1.0, size=(K, N)).astype(np.float32)
    a = np.random.normal(loc=0.0, scale=1.0, size=(K, R)).astype(np.float32)
    b = np.random.normal(loc=0.0, scale=1.0, size=(R, N)).astype(np.float32)
    return [x, w, a, b]


def forward(x, w, a, b):
    out = x @ w
    out += (x @ a) @ b
    return out


def roofline():
    # matmuls x@w, x@a, (x@a)@b + 1 add per output; bytes: read x, w, a, b, write (M,N) out.
    return {
        "matmul_flops": 2 * M * N * K + 2 * M * K * R + 2 * M * N * R,
        "vector_flops": M * N,
        "bytes_moved": 4 * (M * K + K * N + K * R + R * N + M * N),
    }
