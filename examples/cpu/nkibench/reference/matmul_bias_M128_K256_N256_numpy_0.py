import numpy as np

M = 128
K = 256
N = 256


def get_inputs():
    x = np.random.normal(loc=0.0, scale=1.0, size=(M, K)).astype(np.float32)
    w = np.random.normal(loc=0.0, scale=1.0, size=(K, N)).astype(np.float32)
    b = np.random.normal(loc=0.0, scale=1.0, size=(N,)).astype(np.float32)
    return [x, w, b]


def forward(x, w, b):
    return (x @ w + b).astype(np.float32)
