"""Which store a URL names, and that no password in it reaches an error message (the masking
itself: tests/test_redaction.py)."""

from __future__ import annotations

import pytest

from accelopt_mcp.store.base import StoreError
from accelopt_mcp.store.url import describe_store_url


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("kernels.db", "sqlite"),
        ("sqlite:///tmp/k.db", "sqlite"),
        ("/var/lib/accelopt/k.sqlite3", "sqlite"),
        ("postgresql://u:pw@db:5432/k", "postgres"),
        ("host=db.example.com dbname=k user=u password=with/slash", "postgres"),
        ("https://abc.supabase.co", "supabase"),
        ("supabase://abc.supabase.co", "supabase"),
    ],
)
def test_each_kind_is_recognised(url: str, kind: str) -> None:
    assert describe_store_url(url)[0] == kind


@pytest.mark.parametrize(
    "url", ["mysql://root:hunter22@db/k", "odbc:driver password=hunter22", "redis://:hunter22@h/0"]
)
def test_an_unknown_url_is_refused_without_its_secret(url: str) -> None:
    with pytest.raises(StoreError, match="cannot tell which database") as raised:
        describe_store_url(url)
    assert "hunter22" not in str(raised.value)
