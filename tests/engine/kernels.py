"""Executor replies for the silu example task (M=512, N=1024): real kernels of known cost."""

from __future__ import annotations

FAST = """import numpy as np


def kernel(x):
    out = np.negative(x)
    np.exp(out, out=out)
    out += np.float32(1.0)
    np.divide(x, out, out=out)
    return out
"""

MEDIUM = """import numpy as np


def kernel(x):
    return x / (np.float32(1.0) + np.exp(-x))
"""

SLOWER = """import numpy as np


def kernel(x):
    out = np.empty_like(x)
    for _ in range(3):
        for i in range(x.shape[0]):
            row = x[i].astype(np.float64)
            out[i] = (row / (1.0 + np.exp(-row))).astype(np.float32)
    return out
"""

WRONG = """import numpy as np


def kernel(x):
    return (x * 0.5).astype(np.float32)
"""

SYNTAX_ERROR = """import numpy as np


def kernel(x)
    return x
"""

CRASH = """import numpy as np


def kernel(x):
    raise ValueError("executor bug")
"""

HANG = """import numpy as np


def kernel(x):
    while True:
        pass
"""


def reply(source: str, note: str = "") -> str:
    return f"Here is the rewritten kernel{note}.\n\n```python\n{source}```\n"


NO_CODE = "I would vectorize the loop, but I am not sure how; no code this time."
