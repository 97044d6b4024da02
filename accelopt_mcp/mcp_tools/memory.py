"""Optimization-memory tools: the working memory (newest ExpN items) of a run or namespace,
search, add an item, take one out."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver.tools import Tool
from mcp_types import ToolAnnotations
from pydantic import Field

from accelopt_mcp.engine.memory import UnknownItemReference, add_experience
from accelopt_mcp.mcp_tools.app import NotFoundError
from accelopt_mcp.mcp_tools.state import ToolContext, state_of
from accelopt_mcp.mcp_tools.views import MAX_PAGE, MemoryItem, View, memory_item
from accelopt_mcp.store.base import ExperienceIn

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True)

# Where the agent looks up what an item refers to, by the field that named it.
LOOK_UP = {"definition_name": "; list_definitions shows them"}


class MemoryList(View):
    scope: str
    items: list[MemoryItem]
    """Oldest first (queue order)."""


class MemoryAdded(View):
    id: str
    item: MemoryItem


class MemoryRemoved(View):
    id: str
    removed: bool
    """True: it left the working memory (kept as history)."""


def list_memory(
    ctx: ToolContext,
    run_id: Annotated[str | None, Field(description="Memory of this run.")] = None,
    namespace: Annotated[
        str | None, Field(description="Or of a shared pool, e.g. 'default' or 'cpu/x86_64'.")
    ] = None,
    limit: Annotated[
        int, Field(ge=1, le=MAX_PAGE, description="ExpN: how many newest items.")
    ] = 16,
) -> MemoryList:
    """The working optimization memory: the newest `limit` experience items of a run or a
    namespace (what the planner sees), oldest first. Give run_id or namespace."""
    if (run_id is None) == (namespace is None):
        raise ValueError("give exactly one of run_id and namespace")
    store = state_of(ctx).store()
    if run_id is not None and store.get_run(run_id) is None:
        raise NotFoundError(f"no run with id {run_id!r}; list_jobs shows the runs")
    items = store.recent_experiences(run_id=run_id, namespace=namespace, limit=limit)
    scope = f"run {run_id}" if run_id else f"namespace {namespace}"
    return MemoryList(scope=scope, items=[memory_item(e) for e in items])


def search_memory(
    ctx: ToolContext,
    text: Annotated[
        str | None, Field(description="Substring of title, strategy or pseudocode.")
    ] = None,
    definition_name: str | None = None,
    namespace: str | None = None,
    include_removed: bool = False,
    limit: Annotated[int, Field(ge=1, le=MAX_PAGE)] = 20,
) -> MemoryList:
    """Search experience items (newest first), e.g. for ideas that worked on similar
    kernels."""
    items = (
        state_of(ctx)
        .store()
        .search_experiences(
            text=text,
            definition_name=definition_name,
            namespace=namespace,
            include_removed=include_removed,
            limit=limit,
        )
    )
    return MemoryList(scope="search", items=[memory_item(e) for e in items])


def add_memory(ctx: ToolContext, item: ExperienceIn) -> MemoryAdded:
    """Add an experience item: a short title, a generalizable strategy and the changed code
    segment as pseudocode. Put it in a namespace to share it with later runs."""
    try:
        stored = add_experience(state_of(ctx).store(), item)
    except UnknownItemReference as exc:
        raise NotFoundError(f"{exc}{LOOK_UP.get(exc.field, '')}") from exc
    return MemoryAdded(id=stored.id, item=memory_item(stored))


def remove_memory(
    ctx: ToolContext,
    experience_id: Annotated[str, Field(description="Item id, from list/search_memory.")],
) -> MemoryRemoved:
    """Take an item out of the working memory (the row stays as history)."""
    store = state_of(ctx).store()
    if store.get_experience(experience_id) is None:
        raise NotFoundError(f"no memory item with id {experience_id!r}")
    return MemoryRemoved(id=experience_id, removed=store.remove_experience(experience_id))


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
