"""Kernel database stores and the factory that picks one from a URL."""

from __future__ import annotations

from accelopt_mcp.store.base import KernelStore, StoreError
from accelopt_mcp.store.url import STORE_ENV, default_sqlite_path, describe_store_url


def open_store(url: str | None = None, *, supabase_key: str | None = None) -> KernelStore:
    """Open the store a URL names (default: $ACCELOPT_STORE, else the per-user SQLite file).

    A remote store that cannot be reached raises StoreUnavailableError with set-up steps; it
    never falls back to SQLite.
    """
    kind, location = describe_store_url(url)
    if kind == "sqlite":
        from accelopt_mcp.store.sqlite import SqliteStore

        return SqliteStore(location)
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
