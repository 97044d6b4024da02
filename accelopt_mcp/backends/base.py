"""The profiling contract: a task and a candidate kernel in, an Evaluation out.

Backends know nothing of the engine, the store or MCP. Every backend runs the candidate (which is
untrusted, LLM-written code) outside the calling process.
"""

from __future__ import annotations

import abc
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from accelopt_mcp.models import BenchmarkConfig, Evaluation, Solution, Task


class BackendInfo(BaseModel):
    """What a backend is, declared once on its class: the engine, the loaders, the device pool
    and every help text read it from here, so adding a backend is one module plus one line in
    the registry."""

    model_config = ConfigDict(frozen=True)

    name: str
    """The name users pass (`--backend`, `backend=`)."""
    summary: str
    """One line for help texts: the hardware and the kind of kernel."""
    prompt_family: Literal["cpu", "nki", "gpu"]
    """The prompt set the planner, executor and summarizer use
    (accelopt_mcp/engine/prompt_templates/<family>/)."""
    device_kind: Literal["cpu", "neuron", "gpu"]
    """What one slot of its device pool is: a pinned CPU core group, a NeuronCore or a GPU."""
    target_hardware: tuple[str, ...]
    """What a kernel loaded for this backend lists as `spec.target_hardware`."""


class Availability(BaseModel):
    name: str
    usable: bool
    hardware: str | None = None
    reason: str
    """Why it is (not) usable, and what to install or where to run when it is not."""
    isolation: str | None = None
    """How candidates are isolated here: 'bwrap jail: ...' or 'none: ...' with how to get a
    jail. None where the backend does not say."""


class BackendUnavailableError(RuntimeError):
    """The backend cannot run on this host; the message names what is missing and how to get it."""


class Backend(abc.ABC):
    """A profiler for one kind of hardware. Subclasses set `info` and implement availability()
    and evaluate(); the registry (backends/registry.py) names them."""

    info: ClassVar[BackendInfo]

    @property
    def name(self) -> str:
        return self.info.name

    @abc.abstractmethod
    def availability(self) -> Availability: ...

    @abc.abstractmethod
    def evaluate(
        self, task: Task, solution: Solution, config: BenchmarkConfig | None = None
    ) -> Evaluation:
        """Check and time one candidate. Failures of the candidate (compile error, wrong
        answer, crash, hang) come back as an Evaluation, never as an exception. Raises
        BackendUnavailableError when the backend cannot run here at all."""
