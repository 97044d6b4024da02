"""Profile a kernel and keep the result: the one path the CLI and the MCP server share."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from accelopt_mcp.backends.registry import get_backend
from accelopt_mcp.models import BenchmarkConfig, Evaluation, Solution, Task
from accelopt_mcp.store.base import KernelStore


class ProfileOutcome(BaseModel):
    evaluation: Evaluation
    definition_name: str
    workload_uuid: str
    solution_name: str
    solution_id: str | None = None
    """Set when the result was stored."""
    profile_id: str | None = None
    pooled: Evaluation | None = None
    """When stored: the profile's figure pooled over every measurement of this kernel on this
    workload, settings and hardware (this one included)."""


def profile_kernel(
    task: Task,
    solution: Solution,
    *,
    backend: str = "cpu",
    config: BenchmarkConfig | None = None,
    store: KernelStore | None = None,
    parent_id: str | None = None,
    evolve_metadata: dict[str, Any] | None = None,
    backend_options: dict[str, Any] | None = None,
) -> ProfileOutcome:
    """Evaluate `solution` on `task` and, given a store, record the definition, workload,
    solution and profile. The kernel runs in a child process; its failures come back as the
    evaluation's status, never as an exception. The evaluation's log comes back (and is stored)
    redacted: a kernel's output may hold a secret of the environment it ran in."""
    config = config or BenchmarkConfig()
    evaluation = get_backend(backend, **(backend_options or {})).evaluate(task, solution, config)
    evaluation = evaluation.redacted()
    outcome = ProfileOutcome(
        evaluation=evaluation,
        definition_name=task.definition.name,
        workload_uuid=task.workload.uuid,
        solution_name=solution.name,
    )
    if store is not None:
        store.upsert_definition(task.definition)
        store.upsert_workload(task.definition.name, task.workload)
        outcome.solution_id = store.upsert_solution(
            solution, parent_id=parent_id, evolve_metadata=evolve_metadata
        )
        outcome.profile_id = store.upsert_profile(
            task.workload.uuid, outcome.solution_id, evaluation, config.perf_fields()
        )
        stored = store.get_profile(outcome.profile_id)
        outcome.pooled = stored.evaluation if stored is not None else None
    return outcome
