"""Optimization memory: a FIFO working set of at most ExpN experience items.

Items are rows of the store's experiences table. A run's working set is the newest ExpN of
(its seed items, then its own items), oldest first; older items fall out of the working set
but stay in the table as history. Seeds are the newest ExpN items of a namespace when the run
started, recorded by id in the run's checkpoint so a resumed run sees the same memory.
"""

from __future__ import annotations

from accelopt_mcp.store.base import (
    ExperienceIn,
    ExperienceRecord,
    KernelStore,
    StoreError,
    UnknownReferenceError,
)

# Items beyond the working set are never read; this only caps one query's size.
_MAX_SCAN = 100_000


class UnknownItemReference(UnknownReferenceError):
    """A memory item names a definition or run the store does not hold; `field` says which
    (`definition_name` or `run_id`), so that a front end can add where to look it up."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def add_experience(store: KernelStore, item: ExperienceIn) -> ExperienceRecord:
    """Store a memory item given from outside a run (`accelopt memory add`, the add_memory
    tool) and return it as stored. The record has validated its own fields; here its
    definition, and its run when it names one, must be in the store."""
    if store.get_definition(item.definition_name) is None:
        raise UnknownItemReference(
            "definition_name", f"no definition named {item.definition_name!r}"
        )
    if item.run_id is not None and store.get_run(item.run_id) is None:
        raise UnknownItemReference("run_id", f"no run with id {item.run_id!r}")
    new_id = store.add_experience(item)
    stored = store.get_experience(new_id)
    if stored is None:
        raise StoreError(f"memory item {new_id} was stored but cannot be read back")
    return stored


class OptimizationMemory:
    def __init__(
        self,
        store: KernelStore,
        *,
        run_id: str,
        namespace: str,
        capacity: int,
        seed_ids: list[str] | None = None,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.namespace = namespace
        self.capacity = capacity
        self.seed_ids = list(seed_ids or [])

    @staticmethod
    def seeds_from_namespace(store: KernelStore, namespace: str, capacity: int) -> list[str]:
        if capacity == 0:
            return []
        return [item.id for item in store.recent_experiences(namespace=namespace, limit=capacity)]

    def working_set(self) -> list[ExperienceRecord]:
        """What the planner sees: at most `capacity` items, oldest first."""
        if self.capacity == 0:
            return []
        seeds = [self.store.get_experience(item_id) for item_id in self.seed_ids]
        own = self.store.recent_experiences(run_id=self.run_id, limit=self.capacity)
        live_seeds = [s for s in seeds if s is not None and not s.removed]
        return (live_seeds + own)[-self.capacity :]

    def add(self, item: ExperienceIn) -> str:
        return self.store.add_experience(
            item.model_copy(update={"run_id": self.run_id, "namespace": self.namespace})
        )

    def remove(self, item_id: str) -> bool:
        """Take an item out of every working set; the row stays as history."""
        return self.store.remove_experience(item_id)

    def items_of_iteration(self, iteration: int) -> list[ExperienceRecord]:
        """What this run stored for the iteration, removed items too: they were appended (and
        summarizing their pair again would bring back a lesson taken out by hand)."""
        found = self.store.search_experiences(
            namespace=self.namespace, include_removed=True, limit=_MAX_SCAN
        )
        return [i for i in found if i.run_id == self.run_id and i.iteration == iteration]
