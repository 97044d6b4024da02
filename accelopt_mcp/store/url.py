"""Store URLs: which kind of database a URL names, and the default SQLite path."""

from __future__ import annotations

import os
import re
from pathlib import Path

from accelopt_mcp.redaction import redacted_url
from accelopt_mcp.store.base import StoreError

STORE_ENV = "ACCELOPT_STORE"


def default_sqlite_path() -> Path:
    """Per-user default: $ACCELOPT_HOME/kernels.db, else $XDG_DATA_HOME/accelopt/kernels.db,
    else ~/.local/share/accelopt/kernels.db."""
    home = os.environ.get("ACCELOPT_HOME")
    if home:
        return Path(home).expanduser() / "kernels.db"
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "accelopt" / "kernels.db"


# A libpq key=value connection string ("host=... dbname=... password=...").
_KEY_VALUE_DSN = re.compile(r"^\s*(host|hostaddr|dbname|user|port|service)\s*=")


def describe_store_url(url: str | None) -> tuple[str, str]:
    """(kind, location) for a store URL: kind is sqlite, postgres or supabase."""
    url = url or os.environ.get(STORE_ENV) or ""
    if not url:
        return "sqlite", str(default_sqlite_path())
    if url.startswith("sqlite:///"):
        return "sqlite", url.removeprefix("sqlite:///") or str(default_sqlite_path())
    if url.startswith(("postgresql://", "postgres://")) or _KEY_VALUE_DSN.match(url):
        return "postgres", url
    if url.startswith(("http://", "https://", "supabase://")):
        return "supabase", url.replace("supabase://", "https://", 1)
    if "://" not in url and (
        url.endswith((".db", ".sqlite", ".sqlite3")) or "/" in url or url == ":memory:"
    ):
        return "sqlite", url
    raise StoreError(
        f"cannot tell which database {redacted_url(url)!r} names. Use a SQLite path (kernels.db "
        "or sqlite:///path/kernels.db), a PostgreSQL DSN (postgresql://user@host:5432/db) or a "
        "Supabase project URL (https://<project>.supabase.co, key in SUPABASE_KEY)."
    )
