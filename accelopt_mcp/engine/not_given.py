""" "Not given": the one value a front end passes for a run setting the user left out, and
the override map that drops it. Apart from settings.py because the config (engine/config.py)
applies overrides with it, and the settings table reads the config's fields."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any, Final, Literal


class _NotGiven(Enum):
    """The one value of "the user did not give this setting" (None can be a given value)."""

    NOT_GIVEN = "NOT_GIVEN"

    def __repr__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN: Final = _NotGiven.NOT_GIVEN
NotGiven = Literal[_NotGiven.NOT_GIVEN]


def given_settings(values: Mapping[str, Any]) -> dict[str, Any]:
    """The override map: {OptimizeConfig field: value} of the settings given, from values
    keyed by field name, where NOT_GIVEN (and None, which no front end can give) means "the
    preset's value". False and 0 are given values."""
    return {
        name: value
        for name, value in values.items()
        if value is not NOT_GIVEN and value is not None
    }
