"""What every record shares: unknown fields ignored on load (as flashinfer-bench does),
JSON written the way flashinfer-bench writes it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
)

NonEmptyString = Annotated[str, Field(min_length=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]


class Record(BaseModel):
    """Base of every record: unknown fields are ignored, as flashinfer-bench does. A field's
    docstring is its description in JSON schemas (the MCP tools' among them)."""

    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True)

    def to_json(self) -> str:
        """The JSON form flashinfer-bench writes: fields never set are left out."""
        return self.model_dump_json(indent=2, exclude_unset=True)


ViewT = TypeVar("ViewT", bound=BaseModel)


def from_record(view: type[ViewT], record: BaseModel, **fields: Any) -> ViewT:
    """`view` of a record (what a tool or a page shows of it): every field of the view that the
    record holds under the same name, as stored, and `fields`: those renamed, computed, clipped
    or masked for the reader."""
    same = {
        name: getattr(record, name)
        for name in view.model_fields
        if name not in fields and hasattr(record, name)
    }
    return view.model_validate(same | fields)


# --------------------------------------------------------------------------- definition


class Tagged(Record):
    """A member of a union told apart by its `type` field. The field is always written out,
    even when left at its default, so the JSON says which member it is."""

    def model_post_init(self, context: Any, /) -> None:
        self.model_fields_set.add("type")


def union_member_kind(value: Any, infer: Callable[[dict[str, Any]], str]) -> str | None:
    # Files written with exclude_unset by other tools may leave `type` out; infer it then.
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    if not kind and isinstance(value, dict):
        return infer(value)
    return str(kind) if kind is not None else None
