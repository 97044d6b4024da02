"""Time breakdowns as every backend hands them over (`Evaluation.breakdown`): `breakdown_from`
turns raw entries (from a jailed harness, a profiler's summary, a device's trace) into at most
MAX_ENTRIES validated `BreakdownEntry` records, largest first. What comes in may have crossed
from a kernel's process, so nothing in it is believed beyond its shape: an entry that does not
validate is left out, text is trimmed and control characters dropped, shares are bounded."""

from __future__ import annotations

import math
from typing import Any

from pydantic import ValidationError

from accelopt_mcp.models import BreakdownEntry

MAX_ENTRIES = 12
"""Entries an evaluation keeps (a cpu trace that was cut short adds one that says so)."""
MAX_RAW_ENTRIES = 64
"""Entries looked at, at most: a longer list is cut before anything is validated."""
MAX_WHAT_CHARS = 120


def clean_text(value: Any, limit: int = MAX_WHAT_CHARS) -> str:
    """One line of printable text, at most `limit` characters."""
    text = "".join(ch if ch.isprintable() else " " for ch in str(value)[: limit * 4])
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def breakdown_from(raw: Any, *, limit: int = MAX_ENTRIES + 1) -> list[BreakdownEntry]:
    """Validated entries from a list of {"what", "ms", "share"?, "calls"?} dicts, largest
    first (an entry whose text starts with "(" — a note such as a capped trace — stays last),
    at most `limit`; [] for anything that is not such a list."""
    if not isinstance(raw, list):
        return []
    entries: list[BreakdownEntry] = []
    for item in raw[:MAX_RAW_ENTRIES]:
        if not isinstance(item, dict):
            continue
        what = clean_text(item.get("what") or "")
        ms, share = item.get("ms"), item.get("share", 0.0)
        if (
            not what
            or isinstance(ms, bool)
            or not isinstance(ms, int | float)
            or not math.isfinite(float(ms))
            or ms < 0
        ):
            continue
        if not isinstance(share, int | float) or not math.isfinite(float(share)):
            share = 0.0
        calls = item.get("calls", 1)
        try:
            entries.append(
                BreakdownEntry(
                    what=what,
                    ms=float(ms),
                    share=min(1.0, max(0.0, float(share))),
                    calls=calls if isinstance(calls, int) and not isinstance(calls, bool) else 0,
                )
            )
        except ValidationError:
            continue
    notes = [e for e in entries if e.what.startswith("(")]
    parts = sorted((e for e in entries if not e.what.startswith("(")), key=lambda e: -e.ms)
    return (parts[:MAX_ENTRIES] + notes[:1])[:limit]
