import numpy as np

# Plain matmul: out = lhs @ rhs.
M = 384
N = 1152
K = 512


def get_inputs():
    lhs = np.random.normal(loc=0.0, scale=1.0, size=(M, K)).astype(np.float32)
    rhs = np.random.normal(loc=0.0, scale=1.0, size=(K, N)).astype(np.float32)
    return [lhs, rhs]


def forward(lhs, rhs):
    return lhs @ rhs


def roofline():
    # one MxKxN matmul; bytes: read lhs and rhs, write the (M,N) output.
    return {
        "matmul_flops": 2 * M * N * K,
        "vector_flops": 0,
        "bytes_moved": 4 * (M * N + N * K + M * K),
    }
