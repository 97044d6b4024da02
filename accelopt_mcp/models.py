"""Kernel records in the FlashInfer-Trace layout (flashinfer-bench 0.1.2).

They are re-declared here so the core does not import torch or CUDA. Files written from these
models load in flashinfer-bench and theirs load here. Two additions that flashinfer-bench
ignores on load (pydantic drops unknown fields there): the `nki` language, and on Evaluation the
latency statistics and hardware counters that the planner reads.
"""

from __future__ import annotations

import ast
import math
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from accelopt_mcp.pysource import parse_python

NonEmptyString = Annotated[str, Field(min_length=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]


class Record(BaseModel):
    """Base of every record: unknown fields are ignored, as flashinfer-bench does."""

    model_config = ConfigDict(extra="ignore")

    def to_json(self) -> str:
        """The JSON form flashinfer-bench writes: fields never set are left out."""
        return self.model_dump_json(indent=2, exclude_unset=True)


# --------------------------------------------------------------------------- definition


class Tagged(Record):
    """A member of a union told apart by its `type` field. The field is always written out,
    even when left at its default, so the JSON says which member it is."""

    def model_post_init(self, context: Any, /) -> None:
        self.model_fields_set.add("type")


def _kind(value: Any, infer: Any) -> str | None:
    # Files written with exclude_unset by other tools may leave `type` out; infer it then.
    if isinstance(value, dict):
        return value.get("type") or infer(value)
    return getattr(value, "type", None)


class AxisConst(Tagged):
    type: Literal["const"] = "const"
    value: NonNegativeInt
    description: str | None = None


class AxisVar(Tagged):
    type: Literal["var"] = "var"
    description: str | None = None


Axis = Annotated[
    Annotated[AxisConst, Tag("const")] | Annotated[AxisVar, Tag("var")],
    Discriminator(lambda v: _kind(v, lambda d: "const" if "value" in d else "var")),
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
    op_type: NonEmptyString
    axes: dict[NonEmptyString, Axis]
    inputs: dict[NonEmptyString, TensorSpec]
    outputs: dict[NonEmptyString, TensorSpec]
    reference: NonEmptyString
    tags: list[NonEmptyString] = Field(default_factory=list)
    description: str | None = None
    constraints: list[NonEmptyString] = Field(default_factory=list)

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


# --------------------------------------------------------------------------- workload


class RandomInput(Tagged):
    type: Literal["random"] = "random"


class ScalarInput(Tagged):
    type: Literal["scalar"] = "scalar"
    value: int | float | bool


class SafetensorsInput(Tagged):
    type: Literal["safetensors"] = "safetensors"
    path: NonEmptyString
    tensor_key: NonEmptyString


def _input_kind(data: dict[str, Any]) -> str:
    if "path" in data or "tensor_key" in data:
        return "safetensors"
    return "scalar" if "value" in data else "random"


InputSpec = Annotated[
    Annotated[RandomInput, Tag("random")]
    | Annotated[ScalarInput, Tag("scalar")]
    | Annotated[SafetensorsInput, Tag("safetensors")],
    Discriminator(lambda v: _kind(v, _input_kind)),
]


class Workload(Record):
    """One concrete instance of a definition: values of its variable axes and input sources."""

    axes: dict[str, NonNegativeInt]
    inputs: dict[str, InputSpec]
    uuid: NonEmptyString


# --------------------------------------------------------------------------- solution


class Language(StrEnum):
    PYTHON = "python"
    TRITON = "triton"
    CPP = "cpp"
    CUDA = "cuda"
    TILELANG = "tilelang"
    NKI = "nki"
    """Ours: AWS Neuron Kernel Interface. flashinfer-bench does not know it."""


class Binding(StrEnum):
    TVM_FFI = "tvm-ffi"
    TORCH = "torch"


class SourceFile(Record):
    path: NonEmptyString
    content: NonEmptyString

    @model_validator(mode="after")
    def _check_path(self) -> SourceFile:
        path = Path(self.path)
        if path.is_absolute() or ".." in path.parts:
            raise ValueError(
                f"source path {self.path!r} must be relative and stay inside the solution "
                "(no absolute path, no '..')"
            )
        return self


class BuildSpec(Record):
    language: Language
    target_hardware: list[str] = Field(min_length=1)
    entry_point: NonEmptyString
    """`<file path>::<function name>`, e.g. `main.py::run`."""
    dependencies: list[NonEmptyString] = Field(default_factory=list)
    destination_passing_style: bool = True
    """True: outputs are passed in as the last arguments. False: the kernel returns them."""
    binding: Binding | None = None

    @field_validator("entry_point")
    @classmethod
    def _check_entry_point(cls, value: str) -> str:
        if value.count("::") != 1:
            raise ValueError(
                f"entry_point {value!r} must look like '<file path>::<function name>', "
                "e.g. 'kernel.py::run'"
            )
        return value


class Solution(Record):
    """A candidate implementation of a definition."""

    name: NonEmptyString
    definition: NonEmptyString
    author: NonEmptyString
    spec: BuildSpec
    sources: list[SourceFile] = Field(min_length=1)
    description: str | None = None

    @model_validator(mode="after")
    def _check_sources(self) -> Solution:
        paths = [s.path for s in self.sources]
        duplicates = sorted({p for p in paths if paths.count(p) > 1})
        if duplicates:
            raise ValueError(f"duplicate source paths: {duplicates}")
        if self.entry_file not in paths:
            raise ValueError(
                f"entry point file {self.entry_file!r} is not among the sources {paths}"
            )
        return self

    @property
    def entry_file(self) -> str:
        return self.spec.entry_point.split("::")[0]

    @property
    def entry_symbol(self) -> str:
        return self.spec.entry_point.split("::")[1]

    @property
    def entry_source(self) -> SourceFile:
        return next(s for s in self.sources if s.path == self.entry_file)


# --------------------------------------------------------------------------- evaluation


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
    """Ours, ignored by flashinfer-bench."""
    hardware_counters: dict[str, float] = Field(default_factory=dict)
    """Ours, ignored by flashinfer-bench: what the planner sees besides latency."""
    flags: list[str] = Field(default_factory=list)
    """Ours: warnings a correct result still carries (e.g. 'above_peak', 'constant_output')."""

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


class Trace(Record):
    """A definition + workload, and (unless it is a workload trace) a solution's evaluation."""

    definition: NonEmptyString
    workload: Workload
    solution: str | None = None
    evaluation: Evaluation | None = None

    @property
    def is_workload_trace(self) -> bool:
        return self.solution is None and self.evaluation is None
