"""What a started run works with: built once when it starts, fixed until it ends."""

from __future__ import annotations

from dataclasses import dataclass

from accelopt_mcp.engine.checkpoint import RunSpec
from accelopt_mcp.engine.checkpoint_writer import CheckpointWriter
from accelopt_mcp.engine.config import OptimizeConfig
from accelopt_mcp.engine.memory import OptimizationMemory
from accelopt_mcp.engine.profile_cache import ProfileCache
from accelopt_mcp.engine.run_events import RunEvents
from accelopt_mcp.llm import Budget, LlmClient
from accelopt_mcp.models import Task
from accelopt_mcp.store.base import KernelStore


@dataclass(frozen=True)
class RunContext:
    run_id: str
    spec: RunSpec
    family: str
    """The prompt set (see prompts.family_for)."""
    models: dict[str, str]
    """role -> model, recorded with every kernel the run creates."""
    budget: Budget
    client: LlmClient
    profiles: ProfileCache
    memory: OptimizationMemory
    checkpoints: CheckpointWriter
    events: RunEvents
    hardware: str
    """The hardware block of every prompt of the run (Checkpoint.prompt_hardware)."""
    contract: str
    """The contract of every prompt of the run (Checkpoint.prompt_contract)."""

    @property
    def cfg(self) -> OptimizeConfig:
        return self.spec.optimize

    @property
    def task(self) -> Task:
        return self.spec.task


def make_budget(
    store: KernelStore, run_id: str, cfg: OptimizeConfig, elapsed_before_s: float
) -> Budget:
    """The run's budget from now on: what earlier workers spent and took counts against it."""
    wall = cfg.budget_wall_s
    if wall is not None:
        wall = max(0.0, wall - elapsed_before_s)
    budget = Budget(max_tokens=cfg.budget_tokens, max_usd=cfg.budget_usd, max_wall_s=wall)
    # A resumed run keeps spending against what it already spent.
    for totals in store.llm_totals(run_id):
        budget.charge(totals.tokens_in, totals.tokens_out, totals.cost_usd)
    return budget
