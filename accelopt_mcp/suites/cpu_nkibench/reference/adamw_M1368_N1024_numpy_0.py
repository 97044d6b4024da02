import numpy as np

# AdamW step at t=1 (lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2), as in NKIBench.
# Only the updated parameter is returned (NKIBench's task returns a single output).
M = 1368
N = 1024


def get_inputs():
    theta = np.random.normal(loc=0.0, scale=1.0, size=(M, N)).astype(np.float32)
    g = np.random.normal(loc=0.0, scale=1.0, size=(M, N)).astype(np.float32)
    m = np.random.normal(loc=0.0, scale=1.0, size=(M, N)).astype(np.float32)
    v = np.abs(np.random.normal(loc=0.0, scale=1.0, size=(M, N))).astype(np.float32)
    return [theta, g, m, v]


def forward(theta, g, m, v):
    # second moment: v_t = 0.999 v + 0.001 g^2, bias-corrected (x1000), then sqrt(.) + eps
    denom = np.multiply(g, g)
    denom *= np.float32(0.001)
    tmp = np.multiply(v, np.float32(0.999))
    denom += tmp
    denom *= np.float32(1000.0)
    np.sqrt(denom, out=denom)
    denom += np.float32(1e-8)
    # first moment: m_t = 0.9 m + 0.1 g, scaled by the learning-rate factor 0.01
    step = np.multiply(m, np.float32(0.9))
    np.multiply(g, np.float32(0.1), out=tmp)
    step += tmp
    step *= np.float32(0.01)
    step /= denom
    # decoupled weight decay, then the update
    out = np.multiply(theta, np.float32(1e-5), out=tmp)
    np.subtract(theta, out, out=out)
    out -= step
    return out


def roofline():
    # AccelOpt count: 7 vector ops per element; bytes: read theta, g, m, v and write new theta.
    return {"matmul_flops": 0, "vector_flops": 7 * M * N, "bytes_moved": 4 * 5 * M * N}
