import numpy as np

# Matmul with a transposed left operand: out = lhs.T @ rhs, lhs: (K, M), rhs: (K, N).
M = 512
K = 256
N = 1368


def get_inputs():
    lhs = np.random.normal(loc=0.0, scale=1.0, size=(K, M)).astype(np.float32)
    rhs = np.random.normal(loc=0.0, scale=1.0, size=(K, N)).astype(np.float32)
    return [lhs, rhs]


def forward(lhs, rhs):
    return lhs.T @ rhs


def roofline():
    # one MxKxN matmul (transpose is free); bytes: read lhs and rhs, write the (M,N) output.
    return {
        "matmul_flops": 2 * M * N * K,
        "vector_flops": 0,
        "bytes_moved": 4 * (M * N + N * K + M * K),
    }
