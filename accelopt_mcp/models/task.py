"""Task: a definition on one workload, with the roofline (work done) that percent-of-peak needs."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from accelopt_mcp.models.definition import Definition
from accelopt_mcp.models.workload import Workload

ROOFLINE_TAG = "roofline:"
ComputeUnit = Literal["matmul_fp32", "matmul_bf16", "vector"]


class Roofline(BaseModel):
    """Work a task does, so a latency can be put against the hardware's peak.

    Two forms. AccelOpt's (NKIBench's `calculate_percentage_of_peak`): `matmul_flops` (on the
    matmul engine), `vector_flops` (everything else: element-wise, reductions, exp) and
    `bytes_moved`; the ideal time is the longest of the three at their peaks. Either FLOP count
    may be 0 or left out (then 0), not both left out (both 0: a kernel that only moves data).
    The older single-engine form: `flops`, all on the `compute_unit` engine, and `bytes_moved`;
    it means what it always meant. `flops` with either split count is refused: the two forms
    would count the same work twice.

    A definition carries it as a tag (`roofline:matmul_flops=...,vector_flops=...,
    bytes_moved=...` or `roofline:flops=...,bytes_moved=...,compute_unit=...`), which both task
    formats and every store keep; an NKIBench task module declares it with a `roofline()`
    function returning those keys."""

    flops: float | None = Field(default=None, ge=0)
    """The single-engine form's work (None in AccelOpt's form)."""
    matmul_flops: float | None = Field(default=None, ge=0)
    """AccelOpt's form: FLOPs on the matmul engine (None in the single-engine form)."""
    vector_flops: float | None = Field(default=None, ge=0)
    """AccelOpt's form: every other FLOP (None in the single-engine form)."""
    bytes_moved: float = Field(ge=0)
    compute_unit: ComputeUnit = "matmul_fp32"
    """Which peak the FLOPs run on: the matmul engine, or the vector/scalar engines. In
    AccelOpt's form it names the matmul engine's precision only ('vector' is refused)."""

    @model_validator(mode="after")
    def _one_form(self) -> Roofline:
        split = self.matmul_flops is not None or self.vector_flops is not None
        if split and self.flops is not None:
            raise ValueError(
                "give either flops (with compute_unit) or matmul_flops/vector_flops, not both"
            )
        if not split and self.flops is None:
            raise ValueError("a roofline needs matmul_flops and/or vector_flops (or flops)")
        if split:
            if self.compute_unit == "vector":
                raise ValueError(
                    "with matmul_flops/vector_flops, compute_unit names the matmul engine "
                    "('matmul_fp32' or 'matmul_bf16'); element-wise work goes in vector_flops"
                )
            self.matmul_flops = self.matmul_flops or 0.0
            self.vector_flops = self.vector_flops or 0.0
        return self

    @property
    def split(self) -> bool:
        """AccelOpt's form: matmul and vector FLOPs counted apart."""
        return self.flops is None

    def compute_terms(self) -> dict[ComputeUnit, float]:
        """The FLOPs each compute engine must do, by ComputeUnit: one entry in the
        single-engine form; in AccelOpt's form the matmul engine's (under compute_unit) and,
        when there is any, the vector engines' (so hardware without a public vector peak
        can still take a kernel that does no element-wise work)."""
        if self.flops is not None:
            return {self.compute_unit: self.flops}
        terms: dict[ComputeUnit, float] = {self.compute_unit: self.matmul_flops or 0.0}
        if self.vector_flops:
            terms["vector"] = self.vector_flops
        return terms

    def to_tag(self) -> str:
        if self.flops is not None:
            return (
                f"{ROOFLINE_TAG}flops={self.flops:.15g},bytes_moved={self.bytes_moved:.15g},"
                f"compute_unit={self.compute_unit}"
            )
        tag = (
            f"{ROOFLINE_TAG}matmul_flops={self.matmul_flops or 0.0:.15g},"
            f"vector_flops={self.vector_flops or 0.0:.15g},bytes_moved={self.bytes_moved:.15g}"
        )
        if self.compute_unit != "matmul_fp32":
            tag += f",compute_unit={self.compute_unit}"
        return tag

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
