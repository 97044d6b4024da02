import numpy as np

# Batched matmul followed by a softmax over the last axis: softmax(lhs[b] @ rhs[b], axis=-1).
B = 8
K = 64
M = 512
N = 512

# Correctness is also checked with every input scaled by 6 (logits x36): a softmax that drops
# its max-shift overflows there.
STRESS_SCALES = (6.0,)


def get_inputs():
    lhs = np.random.normal(loc=0.0, scale=1.0, size=(B, M, K)).astype(np.float32)
    rhs = np.random.normal(loc=0.0, scale=1.0, size=(B, K, N)).astype(np.float32)
    return [lhs, rhs]


def forward(lhs, rhs):
    x = np.matmul(lhs, rhs)
    x -= x.max(axis=2, keepdims=True)
    np.exp(x, out=x)
    x /= x.sum(axis=2, keepdims=True)
    return x


def roofline():
    # B matmuls + 5 vector ops per score (max, sub, exp, sum, div);
    # bytes: read lhs, rhs, write probs.
    return {
        "matmul_flops": 2 * B * M * N * K,
        "vector_flops": 5 * B * M * N,
        "bytes_moved": 4 * (B * M * N + B * N * K + B * M * K),
    }
