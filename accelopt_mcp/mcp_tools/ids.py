"""Ids as an agent gives them back: whole, or a unique prefix of at least 8 hexadecimal digits
(what the CLI and summaries print; any case, dashes optional). Every tool that takes a
solution, run (= job) or experience id resolves it here (the store's resolve_id, one indexed
lookup), with one wording for an unknown or an ambiguous one. LLM-call ids are resolved by the
store's get_llm_call itself."""

from __future__ import annotations

from mcp.server.mcpserver.exceptions import ToolError

from accelopt_mcp.mcp_tools.app import NotFoundError
from accelopt_mcp.store.base import (
    AmbiguousIdError,
    IdKind,
    KernelStore,
    RunRecord,
    StoredSolution,
)
from accelopt_mcp.store.ids import unknown_id

SOLUTION_HINT = "list_solutions gives the ids of a definition"
RUN_HINT = "list_jobs shows the runs"
EXPERIENCE_HINT = "list_memory and search_memory give the ids"


class AmbiguousIdToolError(ToolError):
    """A prefix that matches more than one record."""


def resolve(
    store: KernelStore, kind: IdKind, given: str, *, hint: str, noun: str | None = None
) -> str:
    """The full id of the record of `kind` that `given` names (its id, or a unique prefix);
    a tool error naming the record as `noun` (default: the kind) and `hint` (where to find
    ids) when none matches, or more than one."""
    noun = noun or kind
    try:
        found = store.resolve_id(kind, given)
    except AmbiguousIdError as exc:
        count = f"more than {len(exc.matches)}" if exc.more else str(len(exc.matches))
        shown = ", ".join(exc.matches) + (", ..." if exc.more else "")
        raise AmbiguousIdToolError(
            f"{noun} id prefix {given!r} matches {count} {noun}s ({shown}); give more of the id"
        ) from exc
    if found is not None:
        return found
    raise NotFoundError(unknown_id(noun, given, hint))


def solution_id(store: KernelStore, given: str, *, hint: str = SOLUTION_HINT) -> str:
    """The full id of the solution `given` names (its id, or a unique prefix)."""
    return resolve(store, "solution", given, hint=hint)


def solution(store: KernelStore, given: str, *, hint: str = SOLUTION_HINT) -> StoredSolution:
    """The stored solution `given` names (its id, or a unique prefix)."""
    found = store.get_solution(solution_id(store, given, hint=hint))
    if found is None:  # removed in between
        raise NotFoundError(f"no solution with id {given!r}; {hint}")
    return found


def run_id(store: KernelStore, given: str, *, hint: str = RUN_HINT, noun: str = "run") -> str:
    """The full id of the run (or job, noun "job": a job is its run) `given` names."""
    return resolve(store, "run", given, hint=hint, noun=noun)


def run(store: KernelStore, given: str, *, hint: str = RUN_HINT) -> RunRecord:
    found = store.get_run(run_id(store, given, hint=hint))
    if found is None:
        raise NotFoundError(f"no run with id {given!r}; {hint}")
    return found


def experience_id(store: KernelStore, given: str, *, hint: str = EXPERIENCE_HINT) -> str:
    """The full id of the memory item `given` names (removed ones included)."""
    return resolve(store, "experience", given, hint=hint, noun="memory item")
