"""Secrets are masked, by one set of rules, in every text that is shown, stored or raised
(accelopt_mcp.redaction): LLM error bodies, store URLs and DSNs, database driver messages."""

from __future__ import annotations

import pytest

from accelopt_mcp.llm.errors import short_error
from accelopt_mcp.redaction import REDACTED, redact, redacted_url

# --------------------------------------------------------------------------- from the LLM client


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


# --------------------------------------------------------------------------- from store URLs


@pytest.mark.parametrize(
    "url", ["mysql://root:hunter22@db/k", "odbc:driver password=hunter22", "redis://:hunter22@h/0"]
)
def test_an_unknown_store_url_is_shown_without_its_secret(url: str) -> None:
    assert "hunter22" not in redacted_url(url)


# --------------------------------------------------------------------------- one case per rule


def test_known_secrets_are_masked_wherever_they_appear() -> None:
    assert redact("key abcd1234 echoed: xabcd1234y", ["abcd1234"]) == "key *** echoed: x***y"
    # The longer of two overlapping secrets is masked whole.
    assert redact("pw=? s3cr3t-long", ["s3cr3t", "s3cr3t-long"]) == "pw=? ***"
    # None and "" are skipped; a short secret only where it stands alone.
    assert redact("x marks xylophone; (x)", [None, "", "x"]) == "*** marks xylophone; (***)"


def test_secret_named_environment_values_are_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_SERVICE_TOKEN", "env-secret-value-42")
    monkeypatch.setenv("PGPASSWORD", "pg-env-pass")
    monkeypatch.setenv("ACCELOPT_OPTIONS", "not-a-secret-x")  # not a secret-looking name
    monkeypatch.setenv("EXAMPLE_API_KEY", "short")  # too short to be a key
    text = "got env-secret-value-42, pg-env-pass, not-a-secret-x and short"
    assert redact(text) == "got ***, ***, not-a-secret-x and short"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("postgresql://u:pw@h:5432/db", "postgresql://***@h:5432/db"),
        ("redis://:pw@h/0", "redis://***@h/0"),  # empty user
        ("https://u:@h/x", "https://***@h/x"),  # empty password
        ("https://ghp_tokenonly@github.com/o/r", "https://***@github.com/o/r"),  # bare token
        ("postgresql://u:pa/ss@h/db", "postgresql://***@h/db"),  # '/' in the password
        ("postgresql://u:p@ss@h/db", "postgresql://***@h/db"),  # '@' in the password
        ("see 'https://a:b@h' and https://h/path", "see 'https://***@h' and https://h/path"),
        ("https://h:8080/v1 and mail me@example.com", "https://h:8080/v1 and mail me@example.com"),
    ],
)
def test_url_user_info_is_masked(text: str, shown: str) -> None:
    assert redact(text) == shown


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("host=h user=u password=pw dbname=db", "host=h user=u password=*** dbname=db"),
        ("host=h password = 'with space' port=1", "host=h password = '***' port=1"),
        ("sslpassword=abc passwd=def", "sslpassword=*** passwd=***"),
        ("https://h/x?apikey=abc&k=1", "https://h/x?apikey=***"),
        ("access_token=abc; client_secret=xyz", "access_token=*** client_secret=***"),
        ("--api-key=abc --token=def", "--api-key=*** --token=***"),
        (
            '{"token": "abc", "password": "p\\"w", "n": 1}',
            '{"token": "***", "password": "***", "n": 1}',
        ),
        ("{'api_key': 'abc'}", "{'api_key': '***'}"),
        ("apikey: abc\nX-Api-Key: def", "apikey: ***\nX-Api-Key: ***"),
        # Not secrets: these names only look alike.
        ("max_tokens=100 monkey=1 tokens_in=5", "max_tokens=100 monkey=1 tokens_in=5"),
        (
            "Key (hash)=(abc) already exists; the key: required",
            "Key (hash)=(abc) already exists; the key: required",
        ),
    ],
)
def test_name_value_secrets_are_masked(text: str, shown: str) -> None:
    assert redact(text) == shown


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("Authorization: Bearer tok.abc", "Authorization: Bearer ***"),
        ("authorization: basic Ym9iOnB3", "authorization: basic ***"),
        ("{'Authorization': 'Token abc'}", "{'Authorization': 'Token ***'}"),
        ("Proxy-Authorization: rawsecret", "Proxy-Authorization: ***"),
        ("sent bearer abc123, got 401", "sent bearer ***, got 401"),
    ],
)
def test_authorization_credentials_are_masked(text: str, shown: str) -> None:
    assert redact(text) == shown


JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJyb2xlIjoic2VydmljZV9yb2xlIn0."
    "dGhpcy1pcy1hLXNpZ25hdHVyZQ"
)


@pytest.mark.parametrize(
    "token",
    [
        "sk-proj-abcdef0123456789",
        "sk-ant-api03-abcdef",
        "sk-****abcd1234",  # OpenAI's own masked echo
        JWT,  # a Supabase anon / service_role key
        "sb_secret_0123456789abcdef",
        "sb_publishable_0123456789abcdef",
        "ghp_" + "a" * 36,
        "github_pat_" + "B" * 30,
        "hf_" + "c" * 34,
        "AKIAABCDEFGHIJKLMNOP",
        "xoxb-1234567890-abcdef",
        "AIza" + "d" * 35,
        "gsk_" + "e" * 40,
    ],
)
def test_key_shaped_strings_are_masked(token: str) -> None:
    assert redact(f"error: bad key {token} (401)") == "error: bad key *** (401)"


def test_pem_private_keys_are_masked() -> None:
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nIBAAK\n-----END RSA PRIVATE KEY-----"
    assert redact(f"loaded {pem} ok") == "loaded *** ok"
    assert redact("cut -----BEGIN PRIVATE KEY-----\nMIIEow") == "cut ***"


def test_text_without_secrets_is_unchanged() -> None:
    text = "HTTP 500: model overloaded at https://api.example.com/v1 (retry after 2 s)"
    assert redact(text) == text
    assert redacted_url("https://abc.supabase.co") == "https://abc.supabase.co"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:pw@[bad", "postgresql://***@[bad"),
        ("postgresql://u:p?w@h/db?sslmode=require", "postgresql://***@h/db"),
        ("https://h/x?apikey=abc#access_token=def", "https://h/x"),
        ("  https://u:pw@h:443/rest/v1  ", "https://***@h:443/rest/v1"),
        ("host=h password=pw", "host=h password=***"),  # a key=value DSN keeps its pairs
        (f"https://{JWT}@h", "https://***@h"),
    ],
)
def test_redacted_url_drops_user_info_query_and_fragment(url: str, shown: str) -> None:
    assert redacted_url(url) == shown


def test_redacted_url_masks_known_secrets() -> None:
    assert redacted_url("https://h/k/abcd-secret-1/x", ["abcd-secret-1"]) == "https://h/k/***/x"


def test_mask_secrets_keeps_code_readable_and_masks_what_looks_like_a_secret() -> None:
    from accelopt_mcp.redaction import mask_secrets

    code = (
        "order = sorted(rows, key=lambda t: t[0])\n"
        "token = tokens[i]\n"
        'cfg = {"key": value}\n'
        "url = 'postgresql://app:hunter22@db:5432/x'\n"
        "client = OpenAI(api_key='sk-live-abcdefghijklmnop')\n"
        "headers = {'Authorization': 'Bearer abc.def.ghi'}\n"
    )
    masked = mask_secrets(code, ["my-known-secret-value"])
    assert "key=lambda t: t[0]" in masked
    assert "token = tokens[i]" in masked
    assert '{"key": value}' in masked
    assert "hunter22" not in masked
    assert "sk-live-abcdefghijklmnop" not in masked
    assert "abc.def.ghi" not in masked
    assert mask_secrets("say my-known-secret-value", ["my-known-secret-value"]) == "say ***"
