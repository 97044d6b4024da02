"""The values a cpu evaluation passes around (NumPy arrays, torch tensors, Python scalars) and
the check of a kernel's outputs against the reference's: their dtype names, NumPy views and
copies, shapes, and the errors that make an output INCORRECT_SHAPE, INCORRECT_DTYPE or
INCORRECT_NUMERICAL (a Verdict). Imports NumPy, never torch (a tensor is recognised by its
type's module)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from accelopt_mcp.backends.cpu_outcomes import Verdict
from accelopt_mcp.backends.nonfinite import comparable, nonfinite_problem


def is_torch(value: Any) -> bool:
    return type(value).__module__.startswith("torch")


def dtype_name(value: Any) -> str:
    if is_torch(value):
        return str(value.dtype).removeprefix("torch.")
    if isinstance(value, np.ndarray | np.generic):
        return value.dtype.name
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float32"
    return type(value).__name__


def to_numpy(value: Any) -> np.ndarray:
    if is_torch(value):
        tensor = value.detach().cpu()
        if not tensor.dtype.is_floating_point or tensor.dtype.itemsize >= 4:
            array: np.ndarray = tensor.numpy()
        else:
            array = tensor.float().numpy()
        return array
    return np.asarray(value)


def copy_value(value: Any) -> Any:
    if is_torch(value):
        return value.clone()
    if isinstance(value, np.ndarray):
        return value.copy()
    return value


def as_list(outputs: Any) -> list[Any]:
    if isinstance(outputs, tuple | list):
        return list(outputs)
    return [outputs]


def describe_value(value: Any) -> dict[str, Any]:
    """Shape (None for a scalar) and dtype name of one input or output."""
    shape = None if isinstance(value, bool | int | float) else list(to_numpy(value).shape)
    return {"shape": shape or None, "dtype": dtype_name(value)}


# --------------------------------------------------------------------------- comparison


def compare_output(
    out: Any,
    ref: Any,
    index: int,
    rtol: float,
    atol: float,
    out_dtype: str | None = None,
    ref_dtype: str | None = None,
    nonfinite: str = "match",
) -> dict[str, float]:
    """Errors of one output against the reference; raises Verdict when it is wrong. The dtype
    names, when given, are those the values had before they crossed an arena (a torch
    bfloat16 travels as float32). `nonfinite` is the rule for positions where the reference
    is NaN or inf (backends.nonfinite)."""
    out_np, ref_np = to_numpy(out), to_numpy(ref)
    out_dtype = out_dtype or dtype_name(out)
    ref_dtype = ref_dtype or dtype_name(ref)
    if out_np.shape != ref_np.shape:
        raise Verdict(
            "INCORRECT_SHAPE",
            f"output {index} has shape {list(out_np.shape)}, expected {list(ref_np.shape)}",
        )
    if out_dtype != ref_dtype:
        raise Verdict(
            "INCORRECT_DTYPE", f"output {index} has dtype {out_dtype}, expected {ref_dtype}"
        )
    # float32 outputs are compared in float32 (plenty for a relative error >= 1e-7 and half
    # the memory traffic); everything else in float64.
    work: type[np.floating[Any]] = np.float32 if ref_np.dtype == np.float32 else np.float64
    out_w = out_np.astype(work, copy=False)
    ref_w = ref_np.astype(work, copy=False)
    errors = {
        "l2_rel_error": math.inf,
        "max_absolute_error": math.inf,
        "max_relative_error": math.inf,
    }
    problem = nonfinite_problem(out_w, ref_w, nonfinite)
    if problem is not None:
        errors["nonfinite"] = float(problem[0])
        raise Verdict("INCORRECT_NUMERICAL", f"output {index} has {problem[1]}", errors)
    out_w, ref_w = comparable(out_w, ref_w)
    diff = np.abs(out_w - ref_w).ravel()
    flat_ref = ref_w.ravel()
    # Norms in float64: a float32 dot product of large values overflows to inf, and inf > inf
    # is False, which would pass any finite output.
    diff64 = diff.astype(np.float64, copy=False)
    ref64 = flat_ref.astype(np.float64, copy=False)
    diff_norm = math.sqrt(float(np.dot(diff64, diff64)))
    ref_norm = math.sqrt(float(np.dot(ref64, ref64)))
    if not math.isfinite(ref_norm) or not math.isfinite(diff_norm):
        raise Verdict(
            "INCORRECT_NUMERICAL",
            f"output {index} cannot be compared: its error norm is not finite",
            errors,
        )
    errors["l2_rel_error"] = (
        diff_norm / ref_norm if ref_norm > 0 else (0.0 if diff_norm == 0 else math.inf)
    )
    errors["max_absolute_error"] = float(diff.max()) if diff.size else 0.0
    errors["max_relative_error"] = (
        float((diff / (np.abs(flat_ref) + work(1e-8))).max()) if diff.size else 0.0
    )
    if diff_norm > rtol * ref_norm + atol * math.sqrt(max(diff.size, 1)):
        raise Verdict(
            "INCORRECT_NUMERICAL",
            f"output {index} is off: L2-relative error {errors['l2_rel_error']:.3g} "
            f"exceeds rtol {rtol:g} (max abs error {errors['max_absolute_error']:.3g})",
            errors,
        )
    return errors


def compare_outputs(
    outs: list[Any],
    refs: list[Any],
    rtol: float,
    atol: float,
    out_dtypes: list[str] | None = None,
    ref_dtypes: list[str] | None = None,
    nonfinite: str = "match",
) -> dict[str, float]:
    if len(outs) != len(refs):
        raise Verdict(
            "INCORRECT_SHAPE", f"the kernel returned {len(outs)} outputs, expected {len(refs)}"
        )
    worst = {"l2_rel_error": 0.0, "max_absolute_error": 0.0, "max_relative_error": 0.0}
    for index, (out, ref) in enumerate(zip(outs, refs, strict=True)):
        out_dtype = out_dtypes[index] if out_dtypes and len(out_dtypes) == len(outs) else None
        ref_dtype = ref_dtypes[index] if ref_dtypes and len(ref_dtypes) == len(refs) else None
        errors = compare_output(out, ref, index, rtol, atol, out_dtype, ref_dtype, nonfinite)
        worst = {k: max(worst[k], errors[k]) for k in worst}
    return worst


def same_outputs(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(
        np.array_equal(to_numpy(x), to_numpy(y), equal_nan=True) for x, y in zip(a, b, strict=True)
    )


def as_arena_values(values: list[Any]) -> list[Any]:
    """Inputs as the arena carries them: NumPy arrays and Python scalars."""
    out: list[Any] = []
    for value in values:
        if isinstance(value, bool | int | float):
            out.append(value)
        elif is_torch(value):
            out.append(to_numpy(value))
        else:
            out.append(np.asarray(value))
    return out


def values_nbytes(values: list[Any]) -> int:
    return sum(np.asarray(v).nbytes for v in values if not isinstance(v, bool | int | float))
