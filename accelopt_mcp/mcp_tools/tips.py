"""Tips that results repeat (how to declare a roofline, in the log of every profile of a task
without one): each is shown in full once per client session, and as a short reminder after
that. An agent profiling twenty candidates of such a task would otherwise read the same 600
characters twenty times, in its context each time.

The state lives in the server's lifespan state (ServerState.tips), keyed by the client's
session: a second client of the same server still gets each tip once."""

from __future__ import annotations

import json
import threading
import weakref
from dataclasses import dataclass
from typing import Any

from accelopt_mcp.backends.roofline import HOW_TO_DECLARE


@dataclass(frozen=True)
class Tip:
    key: str
    text: str
    """The full tip, as results hold it."""
    short: str
    """What stands in its place once the session has been shown it."""


TIPS: tuple[Tip, ...] = (
    Tip(
        key="declare a roofline",
        text=HOW_TO_DECLARE,
        short="add a roofline to the task for percent of peak (how: in this session's first "
        "result that said so)",
    ),
)


def _in_json(text: str) -> str:
    """`text` as it reads inside a JSON string (the results are compact JSON)."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


class TipsShown:
    """Which tips each session has been shown."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_session: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()
        self._unkeyed: set[str] = set()
        """For a call without a session (a direct call_tool): one shared set."""

    def _shown(self, session: Any) -> set[str]:
        if session is None:
            return self._unkeyed
        try:
            return self._by_session.setdefault(session, set())
        except TypeError:  # a session that cannot be weakly referenced
            return self._unkeyed

    def once(self, session: Any, text: str) -> str:
        """`text` (a result's JSON) with every tip after its first showing in this session
        replaced by its short form: the first occurrence of a tip not yet shown stays whole."""
        with self._lock:
            for tip in TIPS:
                full = _in_json(tip.text)
                if full not in text:
                    continue
                short = _in_json(tip.short)
                shown = self._shown(session)
                if tip.key in shown:
                    text = text.replace(full, short)
                    continue
                head, _, tail = text.partition(full)
                text = head + full + tail.replace(full, short)
                shown.add(tip.key)
        return text
