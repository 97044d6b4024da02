"""Optimization memory: the working set of at most ExpN experience items a planner sees.

Items are rows of the store's experiences table. A run's items are its seed items, then its
own items in the order the iterations added them. Two policies (OptimizeConfig.memory_policy)
choose the working set, always shown oldest first:

- "fifo": the newest ExpN items; older ones fall out of the working set (but stay in the
  table as history).
- "sample" (as AccelOpt's code does): every item of the newest iteration that added any (the
  newest ExpN of them, should it have added more), then the rest filled with a random sample
  of the older items, seeds included. The sample is drawn with a seed made of the run id and
  the iteration being planned, so a resumed run sees the same working set.

Seeds are the newest ExpN items of a namespace when the run started, recorded by id in the
run's checkpoint so a resumed run sees the same memory.

Namespaces: a run files its items under OptimizeConfig.memory_namespace(): the namespace it
was started with, else default_namespace(backend), the backend's name ("cpu"). The memory
tools and `accelopt memory` derive the same default from their `backend` (default "cpu"), so
an item added by hand without a namespace lands where the next run on that backend seeds
from. A namespace is *read* when some job would find it: it is a backend's default
namespace, or a stored run was started with it (namespace_note tells an item filed anywhere
else that no job will see it).
"""

from __future__ import annotations

import random
from typing import Any, Literal

from accelopt_mcp.backends.registry import backend_names
from accelopt_mcp.store.base import (
    DEFAULT_BACKEND,
    ConflictError,
    ExperienceIn,
    ExperienceRecord,
    IdKind,
    KernelStore,
    RunRecord,
    StoreError,
    UnknownReferenceError,
    default_namespace,
)

# Items beyond the working set are never read; this only caps one query's size.
_MAX_SCAN = 100_000
RUNS_SCANNED = 500
"""How many of the newest runs namespace_note looks through for a namespace they used."""

__all__ = [
    "DEFAULT_BACKEND",
    "RUNS_SCANNED",
    "MemoryPolicy",
    "OptimizationMemory",
    "UnknownItemReference",
    "add_experience",
    "default_namespace",
    "memory_namespace_of",
    "namespace_note",
    "run_namespace",
]


def memory_namespace_of(namespace: str | None = None, backend: str | None = None) -> str:
    """The namespace a memory tool or command uses: `namespace` when given, else the default
    namespace of `backend` (default: cpu). An unknown backend is a ValueError that lists the
    known ones."""
    name = DEFAULT_BACKEND if backend is None else backend
    if name not in backend_names():
        raise ValueError(
            f"unknown backend {name!r}; choose one of {', '.join(backend_names())} (its "
            "memory namespace is its name)"
        )
    return namespace if namespace is not None else default_namespace(name)


def run_namespace(run: RunRecord) -> str | None:
    """The namespace a stored run files its items under (its settings' namespace, else its
    backend's default), or None for a run whose config holds no settings."""
    settings: Any = run.config.get("optimize")
    if not isinstance(settings, dict):
        return None
    namespace = settings.get("namespace")
    if isinstance(namespace, str) and namespace:
        return namespace
    backend = settings.get("backend")
    return default_namespace(backend) if isinstance(backend, str) else None


def namespace_note(
    store: KernelStore, namespace: str, backend: str = DEFAULT_BACKEND
) -> str | None:
    """None when a job reads `namespace` (it is a backend's default namespace, or one of the
    newest RUNS_SCANNED runs used it); otherwise a sentence saying no job will find an item
    there and how to start one that does."""
    if any(default_namespace(name) == namespace for name in backend_names()):
        return None
    if any(run_namespace(run) == namespace for run in store.list_runs(limit=RUNS_SCANNED)):
        return None
    return (
        f"no run has used namespace {namespace!r} and it is no backend's default, so no job "
        f"reads it: jobs read {default_namespace(backend)!r} (backend {backend}) unless started "
        f"with namespace={namespace!r}; start one so (with seed_memory) to use this item"
    )


MemoryPolicy = Literal["fifo", "sample"]


class UnknownItemReference(UnknownReferenceError):
    """A memory item names a definition, run or solution the store does not hold; `field`
    says which (`definition_name`, `run_id`, `slow_solution_id`, `fast_solution_id`), so that
    a front end can add where to look it up."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


ID_FIELDS: tuple[tuple[str, IdKind], ...] = (
    ("run_id", "run"),
    ("slow_solution_id", "solution"),
    ("fast_solution_id", "solution"),
)
"""The ids a memory item may name, and what each names."""


def add_experience(store: KernelStore, item: ExperienceIn) -> ExperienceRecord:
    """Store a memory item given from outside a run (`accelopt memory add`, the add_memory
    tool) and return it as stored. The record has validated its own fields; here its
    definition, and its run and solutions when it names them, must be in the store: each id
    whole or a unique prefix of 8+ characters, as the CLI and the tools print them (stored
    whole; AmbiguousIdError for a prefix of several)."""
    if store.get_definition(item.definition_name) is None:
        raise UnknownItemReference(
            "definition_name", f"no definition named {item.definition_name!r}"
        )
    whole: dict[str, str] = {}
    for field, kind in ID_FIELDS:
        given = getattr(item, field)
        if given is None:
            continue
        found = store.resolve_id(kind, given)
        if found is None:
            raise UnknownItemReference(field, f"no {kind} with id {given!r}")
        whole[field] = found
    item = item.model_copy(update=whole)
    if item.slow_solution_id is not None and item.fast_solution_id is not None:
        pair = (item.slow_solution_id, item.fast_solution_id)
        for held in store.search_experiences(namespace=item.namespace, limit=_MAX_SCAN):
            if (held.slow_solution_id, held.fast_solution_id) == pair:
                raise DuplicatePair(
                    f"memory item {held.id} already holds the lesson of {pair[0][:8]} -> "
                    f"{pair[1][:8]} in namespace {item.namespace!r}: remove it first "
                    "(`accelopt memory remove` or remove_memory) to replace it"
                )
    new_id = store.add_experience(item)
    stored = store.get_experience(new_id)
    if stored is None:
        raise StoreError(f"memory item {new_id} was stored but cannot be read back")
    return stored


class DuplicatePair(ConflictError):
    """A memory item for a slow -> fast pair that a live item of the namespace already holds."""


class OptimizationMemory:
    def __init__(
        self,
        store: KernelStore,
        *,
        run_id: str,
        namespace: str,
        capacity: int,
        seed_ids: list[str] | None = None,
        policy: MemoryPolicy = "fifo",
    ) -> None:
        if policy not in ("fifo", "sample"):
            raise ValueError(f"unknown memory policy {policy!r}; choose fifo or sample")
        self.store = store
        self.run_id = run_id
        self.namespace = namespace
        self.capacity = capacity
        self.seed_ids = list(seed_ids or [])
        self.policy: MemoryPolicy = policy

    @staticmethod
    def seeds_from_namespace(store: KernelStore, namespace: str, capacity: int) -> list[str]:
        if capacity == 0:
            return []
        return [item.id for item in store.recent_experiences(namespace=namespace, limit=capacity)]

    def _live_seeds(self) -> list[ExperienceRecord]:
        seeds = [self.store.get_experience(item_id) for item_id in self.seed_ids]
        return [s for s in seeds if s is not None and not s.removed]

    def working_set(self, iteration: int | None = None) -> list[ExperienceRecord]:
        """What the planner of `iteration` sees: at most `capacity` items, oldest first, by
        the memory's policy. iteration: only the run's items of earlier iterations count (the
        memory as that iteration started, the same on a resume); None: every item so far,
        and "sample" draws as for the iteration after the newest one."""
        if self.capacity == 0:
            return []
        if self.policy == "sample":
            return self._sampled(iteration)
        own = self.store.recent_experiences(
            run_id=self.run_id, limit=self.capacity if iteration is None else _MAX_SCAN
        )
        own = _before(own, iteration)
        return (self._live_seeds() + own)[-self.capacity :]

    def _sampled(self, iteration: int | None) -> list[ExperienceRecord]:
        own = _before(self.store.recent_experiences(run_id=self.run_id, limit=_MAX_SCAN), iteration)
        newest_iteration = max((i.iteration for i in own if i.iteration is not None), default=None)
        newest = [
            i for i in own if newest_iteration is not None and i.iteration == newest_iteration
        ]
        newest = newest[-self.capacity :]
        shown = {item.id for item in newest}
        older: list[ExperienceRecord] = []
        for item in self._live_seeds() + own:
            if item.id not in shown:
                shown.add(item.id)
                older.append(item)
        room = self.capacity - len(newest)
        if room <= 0 or not older:
            return newest
        planned = iteration if iteration is not None else (newest_iteration or 0) + 1
        rng = random.Random(f"{self.run_id}/{planned}")
        picked = sorted(rng.sample(range(len(older)), min(room, len(older))))
        return [older[index] for index in picked] + newest

    def add(self, item: ExperienceIn) -> str:
        return self.store.add_experience(
            item.model_copy(update={"run_id": self.run_id, "namespace": self.namespace})
        )

    def remove(self, item_id: str) -> bool:
        """Take an item out of every working set; the row stays as history."""
        return self.store.remove_experience(item_id)

    def learned(self) -> list[ExperienceRecord]:
        """Every item of the namespace, removed ones too (summarizing their pair again would
        bring back a lesson taken out by hand): what summarizing checks a pair against."""
        return self.store.search_experiences(
            namespace=self.namespace, include_removed=True, limit=_MAX_SCAN
        )


def _before(items: list[ExperienceRecord], iteration: int | None) -> list[ExperienceRecord]:
    """The items learned before `iteration` (all of them for None; items without an
    iteration count as earlier)."""
    if iteration is None:
        return items
    return [i for i in items if i.iteration is None or i.iteration < iteration]
