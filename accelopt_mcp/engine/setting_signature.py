"""Front-end plumbing for RUN_SETTINGS: a command or tool function written with one
`given` mapping gets, in its published signature, one parameter per run setting (what typer
and the MCP SDK read to build options and the tool's schema); a call gathers those parameters
back into the override map."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from accelopt_mcp.engine.not_given import given_settings
from accelopt_mcp.engine.settings import RUN_SETTINGS, RunSetting

R = TypeVar("R")
GIVEN = "given"
"""The keyword the wrapped function receives the override map as."""


def with_setting_params(
    param_of: Callable[[RunSetting], inspect.Parameter], *, before: str
) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Decorator: the function takes `given` (the settings given, by field) and publishes
    param_of(setting) for every entry of RUN_SETTINGS (a CLI option, a tool parameter), listed
    before its parameter `before`."""

    def decorate(func: Callable[..., R]) -> Callable[..., R]:
        params = {setting.field: param_of(setting) for setting in RUN_SETTINGS}
        return _published(func, params, before=before)

    return decorate


def _published(
    func: Callable[..., R], params: Mapping[str, inspect.Parameter], *, before: str
) -> Callable[..., R]:
    """func, published with `params` ({OptimizeConfig field: its parameter}) in place of its
    `given` parameter, inserted before the parameter `before`; a call hands func
    given=given_settings({field: value}) (the settings given) and the rest as they came."""
    signature = inspect.signature(func, eval_str=True)
    hints = typing.get_type_hints(func, include_extras=True)
    kept = [param for name, param in signature.parameters.items() if name != GIVEN]
    at = next(index for index, param in enumerate(kept) if param.name == before)
    added = [param.replace(kind=inspect.Parameter.KEYWORD_ONLY) for param in params.values()]
    published = [param.replace(kind=inspect.Parameter.KEYWORD_ONLY) for param in kept[at:]]
    parameters = [*kept[:at], *added, *published]
    by_param = {param.name: field for field, param in params.items()}

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> R:
        values = {by_param[name]: kwargs.pop(name) for name in list(kwargs) if name in by_param}
        return func(*args, **kwargs, **{GIVEN: given_settings(values)})

    wrapper.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {
        **{name: hint for name, hint in hints.items() if name != GIVEN},
        **{param.name: param.annotation for param in added},
    }
    del wrapper.__wrapped__
    return wrapper
