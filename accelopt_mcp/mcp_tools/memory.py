"""Optimization-memory tools: the working memory (newest ExpN items) of a run or namespace,
search, add an item, take one out.

Namespaces: given none, a tool uses the default namespace of its `backend` (default cpu),
which is the backend's name, the namespace a job on that backend files into and seeds from
unless started with another one (accelopt_mcp/engine/memory.py)."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver.tools import Tool
from mcp_types import ToolAnnotations
from pydantic import Field

from accelopt_mcp.engine.memory import (
    DEFAULT_BACKEND,
    UnknownItemReference,
    add_experience,
    memory_namespace_of,
    namespace_note,
)
from accelopt_mcp.mcp_tools import ids
from accelopt_mcp.mcp_tools.app import NotFoundError
from accelopt_mcp.mcp_tools.state import ToolContext, state_of
from accelopt_mcp.mcp_tools.views import MAX_PAGE, MemoryItem, View, memory_item
from accelopt_mcp.store.base import ExperienceIn

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True)

# Where the agent looks up what an item refers to, by the field that named it.
LOOK_UP = {
    "definition_name": "; list_definitions shows them",
    "run_id": "; list_jobs shows the runs",
    "slow_solution_id": "; list_solutions gives the ids of a definition",
    "fast_solution_id": "; list_solutions gives the ids of a definition",
}

BACKEND_HELP = (
    "Backend whose memory namespace (its name) is used when no namespace is given: what a "
    "job on it reads unless started with another namespace."
)


class MemoryList(View):
    scope: str
    items: list[MemoryItem]
    """Oldest first (queue order); a search: best match first."""


class MemoryAdded(View):
    id: str
    namespace: str
    """Where it was filed."""
    note: str | None = None
    """Set when no job reads that namespace (no backend's default, no stored run used it)."""
    item: MemoryItem


class MemoryRemoved(View):
    id: str
    removed: bool
    """True: it left the working memory (kept as history)."""


def list_memory(
    ctx: ToolContext,
    run_id: Annotated[
        str | None, Field(description="Memory of this run (its id or an 8+ digit prefix).")
    ] = None,
    namespace: Annotated[
        str | None, Field(description="Or of this namespace; default: the backend's.")
    ] = None,
    backend: Annotated[str, Field(description=BACKEND_HELP)] = DEFAULT_BACKEND,
    limit: Annotated[
        int, Field(ge=1, le=MAX_PAGE, description="ExpN: how many newest items.")
    ] = 16,
) -> MemoryList:
    """The working optimization memory: the newest `limit` experience items of a run or a
    namespace (what the planner sees), oldest first. Without run_id or namespace: the
    backend's namespace ("cpu"), which a job on that backend seeds from."""
    if run_id is not None and namespace is not None:
        raise ValueError("give run_id or namespace, not both")
    store = state_of(ctx).store()
    if run_id is not None:
        found = ids.run_id(store, run_id)
        items = store.recent_experiences(run_id=found, limit=limit)
        return MemoryList(scope=f"run {found}", items=[memory_item(e) for e in items])
    chosen = memory_namespace_of(namespace, backend)
    items = store.recent_experiences(namespace=chosen, limit=limit)
    return MemoryList(scope=f"namespace {chosen}", items=[memory_item(e) for e in items])


def search_memory(
    ctx: ToolContext,
    text: Annotated[
        str | None,
        Field(
            description="Words to look for in title, strategy or pseudocode, any order, each "
            "as the start of a word (threads finds thread); items holding more of them rank "
            "first, one is enough to be found."
        ),
    ] = None,
    definition_name: str | None = None,
    namespace: Annotated[str | None, Field(description="Only this namespace.")] = None,
    backend: Annotated[
        str | None,
        Field(description="Only this backend's namespace (its name); neither: every one."),
    ] = None,
    include_removed: bool = False,
    limit: Annotated[int, Field(ge=1, le=MAX_PAGE)] = 20,
) -> MemoryList:
    """Search experience items of every namespace (or one), best match first (title words
    count most, then strategy, then pseudocode), e.g. for ideas that worked on similar
    kernels. Without text: newest first."""
    chosen = namespace
    if namespace is not None or backend is not None:
        chosen = memory_namespace_of(namespace, backend)
    items = (
        state_of(ctx)
        .store()
        .search_experiences(
            text=text,
            definition_name=definition_name,
            namespace=chosen,
            include_removed=include_removed,
            limit=limit,
        )
    )
    scope = "search" if chosen is None else f"search in namespace {chosen}"
    return MemoryList(scope=scope, items=[memory_item(e) for e in items])


def add_memory(
    ctx: ToolContext,
    item: ExperienceIn,
    backend: Annotated[str, Field(description=BACKEND_HELP)] = DEFAULT_BACKEND,
) -> MemoryAdded:
    """Add an experience item: a short title, a generalizable strategy and the changed code
    segment as pseudocode. Filed under item.namespace, else the backend's namespace ("cpu"),
    where later jobs on that backend find it (start them with seed_memory); the result's
    note says when no job reads the namespace."""
    store = state_of(ctx).store()
    given = item.namespace if "namespace" in item.model_fields_set else None
    item = item.model_copy(update={"namespace": memory_namespace_of(given, backend)})
    try:
        stored = add_experience(store, item)
    except UnknownItemReference as exc:
        raise NotFoundError(f"{exc}{LOOK_UP.get(exc.field, '')}") from exc
    return MemoryAdded(
        id=stored.id,
        namespace=stored.namespace,
        note=namespace_note(store, stored.namespace, backend),
        item=memory_item(stored),
    )


def remove_memory(
    ctx: ToolContext,
    experience_id: Annotated[
        str, Field(description="Item id (or an 8+ digit prefix), from list/search_memory.")
    ],
) -> MemoryRemoved:
    """Take an item out of the working memory (the row stays as history)."""
    store = state_of(ctx).store()
    found = ids.experience_id(store, experience_id)
    return MemoryRemoved(id=found, removed=store.remove_experience(found))


TOOLS = [
    Tool.from_function(list_memory, annotations=READ_ONLY),
    Tool.from_function(search_memory, annotations=READ_ONLY),
    Tool.from_function(
        add_memory, annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False)
    ),
    Tool.from_function(
        remove_memory, annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True)
    ),
]
