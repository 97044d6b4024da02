"""Workload: one concrete instance of a definition (axis values, input sources)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    Discriminator,
    Tag,
)

from accelopt_mcp.models.base import (
    NonEmptyString,
    NonNegativeInt,
    Record,
    Tagged,
    union_member_kind,
)


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
    Discriminator(lambda v: union_member_kind(v, _input_kind)),
]


class Workload(Record):
    """One concrete instance of a definition: values of its variable axes and input sources."""

    axes: dict[str, NonNegativeInt]
    """Values of the definition's variable axes."""
    inputs: dict[str, InputSpec]
    """Input name -> where its values come from: random, a scalar or a safetensors file."""
    uuid: NonEmptyString
