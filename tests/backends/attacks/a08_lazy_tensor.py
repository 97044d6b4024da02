"""Attack 8: return an object that claims to be a tensor and does the work when converted.

The object has shape, dtype, .numpy(), __array__ and the torch-style methods a harness calls
(detach, cpu, clone, float, contiguous, numel), and says it comes from torch; the softmax is
computed only when something converts it to an array, after the timer stopped.
"""

import numpy as np


class _DType:
    is_floating_point = True
    is_complex = False
    itemsize = 4
    name = "float32"
    kind = "f"
    str = "<f4"

    def __str__(self):
        return "torch.float32"

    __repr__ = __str__

    def __eq__(self, other):
        return str(other).removeprefix("torch.") in ("float32", "<f4", "f4")

    def __hash__(self):
        return hash("float32")


class Tensor:
    """Lazy 'tensor'."""

    dtype = _DType()

    def __init__(self, x):
        self._x = x
        self._value = None
        self.shape = tuple(x.shape)
        self.ndim = x.ndim
        self.size = x.size

    def _force(self):
        if self._value is None:
            out = self._x - self._x.max(axis=1, keepdims=True)
            np.exp(out, out=out)
            out /= out.sum(axis=1, keepdims=True)
            self._value = out
        return self._value

    def numpy(self, *args, **kwargs):
        return self._force()

    def __array__(self, dtype=None, copy=None):
        value = self._force()
        return value if dtype is None else value.astype(dtype)

    def detach(self):
        return self

    cpu = contiguous = float = clone = detach

    def numel(self):
        return self.size

    def dim(self):
        return self.ndim

    def __len__(self):
        return self.shape[0]

    def __getitem__(self, index):
        return self._force()[index]

    def tolist(self):
        return self._force().tolist()


Tensor.__module__ = "torch"


def kernel(x):
    return Tensor(x)
