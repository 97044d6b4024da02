"""Optimization-memory tools: the working memory (newest ExpN items) of a run or namespace,
search, add an item, take one out."""

from __future__ import annotations

from typing import Annotated

from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field

from accelopt_mcp.mcp_tools.app import AccelOptServer, NotFoundError
from accelopt_mcp.mcp_tools.state import ServerState
from accelopt_mcp.mcp_tools.views import MAX_PAGE, MemoryItem, memory_item
from accelopt_mcp.store.base import ExperienceIn

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True)


class MemoryList(BaseModel):
    scope: str
    items: list[MemoryItem] = Field(description="Oldest first (queue order).")


class MemoryAdded(BaseModel):
    id: str
    item: MemoryItem


class MemoryRemoved(BaseModel):
    id: str
    removed: bool = Field(description="True: it left the working memory (kept as history).")


def register(server: AccelOptServer, state: ServerState) -> None:
    @server.tool(annotations=READ_ONLY)
    def list_memory(
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
        store = state.store()
        if run_id is not None and store.get_run(run_id) is None:
            raise NotFoundError(f"no run with id {run_id!r}; list_jobs shows the runs")
        items = store.recent_experiences(run_id=run_id, namespace=namespace, limit=limit)
        scope = f"run {run_id}" if run_id else f"namespace {namespace}"
        return MemoryList(scope=scope, items=[memory_item(e) for e in items])

    @server.tool(annotations=READ_ONLY)
    def search_memory(
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
        items = state.store().search_experiences(
            text=text,
            definition_name=definition_name,
            namespace=namespace,
            include_removed=include_removed,
            limit=limit,
        )
        return MemoryList(scope="search", items=[memory_item(e) for e in items])

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
    def add_memory(item: ExperienceIn) -> MemoryAdded:
        """Add an experience item: a short title, a generalizable strategy and the changed code
        segment as pseudocode. Put it in a namespace to share it with later runs."""
        store = state.store()
        if store.get_definition(item.definition_name) is None:
            raise NotFoundError(
                f"no definition named {item.definition_name!r}; list_definitions shows them"
            )
        if item.run_id is not None and store.get_run(item.run_id) is None:
            raise NotFoundError(f"no run with id {item.run_id!r}")
        new_id = store.add_experience(item)
        stored = store.get_experience(new_id)
        assert stored is not None
        return MemoryAdded(id=new_id, item=memory_item(stored))

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
    def remove_memory(
        experience_id: Annotated[str, Field(description="Item id, from list/search_memory.")],
    ) -> MemoryRemoved:
        """Take an item out of the working memory (the row stays as history)."""
        store = state.store()
        if store.get_experience(experience_id) is None:
            raise NotFoundError(f"no memory item with id {experience_id!r}")
        return MemoryRemoved(id=experience_id, removed=store.remove_experience(experience_id))
