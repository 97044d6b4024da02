import numpy as np

# SwiGLU MLP: out = (silu(x @ w_gate) * (x @ w_up)) @ w_down, with silu(t) = t / (1 + exp(-t)).
M = 512
N = 768
K = 256


def get_inputs():
    x = np.random.normal(loc=0.0, scale=1.0, size=(M, K)).astype(np.float32)
    w_up = np.random.normal(loc=0.0, scale=1.0, size=(K, N)).astype(np.float32)
    w_down = np.random.normal(loc=0.0, scale=1.0, size=(N, K)).astype(np.float32)
    w_gate = np.random.normal(loc=0.0, scale=1.0, size=(K, N)).astype(np.float32)
    return [x, w_up, w_down, w_gate]


def forward(x, w_up, w_down, w_gate):
    gate = x @ w_gate
    up = x @ w_up
    denom = np.negative(gate)
    np.exp(denom, out=denom)
    denom += np.float32(1.0)
    gate /= denom
    gate *= up
    return gate @ w_down


def roofline():
    # three MxKxN matmuls + 5 vector ops per (M,N) element;
    # bytes: read x, 3 weights, write (M,K) out.
    return {
        "matmul_flops": 3 * 2 * M * N * K,
        "vector_flops": 5 * M * N,
        "bytes_moved": 4 * (2 * M * K + 3 * K * N),
    }
