"""The run-setting options of `accelopt optimize`, one per entry of RUN_SETTINGS: a value
option (`--iterations 5`), or an on/off pair for a bool (`--seed-memory/--no-seed-memory`),
whose absence means "the preset's value"."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, TypeVar

import typer

from accelopt_mcp.engine.setting_signature import with_setting_params
from accelopt_mcp.engine.settings import RunSetting

R = TypeVar("R")


def setting_option(setting: RunSetting) -> inspect.Parameter:
    """The typer parameter of one setting; None (not given) by default. Bounds and choices are
    said in the help and checked with the other settings (one message for all)."""
    kind = setting.value_type()
    if kind is bool:
        flag = setting.flag
        decls = f"{flag}/--no-{flag.removeprefix('--')}"
    else:
        decls = setting.flag
        kind = str if setting.choices() else kind
    annotation = Annotated[kind | None, typer.Option(decls, help=setting.describe())]  # type: ignore[valid-type]
    return inspect.Parameter(
        setting.field, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation
    )


def with_run_options(before: str) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Decorator: the command takes `given` (the settings given, by field) and publishes one
    option per run setting, listed before its parameter `before`."""
    return with_setting_params(setting_option, before=before)
