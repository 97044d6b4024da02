"""Trace: a definition + workload, and (unless it is a workload trace) a solution's evaluation."""

from __future__ import annotations

from accelopt_mcp.models.base import NonEmptyString, Record
from accelopt_mcp.models.evaluation import Evaluation
from accelopt_mcp.models.workload import Workload


class Trace(Record):
    """A definition + workload, and (unless it is a workload trace) a solution's evaluation."""

    definition: NonEmptyString
    workload: Workload
    solution: str | None = None
    evaluation: Evaluation | None = None

    @property
    def is_workload_trace(self) -> bool:
        return self.solution is None and self.evaluation is None
