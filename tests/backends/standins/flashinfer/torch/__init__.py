"""Stand-in for torch (tests only): the few names the flashinfer backend's runner and probe use
on a host without a GPU. Tensors are NumPy arrays behind a `Tensor` wrapper, `.to(device)` is
a no-op, CUDA reports one device. `STANDIN_TORCH_NO_CUDA=1` makes CUDA unavailable."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import cuda, profiler

__version__ = "2.5.0+standin"
__all__ = ["Tensor", "cuda", "device", "empty", "from_numpy", "profiler"]

float32 = np.dtype(np.float32)
float16 = np.dtype(np.float16)
int64 = np.dtype(np.int64)
int32 = np.dtype(np.int32)
int8 = np.dtype(np.int8)
globals()["bool"] = np.dtype(np.bool_)


class device:  # torch's own spelling
    def __init__(self, kind: str) -> None:
        self.type = kind


class Tensor:
    def __init__(self, array: Any) -> None:
        self.array = np.asarray(array)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape)

    def to(self, *args: Any, **kwargs: Any) -> Tensor:
        return self


def from_numpy(array: Any) -> Tensor:
    return Tensor(array)


def empty(shape: tuple[int, ...], dtype: Any = None, device: Any = None) -> Tensor:
    return Tensor(np.empty(shape, dtype=dtype or np.float32))
