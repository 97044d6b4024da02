"""Scrub secrets out of text that is about to be logged, stored or raised.

Servers echo keys back in error bodies (OpenAI shows a masked one, some proxies the whole
header), so every error text from an API goes through here before it leaves the client.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

REDACTED = "[redacted]"
_MAX_ERROR_CHARS = 500

_PATTERNS = (
    re.compile(r"(?i)(bearer\s+)[^\s'\",}]+"),
    re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?basic\s+)[^\s'\",}]+"),
    re.compile(r"\bsk-[A-Za-z0-9_\-*]{6,}"),
    re.compile(r"(?i)(api[_-]?key['\"]?\s*[:=]\s*['\"]?)[^\s'\",}]+"),
    re.compile(r"(://)[^/\s:@]*:[^/\s@]+(?=@)"),
)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """The text with every known secret and anything shaped like a key replaced."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    for pattern in _PATTERNS:
        text = pattern.sub(
            lambda match: (match.group(1) if match.groups() else "") + REDACTED, text
        )
    return text


def short_error(text: str, secrets: Iterable[str] = ()) -> str:
    """A redacted, one-line, bounded error text for the ledger and exception messages."""
    flat = " ".join(redact(text, secrets).split())
    if len(flat) > _MAX_ERROR_CHARS:
        return flat[: _MAX_ERROR_CHARS - 3] + "..."
    return flat
