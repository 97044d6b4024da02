"""Definition: what a kernel computes (axes, tensors, the reference implementation)."""

from __future__ import annotations

import ast
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import (
    Discriminator,
    Field,
    Tag,
    model_validator,
)

from accelopt_mcp.models.base import (
    NonEmptyString,
    NonNegativeInt,
    Record,
    Tagged,
    union_member_kind,
)
from accelopt_mcp.pysource import parse_python


class AxisConst(Tagged):
    type: Literal["const"] = "const"
    value: NonNegativeInt
    """The axis's size, the same in every workload."""
    description: str | None = None


class AxisVar(Tagged):
    type: Literal["var"] = "var"
    description: str | None = None


Axis = Annotated[
    Annotated[AxisConst, Tag("const")] | Annotated[AxisVar, Tag("var")],
    Discriminator(lambda v: union_member_kind(v, lambda d: "const" if "value" in d else "var")),
]


class DType(StrEnum):
    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    FLOAT8_E4M3FN = "float8_e4m3fn"
    FLOAT8_E5M2 = "float8_e5m2"
    FLOAT4_E2M1 = "float4_e2m1"
    INT64 = "int64"
    INT32 = "int32"
    INT16 = "int16"
    INT8 = "int8"
    BOOL = "bool"


class TensorSpec(Record):
    shape: list[NonEmptyString] | None
    """Axis names, outermost first; None for a scalar."""
    dtype: DType
    description: str | None = None


class Definition(Record):
    """What a kernel must compute: axes, tensor interface and a Python reference `run`."""

    name: NonEmptyString
    """Unique; the key it is stored under."""
    op_type: NonEmptyString
    """The kind of operation, e.g. 'rmsnorm' or 'gemm'."""
    axes: dict[NonEmptyString, Axis]
    """Axis name -> a constant size, or 'var' for one each workload sets."""
    inputs: dict[NonEmptyString, TensorSpec]
    """Tensor name -> spec, in the order `run` takes them."""
    outputs: dict[NonEmptyString, TensorSpec]
    """Tensor name -> spec, in the order `run` returns them."""
    reference: NonEmptyString
    """Python source defining `run`: the ground truth every kernel is checked against."""
    tags: list[NonEmptyString] = Field(default_factory=list)
    description: str | None = None
    constraints: list[NonEmptyString] = Field(default_factory=list)
    """Python expressions over the axes that every workload satisfies."""

    @model_validator(mode="after")
    def _check(self) -> Definition:
        try:
            module = parse_python(self.reference, mode="exec")
        except SyntaxError as exc:
            raise ValueError(f"reference is not valid Python: {exc}") from exc
        if not any(isinstance(n, ast.FunctionDef) and n.name == "run" for n in module.body):
            raise ValueError(
                "reference must define a top-level function `run` taking the inputs in order "
                "and returning the outputs"
            )
        overlap = set(self.inputs) & set(self.outputs)
        if overlap:
            raise ValueError(f"input and output names overlap: {sorted(overlap)}")
        for constraint in self.constraints:
            try:
                parse_python(constraint, mode="eval")
            except SyntaxError as exc:
                raise ValueError(f"constraint {constraint!r} is not a Python expression") from exc
        for tensor, spec in {**self.inputs, **self.outputs}.items():
            for axis in spec.shape or []:
                if axis not in self.axes:
                    raise ValueError(f"tensor {tensor!r} uses axis {axis!r}, not in `axes`")
        return self

    @property
    def const_axes(self) -> dict[str, int]:
        return {n: a.value for n, a in self.axes.items() if isinstance(a, AxisConst)}

    @property
    def var_axes(self) -> list[str]:
        return [n for n, a in self.axes.items() if isinstance(a, AxisVar)]

    def shape_of(self, spec: TensorSpec, axes_values: dict[str, int]) -> tuple[int, ...] | None:
        """Concrete shape of a tensor once the variable axes are bound."""
        if spec.shape is None:
            return None
        bound = {**self.const_axes, **axes_values}
        missing = [a for a in spec.shape if a not in bound]
        if missing:
            raise ValueError(f"no value for variable axes {missing} of definition {self.name!r}")
        return tuple(bound[a] for a in spec.shape)
