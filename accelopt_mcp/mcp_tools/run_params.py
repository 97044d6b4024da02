"""The run-setting parameters of the start_optimization tool, one per entry of RUN_SETTINGS,
each optional (null or left out: the preset's value), with the field's bounds and choices in
the tool's schema."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, TypeVar

from pydantic import Field

from accelopt_mcp.engine.setting_signature import with_setting_params
from accelopt_mcp.engine.settings import RunSetting

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
