"""Deterministic kernel inputs, one set per seed.

Two halves: `input_plan` (parent side) turns a definition's TensorSpecs and a workload into a
plain JSON-able plan and catches bad input early; `generate_inputs` (profiling child) draws the
arrays from a plan with NumPy only, so the child does not import pydantic.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

    from accelopt_mcp.models import Definition, Workload

NUMPY_DTYPES = {
    "float32": np.float32,
    "float16": np.float16,
    "int64": np.int64,
    "int32": np.int32,
    "int16": np.int16,
    "int8": np.int8,
    "bool": np.bool_,
}
TORCH_ONLY_DTYPES = {"bfloat16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1"}
SMALL_INT_HIGH = 8
"""Random integer inputs are drawn from [0, SMALL_INT_HIGH): valid as indices into any axis
of at least that size, and small enough not to overflow int8 arithmetic."""


class InputError(ValueError):
    """A workload's inputs cannot be produced; the message says what to fix."""


def input_plan(
    definition: Definition, workload: Workload, *, base_dir: Path | None = None
) -> list[dict[str, Any]]:
    """One entry per definition input, in order: how to produce it for this workload."""
    plan: list[dict[str, Any]] = []
    for name, spec in definition.inputs.items():
        shape = definition.shape_of(spec, workload.axes)
        entry: dict[str, Any] = {
            "name": name,
            "shape": list(shape) if shape is not None else None,
            "dtype": spec.dtype.value,
            "kind": "random",
        }
        source = workload.inputs.get(name)
        if source is not None and source.type == "scalar":
            entry.update(kind="scalar", value=source.value)
        elif source is not None and source.type == "safetensors":
            path = Path(source.path)
            # Task files are untrusted: a path out of the trace set (absolute, or through
            # '..') would have the trusted harness read any file on the host, and the error
            # below tell whether it exists. Refused before anything is looked up.
            if path.is_absolute() or ".." in path.parts:
                raise InputError(
                    f"input {name!r} of workload {workload.uuid}: a safetensors path must be "
                    "relative to the trace-set directory and stay inside it (no leading '/', no "
                    "'..'); move the file into the trace set and name it from there"
                )
            if base_dir is not None:
                path = base_dir / path
                # A link inside the trace set may still point anywhere: where it leads must
                # stay inside too (checked before whether it exists is said).
                if not path.resolve().is_relative_to(base_dir.resolve()):
                    raise InputError(
                        f"input {name!r} of workload {workload.uuid}: safetensors file "
                        f"{source.path!r} leads out of the trace-set directory (a link); put "
                        "the file itself into the trace set"
                    )
            if not path.is_file():
                raise InputError(
                    f"input {name!r} of workload {workload.uuid} reads safetensors file "
                    f"{str(path)!r}, which does not exist; put the file there (paths are relative "
                    "to the trace-set directory) or change the workload to a random input"
                )
            entry.update(kind="safetensors", path=str(path), tensor_key=source.tensor_key)
        plan.append(entry)
    unknown = sorted(set(workload.inputs) - set(definition.inputs))
    if unknown:
        raise InputError(
            f"workload {workload.uuid} gives inputs {unknown} that definition "
            f"{definition.name!r} does not have (it has {sorted(definition.inputs)})"
        )
    return plan


def needs_torch(plan: list[dict[str, Any]]) -> bool:
    return any(entry["dtype"] in TORCH_ONLY_DTYPES for entry in plan)


def generate_inputs(plan: list[dict[str, Any]], seed: int, *, as_torch: bool = False) -> list[Any]:
    """The inputs for `seed`: floats standard normal, integers small and non-negative, booleans
    fair coins, scalars as given. The same plan and seed always give the same values."""
    rng = np.random.default_rng(seed)
    values = [_one_input(entry, rng) for entry in plan]
    if as_torch:
        values = [_to_torch(value, entry) for value, entry in zip(values, plan, strict=True)]
    return values


def _one_input(entry: dict[str, Any], rng: np.random.Generator) -> Any:
    kind, dtype, shape = entry["kind"], entry["dtype"], entry["shape"]
    if kind == "scalar":
        return entry["value"]
    if kind == "safetensors":
        return _load_safetensors(entry)
    size = tuple(shape) if shape is not None else ()
    array: npt.NDArray[Any]
    if dtype.startswith("float") or dtype == "bfloat16":
        array = rng.standard_normal(size, dtype=np.float32)
        if dtype in NUMPY_DTYPES:
            array = array.astype(NUMPY_DTYPES[dtype])
    elif dtype == "bool":
        array = rng.random(size) < 0.5
    elif dtype in NUMPY_DTYPES:
        array = rng.integers(0, SMALL_INT_HIGH, size=size).astype(NUMPY_DTYPES[dtype])
    else:
        raise InputError(f"input {entry['name']!r} has dtype {dtype!r}, which is not supported")
    return array if shape is not None else array[()]


def _to_torch(value: Any, entry: dict[str, Any]) -> Any:
    import torch

    if not isinstance(value, np.ndarray | np.generic):
        return value
    tensor = torch.from_numpy(np.ascontiguousarray(value))
    if entry["dtype"] in TORCH_ONLY_DTYPES:
        tensor = tensor.to(getattr(torch, entry["dtype"]))
    return tensor


def _load_safetensors(entry: dict[str, Any]) -> Any:
    try:
        from safetensors.numpy import load_file
    except ImportError as exc:
        raise InputError(
            f"input {entry['name']!r} comes from a safetensors file; install the reader with "
            "`pip install safetensors`"
        ) from exc
    tensors = load_file(entry["path"])
    if entry["tensor_key"] not in tensors:
        raise InputError(
            f"safetensors file {entry['path']!r} has no tensor {entry['tensor_key']!r} "
            f"(it has {sorted(tensors)})"
        )
    return tensors[entry["tensor_key"]]


MAX_STRESS_SCALES = 8
"""A reference declares at most this many STRESS_SCALES."""


def stress_scales(reference: str) -> list[float]:
    """The task's STRESS_SCALES: a top-level `STRESS_SCALES = (6.0, 100.0)` in the reference's
    source (an NKIBench module or a definition's `run`), a literal tuple or list of numbers
    read without running the code. Correctness is then also checked on the first seed's inputs
    with every floating-point input multiplied by each scale (inputs far outside the usual
    range: a kernel that drops a softmax's max-shift overflows there). [] when there is none;
    InputError when it is not such a literal."""
    import ast

    from accelopt_mcp.pysource import parse_python

    try:
        module = parse_python(reference)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        # Source that does not parse (an int literal past the digit limit is a ValueError)
        # declares nothing here; running the reference reports what is wrong with it.
        return []
    for node in module.body:
        if not (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "STRESS_SCALES" for t in node.targets)
        ):
            continue
        try:
            value = ast.literal_eval(node.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            value = None
        usage = (
            "STRESS_SCALES must be a literal tuple of at most "
            f"{MAX_STRESS_SCALES} finite, non-zero numbers, e.g. STRESS_SCALES = (6.0, 100.0)"
        )
        if not isinstance(value, tuple | list) or len(value) > MAX_STRESS_SCALES:
            raise InputError(usage)
        scales = []
        for scale in value:
            if isinstance(scale, bool) or not isinstance(scale, int | float):
                raise InputError(usage)
            # An int past a float's range (10**400) overflows here, before any check: the
            # task's fault, said as such, not a crash of the evaluation.
            try:
                as_float = float(scale)
            except OverflowError:
                raise InputError(usage) from None
            if not math.isfinite(as_float) or as_float == 0:
                raise InputError(usage)
            scales.append(as_float)
        return scales
    return []


def stress_signature(reference: str) -> str | None:
    """A short hash of the stress sets a task declares: its top-level STRESS_SCALES
    assignment and `stress_inputs` function as parsed (formatting and comments left out),
    for the key stored profiles are filed under (BenchmarkConfig.profile_key). None when it
    declares neither (or its source does not parse)."""
    import ast
    import hashlib

    from accelopt_mcp.pysource import parse_python

    try:
        module = parse_python(reference)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    declared = [
        ast.dump(node)
        for node in module.body
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "STRESS_SCALES" for t in node.targets)
        )
        or (isinstance(node, ast.FunctionDef) and node.name == "stress_inputs")
    ]
    if not declared:
        return None
    return hashlib.sha256("\n".join(declared).encode()).hexdigest()[:16]
