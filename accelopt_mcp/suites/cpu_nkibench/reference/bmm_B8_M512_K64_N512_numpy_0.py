import numpy as np

# Batched matmul: out[b] = lhs[b] @ rhs[b].
B = 8
M = 512
K = 64
N = 512


def get_inputs():
    lhs = np.random.normal(loc=0.0, scale=1.0, size=(B, M, K)).astype(np.float32)
    rhs = np.random.normal(loc=0.0, scale=1.0, size=(B, K, N)).astype(np.float32)
    return [lhs, rhs]


def forward(lhs, rhs):
    return np.matmul(lhs, rhs)


def roofline():
    # B matmuls of MxKxN; bytes: read lhs and rhs, write the (B,M,N) output.
    return {
        "matmul_flops": 2 * B * M * N * K,
        "vector_flops": 0,
        "bytes_moved": 4 * (B * M * N + B * N * K + B * M * K),
    }
