"""Every knob of one optimization run, validated once at the boundary, and the one resolver
(preset + overrides + model config by name or path) that the CLI and the MCP tools both call."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from accelopt_mcp.backends.registry import backend_names
from accelopt_mcp.engine.presets import load_preset
from accelopt_mcp.llm.config import find_model_config
from accelopt_mcp.models import BenchmarkConfig


class OptimizeConfig(BaseModel):
    """The AccelOpt parameters (T, B, N, K, TopK, ExpN, thresholds) plus where to run."""

    model_config = ConfigDict(extra="forbid")

    iterations: int = Field(default=3, ge=1, le=1000)
    """T: planner -> executor -> profile -> memory rounds."""
    beam: int = Field(default=2, ge=1, le=64)
    """B: kernels kept as the starting points of the next iteration."""
    plans: int = Field(default=3, ge=1, le=64)
    """N: independent planner samples per beam kernel."""
    attempts: int = Field(default=2, ge=1, le=16)
    """K: executor samples per plan."""
    topk: int = Field(default=4, ge=0, le=256)
    """Experience pairs summarized per iteration (at most half of them positive)."""
    exp_n: int = Field(default=16, ge=0, le=10_000)
    """Capacity of the working memory (FIFO)."""
    positive_threshold: float = Field(default=1.04, gt=0)
    """A pair is positive when the fast kernel's speedup over its parent is at least this, the
    lower end of its confidence interval included (where the backend gives one)."""
    negative_threshold: float = Field(default=0.87, gt=0)
    """A pair is negative when the attempt's speedup over its parent is at most this, the upper
    end of its confidence interval included (where the backend gives one)."""
    backend: str = "cpu"
    benchmark: BenchmarkConfig = Field(default_factory=BenchmarkConfig)
    models_config: str | None = None
    """Path of a role-config file (templates/models/*.json); None: OPENAI_* defaults."""
    budget_usd: float | None = Field(default=None, ge=0)
    budget_tokens: int | None = Field(default=None, ge=0)
    budget_wall_s: float | None = Field(default=None, ge=0)
    namespace: str | None = None
    """Shared memory pool the run's experiences are filed under; None: the backend's name."""
    seed_from_namespace: bool = False
    """Start the working memory from the newest ExpN items of the namespace."""
    workers: int | None = Field(default=None, ge=1)
    """Profiling slots (devices); None: one per usable core for cpu."""
    shuffle_seed: int = 0
    """Seeds the order in which profile counters are shown to the planner."""
    summarize: bool = True

    @model_validator(mode="after")
    def _check_thresholds(self) -> OptimizeConfig:
        if self.negative_threshold > 1.0 or self.positive_threshold < 1.0:
            raise ValueError(
                f"thresholds must satisfy negative_threshold <= 1 <= positive_threshold "
                f"(got negative {self.negative_threshold}, positive {self.positive_threshold}); "
                "e.g. 0.87 and 1.04"
            )
        return self

    @property
    def attempts_per_iteration(self) -> int:
        return self.beam * self.plans * self.attempts

    def memory_namespace(self) -> str:
        return self.namespace or self.backend


class RunSettingsError(ValueError):
    """Run settings that cannot work; the message names the field and what it accepts."""


def resolve_optimize_config(
    preset: str | None = None, overrides: Mapping[str, Any] | None = None
) -> OptimizeConfig:
    """A run's settings: the preset's (quick, paper or a JSON file of OptimizeConfig fields;
    default quick) overlaid with `overrides` (OptimizeConfig field names; None means "the
    preset's value"). A model config given by name (templates/models) becomes its path and is
    loaded once, so a broken one is reported before any run is stored. Raises RunSettingsError
    (or LlmConfigError, both ValueErrors) with a one-line message."""
    fields: dict[str, Any] = load_preset(preset or "quick")
    fields.update({key: value for key, value in (overrides or {}).items() if value is not None})
    backend = fields.get("backend", "cpu")
    if backend not in backend_names():
        raise RunSettingsError(
            f"unknown backend {backend!r}; choose one of {', '.join(backend_names())}"
        )
    if fields.get("models_config"):
        fields["models_config"] = str(find_model_config(str(fields["models_config"])))
    try:
        return OptimizeConfig.model_validate(fields)
    except ValidationError as exc:
        raise RunSettingsError(f"invalid run settings: {describe_validation_error(exc)}") from None


def describe_validation_error(exc: ValidationError) -> str:
    """`field: problem; other.field: problem` for a one-line message."""
    return "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or 'settings'}: {error['msg']}"
        for error in exc.errors()
    )
