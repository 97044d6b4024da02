"""Evaluation: how one solution fared on one workload (status, correctness, latency)."""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Any

from pydantic import (
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from accelopt_mcp.models.base import NonEmptyString, Record


class EvaluationStatus(StrEnum):
    PASSED = "PASSED"
    INCORRECT_SHAPE = "INCORRECT_SHAPE"
    INCORRECT_NUMERICAL = "INCORRECT_NUMERICAL"
    INCORRECT_DTYPE = "INCORRECT_DTYPE"
    RUNTIME_ERROR = "RUNTIME_ERROR"
    COMPILE_ERROR = "COMPILE_ERROR"
    TIMEOUT = "TIMEOUT"


class Correctness(Record):
    model_config = ConfigDict(extra="ignore", ser_json_inf_nan="strings")

    max_relative_error: float = 0.0
    max_absolute_error: float = 0.0
    extra: dict[str, Any] | None = None

    @field_validator("max_relative_error", "max_absolute_error")
    @classmethod
    def _non_negative_or_nan(cls, value: float) -> float:
        if not math.isnan(value) and value < 0:
            raise ValueError("an error measure must be non-negative (or NaN)")
        return value


class Performance(Record):
    latency_ms: float = Field(default=0.0, ge=0.0)
    reference_latency_ms: float = Field(default=0.0, ge=0.0)
    speedup_factor: float = Field(default=0.0, ge=0.0)
    """reference latency / solution latency."""


class Environment(Record):
    hardware: NonEmptyString
    """Where it ran, e.g. 'cpu/x86_64'."""
    libs: dict[str, str] = Field(default_factory=dict)


class LatencyStats(Record):
    """Ours: the spread behind `Performance.latency_ms`, in milliseconds."""

    mean_ms: float
    median_ms: float
    min_ms: float
    max_ms: float
    stdev_ms: float = 0.0
    relative_spread: float
    """(max - min) / min over the kept measurements."""
    runs: int
    measurement_rounds: int = 1


class Evaluation(Record):
    status: EvaluationStatus
    environment: Environment
    timestamp: NonEmptyString
    log: str = ""
    correctness: Correctness | None = None
    performance: Performance | None = None
    latency_stats: LatencyStats | None = None
    """The spread of the measurements (not in flashinfer-bench)."""
    hardware_counters: dict[str, float] = Field(default_factory=dict)
    """What the planner sees besides latency (not in flashinfer-bench)."""
    flags: list[str] = Field(default_factory=list)
    """Warnings a correct result still carries, e.g. 'above_peak' (not in flashinfer-bench)."""

    @model_validator(mode="after")
    def _check_status(self) -> Evaluation:
        # Same rule as flashinfer-bench, so our files load there.
        has_c, has_p = self.correctness is not None, self.performance is not None
        if self.status == EvaluationStatus.PASSED and not (has_c and has_p):
            raise ValueError("a PASSED evaluation needs both correctness and performance")
        if self.status == EvaluationStatus.INCORRECT_NUMERICAL and (not has_c or has_p):
            raise ValueError("an INCORRECT_NUMERICAL evaluation has correctness, no performance")
        if self.status not in (EvaluationStatus.PASSED, EvaluationStatus.INCORRECT_NUMERICAL) and (
            has_c or has_p
        ):
            raise ValueError(f"a {self.status.value} evaluation has no correctness or performance")
        return self

    @property
    def passed(self) -> bool:
        return self.status == EvaluationStatus.PASSED
