"""Checks of a store call's arguments, made once in the contract (store/base.py) before any
store's query runs: pages, string keys and ids. No imports from the rest of the store package,
so that the contract can use them."""

from __future__ import annotations

import uuid


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
