"""Checks of a store call's arguments, made once in the contract (store/base.py) before any
store's query runs: records, pages, string keys, ids and JSON settings. No imports from the
rest of the store package, so that the contract can use them."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

ModelT = TypeVar("ModelT", bound=BaseModel)
MIN_ID_PREFIX = 8


def check_limit(limit: int | None, offset: int = 0) -> None:
    """A page request: `limit` a non-negative int or None (all), `offset` a non-negative int."""
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be a non-negative integer or None, got {limit!r}")
    if not isinstance(offset, int) or offset < 0:
        raise ValueError(f"offset must be a non-negative integer, got {offset!r}")


def check_strings(**values: object) -> None:
    """Keys and filters are strings (or None); say so before the database reports a type
    mismatch in its own words."""
    for name, value in values.items():
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be a string, got {type(value).__name__} {value!r}")


def canonical_uuid(value: object) -> str | None:
    """The canonical text of a UUID (lower case, hyphenated), or None if it is not one."""
    if isinstance(value, uuid.UUID):
        return str(value)
    if not isinstance(value, str):
        return None
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None


MAX_LEASE_S = 24 * 3600.0


def check_lease(lease_s: object) -> float:
    """A lease length: a number of seconds in (0, one day]."""
    if isinstance(lease_s, bool) or not isinstance(lease_s, int | float):
        raise TypeError(f"lease_s must be a number of seconds, got {lease_s!r}")
    if not 0 < lease_s <= MAX_LEASE_S:
        raise ValueError(f"lease_s must be between 0 and {MAX_LEASE_S:g} seconds, got {lease_s}")
    return float(lease_s)


def check_statuses(statuses: object) -> list[str]:
    """The run statuses a claim accepts: a non-empty list of strings."""
    if isinstance(statuses, str) or not isinstance(statuses, Iterable):
        raise TypeError(f"statuses must be a list of run statuses, got {statuses!r}")
    found = sorted(statuses)
    check_strings(**{f"statuses[{i}]": s for i, s in enumerate(found)})
    if not found:
        raise ValueError("statuses must name at least one run status")
    return found


def require(value: object, model: type[ModelT], what: str) -> ModelT:
    """The record itself, or a TypeError saying how to build one (a dict is not validated
    silently: validation errors belong where the data comes from)."""
    if isinstance(value, model):
        return value
    name = model.__name__
    raise TypeError(
        f"{what} must be a {name} record, got {type(value).__name__}; build it with "
        f"{name}.model_validate(data) so that bad fields are reported"
    )


def require_str(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"{what} must be a non-empty string, got {value!r}")
    return value


def id_prefix(value: str) -> str | None:
    """The lower-cased id prefix to look up when `value` may be one (hexadecimal, from
    MIN_ID_PREFIX characters up to a whole uuid hex); None when only an exact match makes
    sense. Being hexadecimal, it holds no LIKE wildcard."""
    lowered = value.lower()
    if MIN_ID_PREFIX <= len(lowered) <= 32 and re.fullmatch(r"[0-9a-f]+", lowered):
        return lowered
    return None


def plain_json(value: Mapping[str, Any] | None, what: str) -> str:
    """JSON text of free-form settings (metadata, configs); a clear error if they are not JSON."""
    if value is None:
        return "{}"
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} must be a dict of JSON values, got {type(value).__name__}")
    try:
        return json.dumps(dict(value), allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"{what} must hold only JSON values (str, number, bool, None, list, dict; no NaN): "
            f"{exc}"
        ) from exc
