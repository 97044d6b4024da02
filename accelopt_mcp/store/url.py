"""Store URLs: which kind of database a URL names, and the default SQLite path."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
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


def misencoded_userinfo(dsn: str) -> bool:
    """Whether a postgresql:// DSN's user name or password holds an '@' or a '/' that is not
    percent-encoded. libpq ends the host part at the first '/' and the password at the first
    '@', so it reads such a DSN otherwise than meant, and the host, port and database it then
    reports hold pieces of the password. An '@' in the query string (?user=me@corp) is a
    parameter's and fine."""
    if not dsn.startswith(("postgresql://", "postgres://")):
        return False
    authority, _, rest = dsn.partition("://")[2].partition("/")
    path = re.split(r"[?#]", rest, maxsplit=1)[0]
    return authority.count("@") > 1 or ("@" not in authority and "@" in path)


PASSWORD_IN_ARGUMENT = (
    "warning: a database URL on this command line holds a password, and every local user can "
    f"read a command line (ps, /proc): put the URL in ${STORE_ENV} instead, or the password in "
    "PGPASSWORD or ~/.pgpass"
)


# A libpq key=value connection string: it opens with a key= pair (words with "password =" in
# them, like a memory search's, do not), and one of its pairs is password=.
_OPENS_WITH_PAIR = re.compile(r"\s*\w+\s*=")
_PASSWORD_PAIR = re.compile(r"(^|\s)password\s*=")


def holds_password(url: str) -> bool:
    """Whether a PostgreSQL URL or key=value DSN carries a password (in its user part, its
    query string or a password= pair). Read as libpq reads it, not with urlsplit: libpq takes
    the user part up to the '@' before the first '/', so a password may hold '#' or '?'
    unencoded, which urlsplit would take for the start of a fragment or query. Read without
    psycopg: the entry points ask this before anything heavy is imported."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in ("postgresql", "postgres"):
        return bool(_OPENS_WITH_PAIR.match(url)) and _PASSWORD_PAIR.search(url) is not None
    userinfo, at, _ = rest.partition("/")[0].partition("@")
    if at and userinfo.partition(":")[2]:
        return True
    query = rest.partition("?")[2]
    return any(pair.partition("=")[0] == "password" for pair in re.split(r"[&#]", query))


def password_on_command_line(argv: Sequence[str]) -> str | None:
    """PASSWORD_IN_ARGUMENT when an argument on this command line (or what follows the first
    '=' of one, as in --store=URL) holds a password, else None. Every argument is looked at,
    not only --store's value: a parser may take an abbreviation (argparse reads --sto as
    --store), and a password anywhere on the line is in the process list all the same. What
    came from $ACCELOPT_STORE is not on the command line and is not looked at."""
    found = any(holds_password(arg) or holds_password(arg.partition("=")[2]) for arg in argv)
    return PASSWORD_IN_ARGUMENT if found else None


def store_url(url: str | None) -> str:
    """The URL a store is opened from: `url`, else $ACCELOPT_STORE, else "" (the default)."""
    return url or os.environ.get(STORE_ENV) or ""


def sqlite_url_path(url: str) -> str:
    """The path a sqlite: URL names, by SQLAlchemy's convention: the three slashes end the URL's
    (empty) host part, so sqlite:///rel/kernels.db is rel/kernels.db under the working
    directory and sqlite:////abs/kernels.db is /abs/kernels.db. sqlite:///:memory: and
    sqlite:// are an in-memory database; sqlite:/// alone is the per-user default file."""
    if url == "sqlite://":
        return ":memory:"
    if not url.startswith("sqlite:///"):
        # sqlite://host/x or sqlite:x.db: reading a path out of them would be a guess.
        raise StoreError(
            f"{redacted_url(url)!r} is not a SQLite URL: write sqlite:///relative/kernels.db "
            "(under the working directory), sqlite:////absolute/kernels.db, or just the path"
        )
    return url.removeprefix("sqlite:///") or str(default_sqlite_path())


def new_sqlite_notice(url: str | None, path: str) -> str:
    """What to say when a store is about to create the SQLite file at `path`, which does not
    exist yet: its absolute path, and for sqlite:///<relative> the way to write an absolute
    one, since a user who meant /abs/x.db but wrote sqlite:///abs/x.db gets a new empty file
    under the working directory."""
    where = Path(path).expanduser().absolute()
    text = f"creating a new SQLite database at {where} (no file there yet)"
    if store_url(url).startswith("sqlite:///") and not Path(path).expanduser().is_absolute():
        text += (
            f"; sqlite:///{path} is relative to the working directory: for /{path} write "
            f"sqlite:////{path} (four slashes)"
        )
    return text


def describe_store_url(url: str | None) -> tuple[str, str]:
    """(kind, location) for a store URL: kind is sqlite, postgres or supabase. A SQLite
    location is a path as given (relative ones are under the working directory) or
    ":memory:"."""
    url = store_url(url)
    if not url:
        return "sqlite", str(default_sqlite_path())
    if url.startswith("sqlite:"):
        return "sqlite", sqlite_url_path(url)
    if misencoded_userinfo(url):
        # Not shown, not even redacted: where the password ends is what is in doubt.
        raise StoreError(
            "the PostgreSQL DSN's user name or password holds a character that must be "
            "percent-encoded: write '@' as %40 and '/' as %2F (postgresql://user:p%40ss@host:"
            "5432/db), or leave the password out of the DSN and set PGPASSWORD"
        )
    if url.startswith(("postgresql://", "postgres://")) or _KEY_VALUE_DSN.match(url):
        return "postgres", url
    if url.startswith(("http://", "https://", "supabase://")):
        return "supabase", url.replace("supabase://", "https://", 1)
    if "://" not in url and (
        url.endswith((".db", ".sqlite", ".sqlite3")) or "/" in url or url == ":memory:"
    ):
        return "sqlite", url
    raise StoreError(
        f"cannot tell which database {redacted_url(url)!r} names. Use a SQLite path (kernels.db, "
        "sqlite:///relative/kernels.db or sqlite:////absolute/kernels.db), a PostgreSQL DSN "
        "(postgresql://user@host:5432/db) or a Supabase project URL "
        "(https://<project>.supabase.co, key in SUPABASE_KEY)."
    )
