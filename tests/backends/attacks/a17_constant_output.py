"""Attack 17: a constant answer: the output computed on the first call, returned for every input."""

import numpy as np

_answer = []


def kernel(x):
    if not _answer:
        out = x - x.max(axis=1, keepdims=True)
        np.exp(out, out=out)
        out /= out.sum(axis=1, keepdims=True)
        _answer.append(out)
    return _answer[0]
