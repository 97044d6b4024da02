"""Storing a kernel with its lineage, for every caller that links one (profile_kernel, the
insert_solution tool): a new source becomes a row with its parent, name, author and notes; a
source already stored gets what its row lacks filled in, and a link that contradicts the stored
one is refused with a one-line ConflictError. Nothing given is ever dropped without a word. A
row is one (definition, source) pair: the same source stored for another definition is a row of
its own.

What may be filled in on a stored row: a missing parent; a name where the stored one is a
placeholder (tasks.kernels.is_placeholder_name); an author where the stored one is the default;
evolve_metadata keys the row does not hold. A stored parent, name, author or metadata value
that differs from the one given is a conflict: lineage is history, never rewritten.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from accelopt_mcp.hashing import CURRENT_HASH_VERSION, solution_hash
from accelopt_mcp.models import Solution
from accelopt_mcp.store.base import (
    ConflictError,
    KernelStore,
    StoredSolution,
    StoreError,
    UnknownReferenceError,
)
from accelopt_mcp.tasks.kernels import DEFAULT_AUTHOR, is_placeholder_name

SHORT_ID = 8
"""How many characters of an id messages show (any 8 or more are accepted back)."""


class LinkPlan(BaseModel):
    """What storing a kernel will do: create a row, or fill in an existing one."""

    existing: StoredSolution | None = None
    """The row already holding this source, if any."""
    parent_id: str | None = None
    """The parent the kernel will have (given, or the stored one)."""
    fill: dict[str, Any] = Field(default_factory=dict)
    """Fields to fill in on the existing row: parent_id, name, author, evolve_metadata (the
    keys to add)."""
    notes: list[str] = Field(default_factory=list)
    """What was given and not applied, and why (never a conflict: those raise)."""


class StoredKernel(BaseModel):
    """How a kernel was stored."""

    solution_id: str
    created: bool
    """True: a new row; false: the source was stored already."""
    parent_id: str | None = None
    name: str
    filled: list[str] = Field(default_factory=list)
    """Fields of an existing row filled in by this call (parent_id, name, author,
    evolve_metadata)."""
    notes: list[str] = Field(default_factory=list)

    def describe(self) -> str:
        """One line: 'stored as new', 'already stored; filled in parent_id, name', ..."""
        if self.created:
            return "stored as a new solution"
        if self.filled:
            return "already stored (same source); filled in " + ", ".join(self.filled)
        return "already stored (same source); nothing to change"


def short(identifier: str | None) -> str:
    return (identifier or "")[:SHORT_ID]


def _clip(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _refuse(stored: StoredSolution, what: str) -> ConflictError:
    return ConflictError(
        f"solution {short(stored.id)} (same source, already stored) {what}; a stored "
        "kernel's lineage and names are not rewritten: give the stored value or omit it, or "
        "change the source to store a new kernel"
    )


def plan_links(
    store: KernelStore,
    solution: Solution,
    *,
    parent_id: str | None = None,
    evolve_metadata: dict[str, Any] | None = None,
    name_given: bool = True,
    author_given: bool | None = None,
) -> LinkPlan:
    """What storing `solution` with these links would do, checked against the database
    (nothing is written). parent_id must be a full id. name_given: whether the solution's
    name was chosen by the caller (a derived one, a file's stem or a pasted kernel's default,
    only replaces a placeholder and never conflicts); author_given likewise (default: unless
    it is the default author). Raises ConflictError when a given value contradicts the
    stored row of this source for this definition, UnknownReferenceError for an unknown
    parent, StoreError when a fill is due and the store cannot write it."""
    if author_given is None:
        author_given = solution.author != DEFAULT_AUTHOR
    parent = None
    if parent_id is not None:
        parent = store.get_solution(parent_id)
        if parent is None:
            raise UnknownReferenceError(
                f"no solution with id {parent_id!r} to be the parent; list_solutions gives ids"
            )
    # The row of this (definition, source) pair: under another definition the same source is
    # another solution, with links of its own.
    existing = store.find_solution(
        solution.definition, solution_hash(solution), CURRENT_HASH_VERSION
    )
    if existing is None:
        return LinkPlan(parent_id=parent_id)
    plan = LinkPlan(existing=existing, parent_id=existing.parent_id)
    if parent is not None and parent.id != existing.parent_id:
        if existing.parent_id is not None:
            raise _refuse(
                existing, f"has parent {short(existing.parent_id)}, not {short(parent.id)}"
            )
        if parent.id == existing.id or existing.id in {a.id for a in store.ancestors(parent.id)}:
            relation = "itself" if parent.id == existing.id else "its ancestor"
            raise ConflictError(
                f"solution {short(parent.id)} cannot be the parent of {short(existing.id)}: "
                f"{short(existing.id)} is {relation}"
            )
        plan.fill["parent_id"] = parent.id
        plan.parent_id = parent.id
    stored_name, name = existing.solution.name, solution.name
    if name != stored_name:
        if is_placeholder_name(existing.solution) and not is_placeholder_name(solution):
            plan.fill["name"] = name
        elif name_given:
            raise _refuse(existing, f"is named {stored_name!r}, not {name!r}")
        else:
            plan.notes.append(f"name {name!r} not applied: it is stored as {stored_name!r}")
    if solution.author != existing.author:
        if existing.author == DEFAULT_AUTHOR and author_given:
            plan.fill["author"] = solution.author
        elif author_given:
            raise _refuse(existing, f"has author {existing.author!r}, not {solution.author!r}")
    added: dict[str, Any] = {}
    for key, value in (evolve_metadata or {}).items():
        if key not in existing.evolve_metadata:
            added[key] = value
        elif existing.evolve_metadata[key] != value:
            raise _refuse(
                existing,
                f"has evolve_metadata[{key!r}] = {_clip(existing.evolve_metadata[key])}, "
                f"not {_clip(value)}",
            )
    if added:
        plan.fill["evolve_metadata"] = added
    return plan


def store_kernel(
    store: KernelStore,
    solution: Solution,
    *,
    parent_id: str | None = None,
    evolve_metadata: dict[str, Any] | None = None,
    name_given: bool = True,
    author_given: bool | None = None,
) -> StoredKernel:
    """Store `solution` with its links (plan_links says what that does, and raises what it
    raises): a new row, or the existing row of the same source with what it lacks filled
    in. Returns how it went."""

    def planned() -> LinkPlan:
        return plan_links(
            store,
            solution,
            parent_id=parent_id,
            evolve_metadata=evolve_metadata,
            name_given=name_given,
            author_given=author_given,
        )

    plan = planned()
    created = plan.existing is None
    if created:
        store.upsert_solution(solution, parent_id=parent_id, evolve_metadata=evolve_metadata)
        # Read back: had another writer stored the same source in between, its row is the
        # one kept, and what it lacks is filled in like any stored row's.
        plan = planned()
    existing = plan.existing
    if existing is None:
        raise StoreError("the solution was stored but cannot be read back; try again")
    if plan.fill:
        store.update_solution_links(existing.id, **plan.fill)
    return StoredKernel(
        solution_id=existing.id,
        created=created,
        parent_id=plan.parent_id,
        name=plan.fill.get("name", existing.solution.name),
        filled=list(plan.fill),
        notes=plan.notes,
    )
