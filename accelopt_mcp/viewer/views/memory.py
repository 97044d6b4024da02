"""The memory page: the optimization memory's items (lessons), counted by namespace, searched
by text; `LessonView` is how a lesson shows wherever the viewer lists one."""

from __future__ import annotations

from accelopt_mcp.models import from_record
from accelopt_mcp.store.base import ExperienceRecord, KernelStore
from accelopt_mcp.viewer.views.base import MAX_SCAN, View


class LessonView(View):
    id: str
    title: str
    strategy: str
    pseudocode: str
    namespace: str
    speedup: float | None = None
    iteration: int | None = None
    slow_solution_id: str | None = None
    fast_solution_id: str | None = None
    removed: bool = False


def lesson_view(item: ExperienceRecord) -> LessonView:
    return from_record(LessonView, item)


class MemoryPage(View):
    namespaces: dict[str, int]
    """Items (not removed) per namespace, among those read."""
    items: list[LessonView]
    text: str | None = None
    namespace: str | None = None
    error: str | None = None


def memory_page(
    store: KernelStore, *, namespace: str | None = None, text: str | None = None, limit: int = 500
) -> MemoryPage:
    everything = store.search_experiences(limit=MAX_SCAN)
    counts: dict[str, int] = {}
    for item in everything:
        counts[item.namespace] = counts.get(item.namespace, 0) + 1
    page = MemoryPage(
        namespaces=dict(sorted(counts.items())), items=[], text=text, namespace=namespace
    )
    try:
        found = store.search_experiences(
            text=text or None, namespace=namespace or None, limit=limit
        )
    except ValueError as exc:  # UnsearchableTextError: only stop words
        page.error = str(exc)
        return page
    page.items = [lesson_view(i) for i in found]
    return page
