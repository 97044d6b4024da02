"""Which database an MCP client may have the server check, and with which secrets.

`check_database(url=...)` takes a URL from the client, which may be an agent reading text an
attacker wrote. The server's own database is checked as configured. Any other is checked
without handing over what the server holds for its own: a SQLite path only under the server's
roots (it would otherwise tell whether any file on the host exists and list its tables), a
PostgreSQL DSN only on this host (libpq would send PGPASSWORD to whatever host the DSN names),
and a Supabase URL with $SUPABASE_KEY only where that key belongs (a Supabase project's own
domain, $SUPABASE_URL or the server's own database): elsewhere, this host included (any local
user can listen on a loopback port), the check runs without a key and says so.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from urllib.parse import urlsplit

import psycopg.conninfo

from accelopt_mcp.mcp_tools.roots import PathRefused, Roots
from accelopt_mcp.store.base import StoreError
from accelopt_mcp.store.detect import SUPABASE_URL_ENV, StoreCheck, check_store
from accelopt_mcp.store.url import describe_store_url

SUPABASE_DOMAINS = (".supabase.co", ".supabase.in")


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
        if not _postgres_is_local(location):
            raise ValueError(
                "url: the server checks a PostgreSQL database other than its own only on this "
                "host (localhost, 127.0.0.1, ::1 or a unix socket), so that its PGPASSWORD "
                "goes to no other server; check it with `accelopt db check URL` in a terminal"
            )
        return check_store(location)
    if _key_belongs_at(location, own_url):
        return check_store(location)
    check = check_store(location, key="")
    host = urlsplit(location).hostname or location
    return check.model_copy(
        update={
            "next_steps": [
                f"the server sends SUPABASE_KEY only to a Supabase project's own domain "
                f"(*.supabase.co) or {SUPABASE_URL_ENV}, and {host} is neither: set "
                f"{SUPABASE_URL_ENV} to this URL where the server starts to check its key",
                *check.next_steps,
            ]
        }
    )


def _is_loopback(host: str) -> bool:
    if host.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _postgres_is_local(dsn: str) -> bool:
    """Every host the DSN names is this one (none named: the local unix socket)."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return False
    hosts = [h for h in str(params.get("host") or "").split(",") if h]
    if params.get("hostaddr"):
        hosts += str(params["hostaddr"]).split(",")
    return all(h.startswith("/") or _is_loopback(h) for h in hosts)


def _key_belongs_at(url: str, own_url: str | None) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    if not host:
        return False
    if host.endswith(SUPABASE_DOMAINS):
        return True
    trusted = [own_url or "", os.environ.get(SUPABASE_URL_ENV, "")]
    return any((urlsplit(u).hostname or "").lower() == host for u in trusted if u)
