"""Every knob of one optimization run, validated once at the boundary, and the one resolver
(preset + overrides + model config by name or path) that the CLI and the MCP tools both call."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from accelopt_mcp.backends.registry import backend_names
from accelopt_mcp.engine.memory import default_namespace
from accelopt_mcp.engine.not_given import given_settings
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
    """N: plans per beam kernel (how they are asked for: plan_mode)."""
    plan_mode: Literal["distinct", "independent"] = "distinct"
    """How the N plans of a beam kernel are asked for. "distinct": one planner call asks for
    N plans that differ from each other (one JSON list); when it gives fewer distinct ones, a
    follow-up call is shown them and asked for the rest. "independent": N separate calls with
    the same prompt, as in the AccelOpt paper; only the sampling temperature (and the seeded
    order of the counters) separates the plans, which then often say the same thing."""
    attempts: int = Field(default=2, ge=1, le=16)
    """K: executor samples per plan."""
    repair_tries: int = Field(default=1, ge=0, le=5)
    """How many times an attempt that failed with an error the executor can read
    (COMPILE_ERROR, RUNTIME_ERROR, INCORRECT_*) is handed back to it, with its kernel, the
    failure class and the end of the log, for a corrected kernel; within the same attempt
    slot. 0: never (the AccelOpt paper's loop)."""
    topk: int = Field(default=4, ge=0, le=256)
    """Experience pairs summarized per iteration (at most half of them positive)."""
    exp_n: int = Field(default=16, ge=0, le=10_000)
    """Capacity of the working memory: the most items a planner prompt shows (memory_policy
    says which)."""
    memory_policy: Literal["fifo", "sample"] = "sample"
    """Which items of the run's memory (its seeds, then what each iteration added) the planner
    sees, at most ExpN, oldest first. "sample" (the default, and what AccelOpt's code does):
    every item the newest iteration added, plus a random sample of the older items (seeds
    included) to fill up to ExpN, drawn with a seed made of the run id and the iteration, so a
    resumed run sees the same memory. "fifo": the newest ExpN items; the oldest fall out.
    Why sample is the default: the newest lessons, about the kernels now in the beam, are
    always shown, yet an early lesson (often the biggest win, e.g. vectorizing the main loop)
    or a seed from the shared namespace stays in circulation instead of being pushed out
    after ExpN/TopK iterations, and successive iterations see different mixes of the old
    lessons, which spreads the plans. FIFO is the simpler queue of the design notes; it suits
    short runs, where both policies show about the same items."""
    positive_threshold: float = Field(default=1.04, gt=0)
    """A pair is positive when the fast kernel's speedup over its parent is at least this, the
    lower end of its confidence interval included (where the backend gives one)."""
    negative_threshold: float = Field(default=0.87, gt=0)
    """A pair is negative when the attempt's speedup over its parent is at most this, the upper
    end of its confidence interval included (where the backend gives one)."""
    backend: str = "cpu"
    benchmark: BenchmarkConfig = Field(default_factory=BenchmarkConfig)
    models_config: str | None = None
    """Path of a role-config file (a shipped one: accelopt_mcp/llm/model_configs/*.json);
    None: OPENAI_* defaults."""
    budget_usd: float | None = Field(default=None, ge=0)
    budget_tokens: int | None = Field(default=None, ge=0)
    budget_wall_s: float | None = Field(default=None, ge=0)
    namespace: str | None = None
    """Shared memory pool the run's experiences are filed under (and seeded from, with
    seed_from_namespace); None: default_namespace(backend), the backend's name (e.g. "cpu"),
    which is also where the memory tools and `accelopt memory add` file an item given no
    namespace (accelopt_mcp/engine/memory.py)."""
    seed_from_namespace: bool = False
    """Start the working memory from the newest ExpN items of the namespace."""
    workers: int | None = Field(default=None, ge=1)
    """Profiling slots (devices); None: one per usable core for cpu (on a cluster: every
    device it has for the backend)."""
    cluster: str | None = None
    """The Ray cluster to profile on (host:port, ray://host:port or auto; accelopt-mcp[ray]);
    None: ACCELOPT_RAY_ADDRESS when set, else this host's devices."""
    shuffle_seed: int = 0
    """Seeds the order in which profile counters are shown to the planner."""
    summarize: bool = True
    max_consecutive_llm_failures: int = Field(default=6, ge=0)
    """The run stops with status llm_unavailable once this many LLM calls in a row (any role)
    have failed for good, retries exhausted: the endpoint is down or refuses the model, and
    going on would only record failed attempts. 0: never stop for it."""

    @model_validator(mode="after")
    def _check_thresholds(self) -> OptimizeConfig:
        if self.negative_threshold > 1.0 or self.positive_threshold < 1.0:
            raise ValueError(
                f"thresholds must satisfy negative_threshold <= 1 <= positive_threshold "
                f"(got negative {self.negative_threshold}, positive {self.positive_threshold}); "
                "e.g. 0.87 and 1.04"
            )
        if "decide_at" not in self.benchmark.model_fields_set:
            # What the run decides on: a pair is positive or negative by these, so sampling an
            # attempt further once its interval clears both buys nothing the run uses.
            self.benchmark = self.benchmark.model_copy(
                update={"decide_at": [self.negative_threshold, self.positive_threshold]}
            )
        if "breakdown" not in self.benchmark.model_fields_set:
            # The planner reads the profiles of the kernels it rewrites: each passing attempt
            # also says where one call spends its time (one traced call after its timing;
            # off only when the run's benchmark settings say breakdown false).
            self.benchmark = self.benchmark.model_copy(update={"breakdown": True})
        return self

    @property
    def attempts_per_iteration(self) -> int:
        return self.beam * self.plans * self.attempts

    def memory_namespace(self) -> str:
        """Where this run files and seeds its memory: `namespace`, else the backend's."""
        return self.namespace or default_namespace(self.backend)


class RunSettingsError(ValueError):
    """Run settings that cannot work; the message names the field and what it accepts."""


def resolve_optimize_config(
    preset: str | None = None, overrides: Mapping[str, Any] | None = None
) -> OptimizeConfig:
    """A run's settings: the preset's (quick, paper or a JSON file of OptimizeConfig fields;
    default quick) overlaid with `overrides` (OptimizeConfig field names; NOT_GIVEN or None
    means "the preset's value"; False and 0 are values). A model config given by name
    (accelopt_mcp/llm/model_configs) becomes its path and is loaded once, so a broken one is
    reported before any run is stored. Raises
    RunSettingsError (or LlmConfigError, both ValueErrors) with a one-line message."""
    fields: dict[str, Any] = load_preset(preset or "quick")
    fields.update(given_settings(overrides or {}))
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
