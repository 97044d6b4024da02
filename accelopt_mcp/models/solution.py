"""Solution: a kernel (its sources and how to build and call it) for one definition."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from accelopt_mcp.models.base import NonEmptyString, Record


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
    """Name of the definition it implements."""
    author: NonEmptyString
    spec: BuildSpec
    sources: list[SourceFile] = Field(min_length=1)
    """Its files; `spec.entry_point` names the function called."""
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
