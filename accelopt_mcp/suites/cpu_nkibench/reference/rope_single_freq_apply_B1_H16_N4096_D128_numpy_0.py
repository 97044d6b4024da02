import numpy as np

# Rotary embedding applied with one frequency table per column, NKIBench layout:
# x: (D, B*H*N) with the two rotated halves stacked along D; cos/sin: (D/2, B*H*N).
#   out[:D/2] = x0 * cos - x1 * sin,  out[D/2:] = x0 * sin + x1 * cos
B = 1
H = 16
N = 4096
D = 128


def get_inputs():
    x = np.random.normal(loc=0.0, scale=1.0, size=(D, B * H * N)).astype(np.float32)
    freqs_cos = np.random.normal(loc=0.0, scale=1.0, size=(D // 2, B * H * N)).astype(np.float32)
    freqs_sin = np.random.normal(loc=0.0, scale=1.0, size=(D // 2, B * H * N)).astype(np.float32)
    return [x, freqs_cos, freqs_sin]


def forward(x, freqs_cos, freqs_sin):
    half = D // 2
    x0 = x[:half]
    x1 = x[half:]
    out = np.empty_like(x)
    tmp = np.empty_like(freqs_cos)
    np.multiply(x0, freqs_cos, out=out[:half])
    np.multiply(x1, freqs_sin, out=tmp)
    out[:half] -= tmp
    np.multiply(x0, freqs_sin, out=out[half:])
    np.multiply(x1, freqs_cos, out=tmp)
    out[half:] += tmp
    return out


def roofline():
    # 3 vector ops per output element (4 mul + 2 add per pair); bytes: read x, cos, sin, write out.
    return {
        "matmul_flops": 0,
        "vector_flops": 3 * B * H * N * D,
        "bytes_moved": 4 * 3 * D * B * H * N,
    }
