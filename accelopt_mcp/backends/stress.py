"""A task's stress sets, as both harnesses that check them read them (the cpu task's jail,
cpu_task_harness; the nki runner): `checked_stress_sets` validates what an NKIBench task's
`stress_inputs()` returned, `scaled_input` makes one input of a STRESS_SCALES set (the scales
are read from the reference's source by tasks.inputs.stress_scales). The task is code from
outside: what it returns is checked for shape and size before anything uses it. NumPy only
(both harnesses keep their imports light)."""

from __future__ import annotations

from typing import Any

import numpy as np

from accelopt_mcp.backends.cpu_outcomes import MAX_STRESS_NAME_CHARS, MAX_STRESS_SETS


class StressError(ValueError):
    """stress_inputs() returned something else than named input sets; the message says what."""


def checked_stress_sets(declared: Any) -> list[tuple[str, list[Any]]]:
    """stress_inputs()'s value as (name, inputs) pairs: a dict {name: inputs} or a list of
    (name, inputs) pairs, at most MAX_STRESS_SETS, names printable, 1 to MAX_STRESS_NAME_CHARS
    characters and unique, inputs a tuple or list. StressError otherwise (its length is read
    before anything is iterated, so a huge value costs nothing)."""
    usage = (
        "stress_inputs() must return a dict {name: tuple of inputs} or a list of "
        f"(name, tuple of inputs) pairs, at most {MAX_STRESS_SETS}"
    )
    if isinstance(declared, dict):
        pairs = list(declared.items()) if len(declared) <= MAX_STRESS_SETS else None
    elif isinstance(declared, list | tuple):
        pairs = list(declared) if len(declared) <= MAX_STRESS_SETS else None
    else:
        raise StressError(f"{usage}; it returned a {type(declared).__name__}")
    if pairs is None:
        raise StressError(f"{usage}; it returned {len(declared)} sets")
    sets: list[tuple[str, list[Any]]] = []
    for pair in pairs:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise StressError(f"{usage}; an entry is not a (name, inputs) pair")
        name, inputs = pair
        if (
            not isinstance(name, str)
            or not 0 < len(name) <= MAX_STRESS_NAME_CHARS
            or not name.isprintable()
        ):
            raise StressError(
                f"{usage}; a set's name must be a printable string of 1 to "
                f"{MAX_STRESS_NAME_CHARS} characters"
            )
        if any(name == seen for seen, _ in sets):
            raise StressError(f"{usage}; the name {name!r} is used twice")
        if not isinstance(inputs, tuple | list):
            raise StressError(f"{usage}; set {name!r} is a {type(inputs).__name__}, not a tuple")
        sets.append((name, list(inputs)))
    return sets


def scaled_input(value: Any, scale: float) -> Any:
    """One input of a scaled stress set: a floating-point array or float times `scale` (in its
    own dtype), anything else (integers, indices, flags) unchanged."""
    if isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.floating):
        with np.errstate(over="ignore"):
            return (value * value.dtype.type(scale)).astype(value.dtype, copy=False)
    if isinstance(value, float):
        return value * scale
    return value


def scaled_name(scale: float) -> str:
    """The name of a STRESS_SCALES set: inputs_x6, inputs_x100, inputs_x0.5."""
    return f"inputs_x{scale:g}"
