"""The run settings a user may give at start (T, B, N, K, backend, models, seeding, ...),
each declared once: RUN_SETTINGS names the OptimizeConfig field, its help text, its names on
the command line and over MCP, and whether a preset may set it; its type, default and bounds
are the field's own. The CLI options, the MCP tool parameters and the override maps of both
front ends are derived from this table (accelopt_mcp/cli/run_options.py,
accelopt_mcp/mcp_tools/run_params.py)."""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Any, Final, Literal

import annotated_types
from pydantic.fields import FieldInfo

from accelopt_mcp.backends.registry import backend_help
from accelopt_mcp.engine.not_given import NOT_GIVEN, NotGiven, given_settings


@dataclass(frozen=True)
class RunSetting:
    """One run setting: the OptimizeConfig field it sets and how the front ends show it."""

    field: str
    """The OptimizeConfig field (its type, default and bounds are read from there)."""
    help: str
    """One line for `--help` and the MCP tool's schema (bounds and default are appended)."""
    preset: bool = True
    """Whether a preset (quick, paper, a JSON file) may set it; when not, the field's default
    is what an omitted setting gets."""
    cli_flag: str | None = None
    """The CLI option; None: `--` and the field's name with dashes."""
    mcp_name: str | None = None
    """The MCP tool parameter; None: the field's name."""

    @property
    def flag(self) -> str:
        return self.cli_flag or "--" + self.field.replace("_", "-")

    @property
    def param(self) -> str:
        """The MCP parameter's name."""
        return self.mcp_name or self.field

    @property
    def info(self) -> FieldInfo:
        # Imported here: config.py resolves overrides with given_settings (below).
        from accelopt_mcp.engine.config import OptimizeConfig

        return OptimizeConfig.model_fields[self.field]

    def value_type(self) -> Any:
        """The field's type without None: int, float, str, bool or a Literal."""
        annotation: Any = self.info.annotation
        if typing.get_origin(annotation) in (typing.Union, types.UnionType):
            (annotation,) = (a for a in typing.get_args(annotation) if a is not type(None))
        return annotation

    def choices(self) -> tuple[str, ...]:
        """The values a Literal-typed setting accepts (empty for the others)."""
        kind = self.value_type()
        return typing.get_args(kind) if typing.get_origin(kind) is Literal else ()

    def bounds(self) -> dict[str, Any]:
        """The field's bounds as pydantic Field arguments: {"ge": 1, "le": 1000}."""
        found: dict[str, Any] = {}
        for item in self.info.metadata:
            for name in ("ge", "le", "gt", "lt"):
                if isinstance(item, getattr(annotated_types, name.capitalize())):
                    found[name] = getattr(item, name)
        return found

    def default_text(self) -> str | None:
        """The default as --help says it; None where the field's default is None (the
        field's docstring says what no value means)."""
        default = self.info.get_default(call_default_factory=True)
        shown = None if default is None else str(default).lower()
        if not self.preset:
            return shown
        return "the preset's" + (f", else {shown}" if shown is not None else "")

    def describe(self) -> str:
        """help, then what it accepts and its default, e.g. 'T: iterations (1 to 1000;
        default: the preset's, else 3).'"""
        parts = []
        bounds = self.bounds()
        low = bounds.get("ge", bounds.get("gt"))
        high = bounds.get("le", bounds.get("lt"))
        if self.choices():
            parts.append(" or ".join(self.choices()))
        elif low is not None and high is not None:
            parts.append(f"{low} to {high}")
        elif low is not None:
            parts.append(f"{'>' if 'gt' in bounds else '>='} {low}")
        default = self.default_text()
        if default is not None:
            parts.append(f"default: {default}")
        said = f" ({'; '.join(parts)})" if parts else ""
        return f"{self.help.rstrip('.')}{said}."


RUN_SETTINGS: Final[tuple[RunSetting, ...]] = (
    RunSetting("backend", f"Where kernels are profiled: one of {backend_help()}", preset=False),
    RunSetting("iterations", "T: iterations"),
    RunSetting("beam", "B: beam width"),
    RunSetting("plans", "N: plans per beam kernel"),
    RunSetting("attempts", "K: attempts per plan"),
    RunSetting("topk", "TopK: experiences summarized per iteration"),
    RunSetting("exp_n", "ExpN: memory capacity"),
    RunSetting("positive_threshold", "A pair is positive at this speedup or above"),
    RunSetting("negative_threshold", "A pair is negative at this speedup or below"),
    RunSetting(
        "models_config",
        "Model config: a JSON/TOML file, or the name of a shipped one (e.g. openai, "
        "vllm-gpt-oss-120b, llamacpp); none: OPENAI_BASE_URL, OPENAI_API_KEY and the model "
        "in ACCELOPT_MODEL (else gpt-4.1-mini)",
        preset=False,
        cli_flag="--config",
    ),
    RunSetting("budget_usd", "Stop at this LLM spend (USD)"),
    RunSetting("budget_tokens", "Stop at this many LLM tokens"),
    RunSetting("budget_wall_s", "Stop after this many seconds"),
    RunSetting("namespace", "Memory namespace the run files its experiences in"),
    RunSetting(
        "seed_from_namespace",
        "Start from the namespace's newest experiences",
        cli_flag="--seed-memory",
        mcp_name="seed_memory",
    ),
    RunSetting("workers", "Profiling slots"),
    RunSetting(
        "plan_mode",
        "distinct: one planner call asks for N different plans; independent: N separate "
        "samples, as in the paper",
    ),
    RunSetting("repair_tries", "Repair calls after a failed attempt (0 in the paper)"),
    RunSetting(
        "memory_policy",
        "sample: the newest iteration's items + a random sample of older ones; fifo: the newest",
    ),
    RunSetting(
        "max_consecutive_llm_failures",
        "Stop as llm_unavailable after this many LLM calls in a row failed (0: never)",
        cli_flag="--max-llm-failures",
    ),
)


__all__ = ["NOT_GIVEN", "RUN_SETTINGS", "NotGiven", "RunSetting", "given_settings"]
