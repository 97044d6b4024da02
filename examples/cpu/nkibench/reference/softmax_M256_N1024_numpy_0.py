import numpy as np

M = 256
N = 1024


def get_inputs():
    x = np.random.normal(loc=0.0, scale=1.0, size=(M, N)).astype(np.float32)
    return [x]


def stress_inputs():
    # Checked for correctness besides get_inputs() (never timed): rows far outside its range,
    # where a softmax without its max-shift overflows (exp of more than ~88 is inf in float32).
    x = get_inputs()[0]
    return {"x_scaled_6": (x * np.float32(6),), "x_scaled_100": (x * np.float32(100),)}


def forward(x):
    shifted = x - np.max(x, axis=-1, keepdims=True)
    e = np.exp(shifted)
    return (e / np.sum(e, axis=-1, keepdims=True)).astype(np.float32)
