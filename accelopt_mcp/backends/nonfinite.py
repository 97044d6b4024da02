"""How an output is checked where its reference is NaN or +/-inf (masked scores, log-probs).

NumPy only: the jailed runners import it, and their start-up is part of every evaluation.

Rules (BenchmarkConfig.nonfinite):
- "match" (default): where the reference is NaN the output must be NaN, where it is +inf the
  output must be +inf, where it is -inf the output must be -inf. Without this a kernel could
  write anything (12345.0, +inf for -inf) at a masked position and still pass with error 0,
  since the norms are only defined over the finite positions.
- "ignore": positions where the reference is not finite are not compared at all; a task opts
  into it when those positions are don't-care by its own contract.
In both rules an output that is NaN or inf where the reference is finite fails.
"""

from __future__ import annotations

from typing import Any

import numpy as np

RULES = ("match", "ignore")


def _where(mask: np.ndarray) -> tuple[int, str]:
    """How many positions the mask holds and where the first is (no values: a count and an
    index are all a message shows of a kernel's output)."""
    count = int(mask.sum())
    first = np.unravel_index(int(np.argmax(mask)), mask.shape) if mask.ndim else ()
    return count, str([int(i) for i in first])


def nonfinite_problem(out: np.ndarray, ref: np.ndarray, rule: str) -> tuple[int, str] | None:
    """None when `out` honours the rule at every position where either side is not finite,
    else (number of bad positions, what is wrong). `out` and `ref` have the same shape and
    a floating (or integer) dtype."""
    if rule not in RULES:
        # A job is written by our own server; an unknown rule means a version mismatch, and
        # falling back to the lenient rule would be a silent pass.
        raise ValueError(f"unknown nonfinite rule {rule!r}: expected one of {', '.join(RULES)}")
    out_finite, ref_finite = np.isfinite(out), np.isfinite(ref)
    if out_finite.all() and ref_finite.all():
        return None
    parts: list[str] = []
    total = 0
    wild = ~out_finite & ref_finite
    if wild.any():
        count, first = _where(wild)
        total += count
        parts.append(f"{count} NaN/inf values where the reference is finite (first at {first})")
    if rule == "match" and not ref_finite.all():
        kinds = (
            ("NaN", np.isnan(ref), np.isnan(out)),
            ("+inf", np.isposinf(ref), np.isposinf(out)),
            ("-inf", np.isneginf(ref), np.isneginf(out)),
        )
        for name, ref_kind, out_kind in kinds:
            bad = ref_kind & ~out_kind
            if bad.any():
                count, first = _where(bad)
                total += count
                parts.append(
                    f"{count} positions where the reference is {name} and the output is not "
                    f"(first at {first})"
                )
    if not parts:
        return None
    return total, "; ".join(parts)


def comparable(out: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`out` and `ref` with every position where the reference is not finite set to 0 on both
    sides, for the norms: call it only once nonfinite_problem found nothing."""
    ref_finite = np.isfinite(ref)
    if ref_finite.all():
        return out, ref
    zero: Any = 0
    return np.where(ref_finite, out, zero), np.where(ref_finite, ref, zero)
