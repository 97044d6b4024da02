"""Mask secrets in text that is about to be shown, logged, stored or raised.

Every message that may carry a secret goes through here: servers echo keys back in error
bodies (OpenAI shows a masked one, some proxies the whole header), database drivers repeat
connection strings, and a store URL given by the user may hold a password. Two functions:

- `redact(text, secrets=())`: the text with every secret replaced by `REDACTED`;
- `redacted_url(url)`: a URL (or libpq key=value DSN) fit to show as a location: the same
  masking, and without its query string and fragment;
- `mask_secrets(text, secrets=())`: for code and prose that must stay readable (the stored
  prompts and replies of LLM calls): known secrets and secret-shaped strings only. The
  `name=value` and `"name": value` rules are left out: in code they match ordinary lines
  (`key=lambda t: t[0]`, `token = tokens[i]`) and would mask them.

What is masked (each rule is one entry of `_RULES`, or the known-secret step):

- known secrets: the values passed in `secrets` (a short one, under 4 characters, only where
  it stands alone, so that a one-letter key does not mangle the text), and the values of
  environment variables whose names end in KEY, TOKEN, SECRET, PASSWORD, PASSWD, PASSPHRASE,
  CREDENTIAL(S) or COOKIE (8 characters or more);
- the user-info part of a URL, `scheme://user:password@` and `scheme://:password@` as well as a
  bare `scheme://token@`;
- `name=value` secrets (libpq DSNs, query strings): password, passwd, passphrase, secret, key,
  token, api_key/apikey/api-key and compounds such as sslpassword, access_token or
  client_secret, the value quoted or not; and the same names as quoted keys before a colon
  (`"token": "..."` in JSON or a dict repr), and `apikey: ...` / `x-api-key: ...` headers;
- `Authorization: <scheme> <credentials>` (Bearer, Basic, Token, Digest, Negotiate or none)
  and `Bearer <token>` anywhere;
- strings shaped like a key: OpenAI/Anthropic `sk-...`, JSON Web Tokens (Supabase's anon and
  service_role keys), Supabase `sb_secret_`/`sb_publishable_` keys, GitHub, Hugging Face,
  AWS access key ids, Slack, Google and Groq keys, and PEM private key blocks.

This module imports nothing of the project (it is a foundation, usable from every layer).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable

REDACTED = "***"

# A known secret shorter than this is masked only where it is not part of a longer word.
_SHORT_SECRET = 4
# An environment value shorter than this is not treated as a secret ("1", "true", "none").
_MIN_ENV_SECRET = 8
_SECRET_ENV_NAME = re.compile(
    r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIALS?|COOKIE)$", re.IGNORECASE
)

# The names of secrets in name=value pairs: password, api_key, sslpassword, access_token...
_SECRET_NAME = (
    r"(?:[A-Za-z0-9]+[_-])*(?:ssl)?"
    r"(?:password|passwd|passphrase|secret|api[_-]?key|apikey|key|token)"
)
# A value: quoted (with backslash escapes), or a run of characters.
_QUOTED = r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*\""""
_UNQUOTED_ANY = r"\S+"  # after `=`: up to the next whitespace, as libpq reads it
_UNQUOTED_FIELD = r"""[^\s'",}]+"""  # after `:` in JSON, a dict or a header

Rule = tuple[re.Pattern[str], Callable[[re.Match[str]], str]]


def _keep_prefix(match: re.Match[str]) -> str:
    """Group `keep` stays; the rest of the match (the secret) becomes REDACTED, inside the
    same quotes when it was quoted."""
    value = match.group("value")
    quote = value[0] if len(value) > 1 and value[0] in "'\"" and value[-1] == value[0] else ""
    return match.group("keep") + quote + REDACTED + quote


def _whole(match: re.Match[str]) -> str:
    return REDACTED


_RULES: tuple[Rule, ...] = (
    # PEM private keys, before anything else can cut them up.
    (
        re.compile(
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)",
            re.DOTALL,
        ),
        _whole,
    ),
    # URL user-info: scheme://user:password@host, scheme://:password@host, scheme://token@host.
    # The password may hold '/', '?', '#', ':' and '@' (the last '@' of the run ends it).
    (
        re.compile(
            r"""(?i)(?P<keep>\b[a-z][a-z0-9+.\-]*://)"""
            r"""(?P<value>[^\s/?#@:'"<>]*:[^\s'"<>]*|[^\s/?#@:'"<>]+)(?=@)"""
        ),
        _keep_prefix,
    ),
    # Authorization: <scheme> <credentials>, in a header, a dict or a JSON body.
    (
        re.compile(
            r"""(?i)(?P<keep>\b(?:proxy-)?authorization['"]?\s*[:=]\s*['"]?"""
            r"""(?:(?:bearer|basic|token|digest|negotiate)\s+)?)"""
            rf"(?P<value>{_UNQUOTED_FIELD})"
        ),
        _keep_prefix,
    ),
    # Bearer <token>, wherever it appears.
    (re.compile(rf"(?i)(?P<keep>bearer\s+)(?P<value>{_UNQUOTED_FIELD})"), _keep_prefix),
    # name=value: libpq key=value DSNs, query strings, command lines.
    (
        re.compile(rf"(?i)(?P<keep>\b{_SECRET_NAME}\s*=\s*)(?P<value>{_QUOTED}|{_UNQUOTED_ANY})"),
        _keep_prefix,
    ),
    # "name": value, 'name': value (JSON, a dict's repr).
    (
        re.compile(
            rf"""(?i)(?P<keep>(?P<q>['"]){_SECRET_NAME}(?P=q)\s*:\s*)"""
            rf"(?P<value>{_QUOTED}|{_UNQUOTED_FIELD})"
        ),
        _keep_prefix,
    ),
    # apikey: value, X-Api-Key: value (headers).
    (
        re.compile(
            r"(?i)(?P<keep>\b(?:x-)?api[_-]?key\s*:\s*['\"]?)"
            rf"(?P<value>{_UNQUOTED_FIELD})"
        ),
        _keep_prefix,
    ),
    # Strings shaped like keys.
    (
        re.compile(
            r"\bsk-[A-Za-z0-9_\-*]{6,}"  # OpenAI, Anthropic (also OpenAI's masked echo)
            r"|\beyJ[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"  # JWT (Supabase keys)
            r"|\bsb_(?:secret|publishable)_[A-Za-z0-9_-]{8,}"  # Supabase API keys
            r"|\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"  # GitHub
            r"|\bhf_[A-Za-z0-9]{20,}"  # Hugging Face
            r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"  # AWS access key ids
            r"|\bxox[abposr]-[A-Za-z0-9-]{10,}"  # Slack
            r"|\bAIza[0-9A-Za-z_-]{35}"  # Google
            r"|\bgsk_[A-Za-z0-9]{20,}"  # Groq
        ),
        _whole,
    ),
)


# The rules that match only what is shaped like a secret (not a `name = value` line of code):
# PEM keys, URL user-info, Authorization headers, Bearer tokens, key-shaped strings.
_SHAPE_RULES: tuple[Rule, ...] = (_RULES[0], _RULES[1], _RULES[2], _RULES[3], _RULES[-1])


def _environment_secrets() -> list[str]:
    return [
        value
        for name, value in os.environ.items()
        if _SECRET_ENV_NAME.search(name) and len(value) >= _MIN_ENV_SECRET
    ]


def _mask_known(text: str, secrets: Iterable[str | None]) -> str:
    known = {secret for secret in secrets if secret} | set(_environment_secrets())
    # The longest first, so that a secret containing another is masked whole.
    for secret in sorted(known, key=len, reverse=True):
        if len(secret) >= _SHORT_SECRET:
            text = text.replace(secret, REDACTED)
        else:
            text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(secret)}(?![A-Za-z0-9])", REDACTED, text)
    return text


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """The text with every known secret (`secrets`, and secret-named environment variables)
    and anything shaped like a password, key or token replaced by REDACTED. A None or empty
    entry in `secrets` is skipped."""
    text = _mask_known(text, secrets)
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return text


def mask_secrets(text: str, secrets: Iterable[str | None] = ()) -> str:
    """The text with every known secret (as for `redact`) and every secret-shaped string
    (keys, tokens, PEM blocks, URL passwords, Authorization values) replaced by REDACTED, and
    everything else as it was: code keeps its `key = ...` lines."""
    text = _mask_known(text, secrets)
    for pattern, replacement in _SHAPE_RULES:
        text = pattern.sub(replacement, text)
    return text


def redacted_url(url: str, secrets: Iterable[str | None] = ()) -> str:
    """A URL or DSN fit for a message: redacted, and without its query string and fragment
    (they may carry keys). A libpq key=value DSN keeps all its (redacted) pairs."""
    text = redact(url.strip(), secrets)
    if "://" in text:
        text = re.split(r"[?#]", text, maxsplit=1)[0]
    return text
