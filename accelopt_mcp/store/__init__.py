"""Kernel database stores and the factory that picks one from a URL."""

from __future__ import annotations

import logging
from pathlib import Path

from accelopt_mcp.store.base import KernelStore, StoreError
from accelopt_mcp.store.url import (
    STORE_ENV,
    default_sqlite_path,
    describe_store_url,
    new_sqlite_notice,
)

log = logging.getLogger(__name__)
"""Where open_store says that it created a new SQLite file: the server's log shows it, and the
`accelopt` command prints it on stderr (cli/common.py show_store_notices, through cli/output.py)."""


def open_store(url: str | None = None, *, supabase_key: str | None = None) -> KernelStore:
    """Open the store a URL names (default: $ACCELOPT_STORE, else the per-user SQLite file).

    A remote store that cannot be reached raises StoreUnavailableError with set-up steps; it
    never falls back to SQLite. Opening a SQLite path where no file is creates one; that is
    logged once (a warning on this module's logger) with the absolute path, since a mistyped
    path otherwise silently gives an empty database.
    """
    kind, location = describe_store_url(url)
    if kind == "sqlite":
        from accelopt_mcp.store.sqlite import SqliteStore

        creating = location != ":memory:" and not Path(location).expanduser().exists()
        store = SqliteStore(location)
        if creating:
            log.warning(new_sqlite_notice(url, location))
        return store
    if kind == "postgres":
        from accelopt_mcp.store.postgres import PostgresStore

        return PostgresStore(location)
    from accelopt_mcp.store.supabase import SupabaseStore

    return SupabaseStore(location, key=supabase_key)


__all__ = [
    "STORE_ENV",
    "KernelStore",
    "StoreError",
    "default_sqlite_path",
    "describe_store_url",
    "open_store",
]
