"""Task: a definition on one workload, with the roofline (work done) that percent-of-peak needs."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from accelopt_mcp.models.definition import Definition
from accelopt_mcp.models.workload import Workload

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
