"""Ids as people and agents give them back: whole, or a unique prefix of at least MIN_PREFIX
hexadecimal digits (what the CLI and the tools print; any case, dashes optional). The store's
resolve_id finds the record; this is the one wording, for every front end, of an id that names
nothing (an ambiguous one is AmbiguousIdError's own message)."""

from __future__ import annotations

MIN_PREFIX = 8
"""The shortest prefix accepted for an id, in hexadecimal digits."""


def unknown_id(noun: str, given: str, hint: str) -> str:
    """One line: no `noun` has this id (saying so when it is too short to be a prefix), and
    where to find the ids (`hint`)."""
    short = len(given.strip().replace("-", "")) < MIN_PREFIX
    why = f" (a prefix needs {MIN_PREFIX}+ characters)" if short else ""
    return f"no {noun} with id {given!r}{why}; {hint}"
