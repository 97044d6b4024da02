"""Which database an MCP client may have the server check, and with which secrets.

`check_database(url=...)` takes a URL from the client, which may be an agent reading text an
attacker wrote. The server's own database is checked as configured. Any other is checked
without handing over what the server holds for its own: a SQLite path only under the server's
roots (it would otherwise tell whether any file on the host exists and list its tables), a
PostgreSQL DSN not at all (libpq would send PGPASSWORD or a ~/.pgpass entry to whatever
answers, a local user's listener on a loopback port or socket included: `accelopt db check`
in a terminal checks it), and a Supabase URL with $SUPABASE_KEY only at the very origin
(scheme, host and port) of $SUPABASE_URL or of the server's own database: anyone can open a
project under *.supabase.co, and any local user can listen on a loopback port. Elsewhere the
check runs without a key and says so.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

from accelopt_mcp.mcp_tools.roots import PathRefused, Roots
from accelopt_mcp.store.base import StoreError
from accelopt_mcp.store.detect import SUPABASE_URL_ENV, StoreCheck, check_store
from accelopt_mcp.store.url import describe_store_url


def check_database_url(url: str, own_url: str | None, roots: Roots) -> StoreCheck:
    """check_store for a URL a client gave: see the module docstring. Raises ValueError (one
    line, what to do) for a SQLite path outside the roots or a PostgreSQL server elsewhere."""
    if url == own_url:
        return check_store(own_url)
    try:
        kind, location = describe_store_url(url)
    except StoreError:
        return check_store(url)  # a malformed URL: reported as such, nothing is opened
    if kind == "sqlite":
        path = Path(location).expanduser()
        if not roots.contains(path.resolve(strict=False)):
            raise PathRefused(
                f"url: the SQLite file {location!r} is outside the server's roots "
                f"({roots.describe()}); check it with `accelopt db check PATH` in a terminal"
            )
        return check_store(str(path))
    if kind == "postgres":
        raise ValueError(
            "url: the server checks no PostgreSQL database but its own, so that its PGPASSWORD "
            "goes to no other server; check it with `accelopt db check URL` in a terminal, or "
            "start the server with --store URL"
        )
    if _key_belongs_at(location, own_url):
        return check_store(location)
    check = check_store(location, key="")
    host = urlsplit(location).hostname or location
    return check.model_copy(
        update={
            "next_steps": [
                f"the server sends SUPABASE_KEY only to {SUPABASE_URL_ENV} or its own database, "
                f"and {host} is neither: set {SUPABASE_URL_ENV} to this URL where the server "
                "starts to check its key",
                *check.next_steps,
            ]
        }
    )


def _origin(url: str) -> tuple[str, str, int | None] | None:
    """(scheme, host, port) of an http(s) URL, the port made explicit; None when it has none."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    return parts.scheme, parts.hostname.lower(), port


def _key_belongs_at(url: str, own_url: str | None) -> bool:
    """Whether `url` is at the origin the key was given for: $SUPABASE_URL's, or the server's
    own database's."""
    origin = _origin(url)
    trusted = [own_url or "", os.environ.get(SUPABASE_URL_ENV, "")]
    return origin is not None and any(_origin(u) == origin for u in trusted if u)
