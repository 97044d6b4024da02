"""The profiling contract: a task and a candidate kernel in, an Evaluation out.

Backends know nothing of the engine, the store or MCP. Every backend runs the candidate (which is
untrusted, LLM-written code) outside the calling process.
"""

from __future__ import annotations

import abc

from pydantic import BaseModel

from accelopt_mcp.models import BenchmarkConfig, Evaluation, Solution, Task


class Availability(BaseModel):
    name: str
    usable: bool
    hardware: str | None = None
    reason: str
    """Why it is (not) usable, and what to install or where to run when it is not."""


class BackendUnavailableError(RuntimeError):
    """The backend cannot run on this host; the message names what is missing and how to get it."""


class Backend(abc.ABC):
    name: str

    @abc.abstractmethod
    def availability(self) -> Availability: ...

    @abc.abstractmethod
    def evaluate(
        self, task: Task, solution: Solution, config: BenchmarkConfig | None = None
    ) -> Evaluation:
        """Check and time one candidate. Failures of the candidate (compile error, wrong
        answer, crash, hang) come back as an Evaluation, never as an exception. Raises
        BackendUnavailableError when the backend cannot run here at all."""
