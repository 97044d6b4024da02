"""BenchmarkConfig: how a candidate is checked and timed (seeds, tolerances, repetitions)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class BenchmarkConfig(BaseModel):
    """How a candidate is checked and timed."""

    seeds: list[int] = Field(default_factory=lambda: [0, 21, 42, 63, 84], min_length=1)
    """Correctness is checked on inputs drawn with each seed."""
    rtol: float = Field(default=2e-5, gt=0)
    """L2-relative tolerance: ||out - ref|| / ||ref|| must not exceed it."""
    atol: float = Field(default=1e-6, ge=0)
    """Absolute floor, for outputs whose reference norm is ~0."""
    warmup_runs: int = Field(default=2, ge=0)
    iterations: int = Field(default=10, ge=1)
    max_relative_spread: float = Field(default=0.05, gt=0)
    """Re-measure while (max - min) / min of a round exceeds this."""
    max_measurement_rounds: int = Field(default=3, ge=1)
    timeout_seconds: float = Field(default=60.0, gt=0)
    memory_limit_mb: int = Field(default=4096, ge=64)

    # Settings that change what a latency figure means. Timeouts and memory caps do not.
    PERF_FIELDS: tuple[str, ...] = (
        "seeds",
        "rtol",
        "atol",
        "warmup_runs",
        "iterations",
        "max_relative_spread",
        "max_measurement_rounds",
    )

    def perf_fields(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.PERF_FIELDS}
