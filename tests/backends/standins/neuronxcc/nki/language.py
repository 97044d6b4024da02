"""STAND-IN for `neuronxcc.nki.language` (tests only): a numpy-backed subset, enough for simple
tiled element-wise kernels. Tensors are numpy arrays; slices are views, so `store` into a slice of
an HBM tensor writes through as it does on the device."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

float32 = np.float32
float16 = np.float16
int32 = np.int32

shared_hbm = "shared_hbm"
hbm = "hbm"
sbuf = "sbuf"
psum = "psum"

tile_size = SimpleNamespace(pmax=128, psum_fmax=512, gemm_stationary_fmax=128, gemm_moving_fmax=512)


def ndarray(shape: tuple[int, ...], dtype: Any, buffer: Any = None, **_kw: Any) -> np.ndarray:
    return np.zeros(shape, dtype=dtype)


def zeros(shape: tuple[int, ...], dtype: Any, buffer: Any = None, **_kw: Any) -> np.ndarray:
    return np.zeros(shape, dtype=dtype)


def affine_range(*args: int) -> range:
    return range(*args)


sequential_range = affine_range
static_range = affine_range


def load(src: np.ndarray, dtype: Any = None, **_kw: Any) -> np.ndarray:
    return np.array(src, dtype=dtype or src.dtype, copy=True)


def store(dst: np.ndarray, value: Any, **_kw: Any) -> None:
    dst[...] = value


def copy(src: np.ndarray, dtype: Any = None, **_kw: Any) -> np.ndarray:
    return np.array(src, dtype=dtype or src.dtype, copy=True)


def _out(result: Any, dtype: Any) -> np.ndarray:
    return np.asarray(result, dtype=dtype) if dtype is not None else np.asarray(result)


def add(x: Any, y: Any, dtype: Any = None, **_kw: Any) -> np.ndarray:
    return _out(np.add(x, y), dtype)


def subtract(x: Any, y: Any, dtype: Any = None, **_kw: Any) -> np.ndarray:
    return _out(np.subtract(x, y), dtype)


def multiply(x: Any, y: Any, dtype: Any = None, **_kw: Any) -> np.ndarray:
    return _out(np.multiply(x, y), dtype)


def divide(x: Any, y: Any, dtype: Any = None, **_kw: Any) -> np.ndarray:
    return _out(np.divide(x, y), dtype)


def maximum(x: Any, y: Any, dtype: Any = None, **_kw: Any) -> np.ndarray:
    return _out(np.maximum(x, y), dtype)


def exp(x: Any, dtype: Any = None, **_kw: Any) -> np.ndarray:
    return _out(np.exp(x), dtype)


def sigmoid(x: Any, dtype: Any = None, **_kw: Any) -> np.ndarray:
    x = np.asarray(x)
    return _out(1.0 / (1.0 + np.exp(-x)), dtype or x.dtype)


def silu(x: Any, dtype: Any = None, **_kw: Any) -> np.ndarray:
    x = np.asarray(x)
    return _out(x / (1.0 + np.exp(-x)), dtype or x.dtype)


def sum(x: Any, axis: Any, dtype: Any = None, keepdims: bool = False, **_kw: Any) -> np.ndarray:
    return _out(np.sum(x, axis=axis, keepdims=keepdims), dtype)


def matmul(x: Any, y: Any, transpose_x: bool = False, **_kw: Any) -> np.ndarray:
    return np.matmul(np.asarray(x).T if transpose_x else x, y)
