"""STAND-IN for `neuronxcc.nki` (tests only): jit, baremetal and simulate_kernel run the kernel as
numpy code. baremetal writes stand-in NEFF/NTFF files (JSON) that the stand-in `neuron-profile`
reads. Fault injection through STANDIN_* environment variables (see ../../README.md).
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from neuronxcc.nki import language

__all__ = ["baremetal", "jit", "language", "simulate_kernel"]

_trace_count = 0


class CompilationError(RuntimeError):
    """Raised when STANDIN_NKI_COMPILE_ERROR asks for a failed compile."""


def jit(function: Callable[..., Any] | None = None, **_options: Any) -> Any:
    """Marks a kernel, like the real decorator; usable bare or with options."""

    def mark(kernel: Callable[..., Any]) -> Callable[..., Any]:
        kernel._standin_jit = True  # type: ignore[attr-defined]
        return kernel

    return mark(function) if function is not None else mark


def simulate_kernel(kernel: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    _compile(kernel, None)
    return kernel(*args, **kwargs)


def baremetal(
    kernel: Callable[..., Any] | None = None,
    *,
    save_neff_name: str | None = None,
    save_trace_name: str | None = None,
    additional_compile_opt: str | None = None,
    **_options: Any,
) -> Any:
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            _compile(fn, additional_compile_opt)
            sleep_s = float(os.environ.get("STANDIN_NKI_SLEEP_S", "0") or 0)
            if sleep_s:
                time.sleep(sleep_s)
            started = time.perf_counter()
            out = fn(*args, **kwargs)
            elapsed = time.perf_counter() - started
            if save_neff_name:
                _write_json(
                    save_neff_name,
                    {
                        "standin": "neff",
                        "kernel": fn.__name__,
                        "additional_compile_opt": additional_compile_opt,
                        "neuron_cc_flags": os.environ.get("NEURON_CC_FLAGS"),
                    },
                )
            if save_trace_name:
                _write_json(save_trace_name, _trace(fn.__name__, args, out, elapsed))
            return out

        return run

    return wrap(kernel) if kernel is not None else wrap


def _compile(kernel: Callable[..., Any], options: str | None) -> None:
    message = os.environ.get("STANDIN_NKI_COMPILE_ERROR")
    if message:
        raise CompilationError(f"[stand-in neuronxcc] compiling {kernel.__name__}: {message}")


def _trace(name: str, args: tuple[Any, ...], out: Any, elapsed: float) -> dict[str, Any]:
    global _trace_count
    sequence = os.environ.get("STANDIN_NKI_TOTAL_TIME_SEQUENCE")
    if sequence:
        values = [float(v) for v in sequence.split(",")]
        total_time = values[_trace_count % len(values)]
    else:
        total_time = float(os.environ.get("STANDIN_NKI_TOTAL_TIME_S") or max(elapsed, 1e-7))
    _trace_count += 1
    read = float(sum(a.nbytes for a in args if isinstance(a, np.ndarray)))
    outputs = out if isinstance(out, tuple | list) else [out]
    written = float(sum(o.nbytes for o in outputs if isinstance(o, np.ndarray)))
    flops = float(4 * sum(o.size for o in outputs if isinstance(o, np.ndarray)))
    return {
        "standin": "ntff",
        "kernel": name,
        "total_time": total_time,
        "hbm_read_bytes": read,
        "hbm_write_bytes": written,
        "sbuf_read_bytes": read + written,
        "sbuf_write_bytes": read + written,
        "psum_read_bytes": 0.0,
        "psum_write_bytes": 0.0,
        "spill_save_bytes": 0.0,
        "spill_reload_bytes": 0.0,
        "hardware_flops": flops,
        "transpose_flops": 0.0,
        "mm_arithmetic_intensity": flops / max(read + written, 1.0),
        "hfu_estimated_percent": 0.0,
        "mfu_estimated_percent": 0.0,
        "mbu_estimated_percent": 0.12,
        "tensor_engine_active_time_percent": 0.0,
        "vector_engine_active_time_percent": 0.41,
        "scalar_engine_active_time_percent": 0.37,
        "gpsimd_engine_active_time_percent": 0.0,
        "dma_active_time_percent": 0.55,
    }


def _write_json(path: str, payload: dict[str, Any]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(payload, handle)
