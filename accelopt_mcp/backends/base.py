"""The profiling contract: a task and a candidate kernel in, an Evaluation out.

Backends know nothing of the engine, the store or MCP. Every backend runs the candidate (which is
untrusted, LLM-written code) outside the calling process.
"""

from __future__ import annotations

import abc
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from accelopt_mcp.models import Definition, Evaluation, Solution, Workload


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


ROOFLINE_TAG = "roofline:"


class Roofline(BaseModel):
    """Work a task does, so a latency can be put against the hardware's peak.

    A definition carries it as a tag (`roofline:flops=...,bytes_moved=...,compute_unit=...`),
    which both task formats and every store keep; an NKIBench task module declares it with a
    `roofline()` function returning those keys."""

    flops: float = Field(ge=0)
    bytes_moved: float = Field(ge=0)
    compute_unit: Literal["matmul_fp32", "matmul_bf16", "vector"] = "matmul_fp32"
    """Which peak the FLOPs run on: the matmul engine, or the vector/scalar engines."""

    def to_tag(self) -> str:
        return (
            f"{ROOFLINE_TAG}flops={self.flops:.15g},bytes_moved={self.bytes_moved:.15g},"
            f"compute_unit={self.compute_unit}"
        )

    @classmethod
    def from_tags(cls, tags: list[str]) -> Roofline | None:
        for tag in tags:
            if tag.startswith(ROOFLINE_TAG):
                fields = dict(
                    part.split("=", 1)
                    for part in tag[len(ROOFLINE_TAG) :].split(",")
                    if "=" in part
                )
                return cls.model_validate(fields)
        return None


class Task(BaseModel):
    """What a kernel must compute, on which concrete shapes."""

    definition: Definition
    workload: Workload
    roofline: Roofline | None = None
    """Defaults to what the definition's roofline tag declares."""

    @model_validator(mode="after")
    def _roofline_from_definition(self) -> Task:
        if self.roofline is None:
            self.roofline = Roofline.from_tags(self.definition.tags)
        return self


class Availability(BaseModel):
    name: str
    usable: bool
    hardware: str | None = None
    reason: str
    """Why it is (not) usable, and what to install or where to run when it is not."""


class BackendUnavailableError(RuntimeError):
    """The backend cannot run on this host; the message names what is missing and how to get it."""


class Backend(abc.ABC):
    name: str

    @abc.abstractmethod
    def availability(self) -> Availability: ...

    @abc.abstractmethod
    def evaluate(
        self, task: Task, solution: Solution, config: BenchmarkConfig | None = None
    ) -> Evaluation:
        """Check and time one candidate. Failures of the candidate (compile error, wrong
        answer, crash, hang) come back as an Evaluation, never as an exception. Raises
        BackendUnavailableError when the backend cannot run here at all."""
