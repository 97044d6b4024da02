"""Secrets are scrubbed from error text before it is stored or raised."""

from __future__ import annotations

from accelopt_mcp.llm.redaction import REDACTED, redact, short_error


def test_known_secrets_and_key_shapes_are_scrubbed() -> None:
    text = (
        "GET https://bob:hunter2@llm.example/v1 -> 401; Authorization: Bearer tok.abc; "
        'api_key="plain-secret"; echoed sk-live0123456789 and my-own-token-42'
    )
    cleaned = redact(text, ["my-own-token-42"])
    for secret in ("hunter2", "tok.abc", "plain-secret", "sk-live0123456789", "my-own-token-42"):
        assert secret not in cleaned
    assert cleaned.count(REDACTED) == 5
    assert "llm.example/v1 -> 401" in cleaned


def test_short_error_is_one_bounded_line() -> None:
    text = "line one\nline two " + "x" * 2000
    short = short_error(text)
    assert "\n" not in short and len(short) == 500 and short.endswith("...")
