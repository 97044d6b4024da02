import numpy as np

M = 256
N = 1024


def get_inputs():
    x = np.random.normal(loc=0.0, scale=1.0, size=(M, N)).astype(np.float32)
    g = np.random.normal(loc=0.0, scale=1.0, size=(N,)).astype(np.float32)
    return [x, g]


def forward(x, g):
    rms = np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6)
    return (x / rms * g).astype(np.float32)


def roofline():
    # square, sum, scale and multiply by g per element; read x and g, write the output.
    return {"flops": 4 * M * N, "bytes_moved": 4 * (2 * M * N + N), "compute_unit": "vector"}
