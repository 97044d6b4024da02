"""The run-setting parameters of the start_optimization tool, one per entry of RUN_SETTINGS,
each optional (null or left out: the preset's value), with the field's bounds and choices in
the tool's schema."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Annotated, TypeVar

from pydantic import Field

from accelopt_mcp.engine.presets import PRESETS, load_preset
from accelopt_mcp.engine.setting_signature import with_setting_params
from accelopt_mcp.engine.settings import RunSetting
from accelopt_mcp.mcp_tools.roots import Roots

R = TypeVar("R")


def setting_param(setting: RunSetting) -> inspect.Parameter:
    """The tool parameter of one setting: `<type> | None = None`, None meaning not given."""
    field = Field(description=setting.describe(), **setting.bounds())
    annotation = Annotated[setting.value_type() | None, field]  # type: ignore[valid-type]
    return inspect.Parameter(
        setting.param, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation
    )


def with_run_params(before: str) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Decorator: the tool takes `given` (the settings given, by field) and publishes one
    parameter per run setting, listed before its parameter `before`."""
    return with_setting_params(setting_param, before=before)


def confined_run_files(
    roots: Roots, preset: str, models_config: str | None
) -> tuple[str, str | None]:
    """The preset and the model config a run's settings will load, each file confined to the
    roots (roots.py): a preset file, and the model config given or, when none is, the one the
    preset names (resolving the settings loads it, so it is checked before). A preset or
    model config given by name (a shipped one) stays as it is."""
    if preset not in PRESETS:
        preset = str(roots.file(preset, "preset", suffixes=(".json",)))
    if models_config is None:
        named = load_preset(preset).get("models_config")
        models_config = named if isinstance(named, str) else None
    if models_config is not None and _names_a_file(models_config):
        models_config = str(roots.file(models_config, "models_config"))
    return preset, models_config


def _names_a_file(value: str) -> bool:
    """A models_config that is a path, not a preset name (which has no separator or dot)."""
    return os.sep in value or "." in value or value.startswith("~")
