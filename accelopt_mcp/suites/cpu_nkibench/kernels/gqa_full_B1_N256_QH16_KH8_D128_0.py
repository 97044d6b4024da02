import numpy as np


def kernel(q, k, v):
    # First draft: expand K/V to one copy per query head, then loop over batch and heads.
    batch, seq, q_heads, dim = q.shape
    kv_heads = k.shape[2]
    rep = q_heads // kv_heads
    k_full = np.repeat(k, rep, axis=2)
    v_full = np.repeat(v, rep, axis=2)
    out = np.empty((batch, q_heads, seq, dim), dtype=np.float32)
    for b in range(batch):
        for h in range(q_heads):
            qh = q[b, :, h, :]
            kh = k_full[b, :, h, :]
            vh = v_full[b, :, h, :]
            scores = (qh @ kh.T) / np.float32(np.sqrt(dim))
            scores = np.exp(scores - np.max(scores, axis=-1, keepdims=True))
            probs = scores / np.sum(scores, axis=-1, keepdims=True)
            out[b, h] = probs @ vh
    return out
