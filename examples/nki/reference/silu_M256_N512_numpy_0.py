"""NKIBench-style task: SiLU (x * sigmoid(x)) of a 256 x 512 float32 matrix, in numpy."""

import numpy as np

M = 256
N = 512


def get_inputs():
    return [np.random.randn(M, N).astype(np.float32)]


def forward(x):
    return x / (1.0 + np.exp(-x))


def transform_to_nki_inputs(inputs):
    return inputs


def transform_nki_outputs(outputs, reference):
    return outputs


def roofline():
    # exp, add, divide and multiply per element on the vector/scalar engines; read x, write y.
    return {"flops": 4 * M * N, "bytes_moved": 2 * 4 * M * N, "compute_unit": "vector"}
