import numpy as np

N = 4096  # tokens per (batch, head) block of columns


def kernel(x, freqs_cos, freqs_sin):
    # First draft: loop over (batch, head) column blocks, rotate the two halves, concatenate.
    dim, cols = x.shape
    half = dim // 2
    out = np.empty_like(x)
    for start in range(0, cols, N):
        sl = slice(start, start + N)
        x0 = x[:half, sl]
        x1 = x[half:, sl]
        cos = freqs_cos[:, sl]
        sin = freqs_sin[:, sl]
        out[:, sl] = np.concatenate([x0 * cos - x1 * sin, x0 * sin + x1 * cos], axis=0)
    return out
