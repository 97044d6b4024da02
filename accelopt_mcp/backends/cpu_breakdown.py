"""The cpu backend's time breakdown, the harness's side: `shape_breakdown` turns the report a
jailed kernel's line tracer wrote (cpu_candidate's `traced_call`, answering PROFILE) into at
most MAX_ENTRIES plain entries {"what", "ms", "share", "calls"}.

That report comes from inside the jail, where the kernel shares the interpreter with the
tracer: it may be missing, forged, huge or nonsense. Nothing in it is believed beyond its
shape: every field is type-checked, every text trimmed and stripped of control characters,
every time bounded by the harness's own clock around the traced call, and the list capped.
The breakdown is information for whoever rewrites the kernel, never a figure a verdict or a
latency depends on. Standard library only (the harness's import budget)."""

from __future__ import annotations

import math
from typing import Any

MAX_ENTRIES = 12
"""Entries kept, largest first (a capped trace adds one more that says so)."""
MAX_WHAT_CHARS = 120
"""An entry's text is trimmed to this many characters."""
TRACE_CAP_S = 2.0
"""How long the jailed tracer traces one call before it stops and lets the call finish
untraced (sent to the jail as the runner spec's trace_cap_s)."""


def _text(value: Any, limit: int) -> str:
    text = "".join(ch if ch.isprintable() else " " for ch in str(value)[: limit * 2])
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and number >= 0 else None


def shape_breakdown(report: Any, wall_ms: float) -> list[dict[str, Any]]:
    """Entries {"what": "L12: y = np.exp(x - m)", "ms", "share", "calls"}, largest first, from
    the jail's `report` ({"total_ms", "capped", "entry", "lines": [{"file", "line", "text",
    "ms", "calls"}]}). `wall_ms`: the traced call as the harness timed it (thaw to answer),
    which bounds every time in it: no entry and no total may exceed it. Shares are of the
    traced call's total (self times: they add up to at most 1). Malformed lines are left out;
    a malformed report gives []."""
    if not isinstance(report, dict) or not math.isfinite(wall_ms) or wall_ms <= 0:
        return []
    total = _number(report.get("total_ms"))
    total = wall_ms if total is None or total <= 0 else min(total, wall_ms)
    lines = report.get("lines")
    if not isinstance(lines, list):
        return []
    entry = report.get("entry") if isinstance(report.get("entry"), str) else ""
    entries: list[dict[str, Any]] = []
    for item in lines[: MAX_ENTRIES * 4]:
        if not isinstance(item, dict):
            continue
        ms = _number(item.get("ms"))
        line = item.get("line")
        if ms is None or isinstance(line, bool) or not isinstance(line, int) or line < 0:
            continue
        calls = item.get("calls")
        calls = calls if isinstance(calls, int) and not isinstance(calls, bool) else 0
        where = str(item.get("file") or "")
        prefix = f"L{line}" if where in ("", entry) else f"{_text(where, 40)}:L{line}"
        what = _text(f"{prefix}: {_text(item.get('text') or '', MAX_WHAT_CHARS)}", MAX_WHAT_CHARS)
        entries.append({"what": what, "ms": min(ms, total), "calls": max(0, min(calls, 10**9))})
    entries.sort(key=lambda e: -e["ms"])
    entries = entries[:MAX_ENTRIES]
    # Self times of one call add up to at most its total; a report that claims more is scaled
    # down to it, so the shares stay fractions of one call whatever the jail wrote.
    claimed = sum(e["ms"] for e in entries)
    scale = total / claimed if claimed > total else 1.0
    for e in entries:
        e["ms"] *= scale
        e["share"] = min(1.0, e["ms"] / total)
    if report.get("capped") is True:
        rest = max(0.0, total - sum(e["ms"] for e in entries))
        entries.append(
            {
                "what": f"(tracing stopped after {TRACE_CAP_S:g} s; the rest of the call is not "
                "broken down)",
                "ms": rest,
                "share": min(1.0, rest / total),
                "calls": 0,
            }
        )
    return entries
