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


def test_password_without_user_and_basic_credentials_are_scrubbed() -> None:
    """A proxy's URL with only a password (`https://:pw@host`), and the Basic header httpx
    builds from a URL's user:password, echoed back in an error body."""
    text = (
        "proxy https://:hunter2pw@gw.example/v1 said 401 for Authorization: Basic "
        "Ym9iOmh1bnRlcjJwdw=="
    )
    cleaned = redact(text)
    assert "hunter2pw" not in cleaned and "Ym9iOmh1bnRlcjJwdw" not in cleaned
    assert "gw.example/v1 said 401" in cleaned
