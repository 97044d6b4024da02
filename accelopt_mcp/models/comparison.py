"""KernelComparison: several kernels of one task timed against each other, ranked, with a
verdict for every pair (faster / slower / indistinguishable)."""

from __future__ import annotations

from pydantic import Field

from accelopt_mcp.models.base import NonEmptyString, Record
from accelopt_mcp.models.evaluation import Comparison, Evaluation


class ComparedKernel(Record):
    label: NonEmptyString
    """The name the caller gave it (a solution id, a file name)."""
    evaluation: Evaluation
    """Its own result: status, median with interval, speedup over the reference."""
    rank: int | None = None
    """1 for the fastest median among those that passed; None when it did not pass."""


class PairVerdict(Comparison):
    """`kernel` against `baseline`: speedup = baseline median / kernel median, >= 1 (each pair
    once, the faster median first)."""

    kernel: NonEmptyString


class KernelComparison(Record):
    kernels: list[ComparedKernel] = Field(default_factory=list)
    """Fastest median first; kernels that did not pass last, in the order given."""
    pairs: list[PairVerdict] = Field(default_factory=list)
    """Every pair of kernels that passed, once."""
    interleaved: bool = True
    """True when all were timed in the same rounds (cpu); False when each was measured on
    its own and the intervals combined (wider)."""
    confidence: float = 0.95
