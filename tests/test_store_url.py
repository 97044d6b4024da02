"""Which store a URL names (SQLite URLs by SQLAlchemy's convention), that no password in it
reaches an error message (the masking itself: tests/test_redaction.py), and that creating a new
SQLite file is said once, by the library's log and the `accelopt` command (in this process, as
its entry point runs it: tests/cli_inprocess.py)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from accelopt_mcp.mcp_tools.state import ServerState
from accelopt_mcp.store import open_store
from accelopt_mcp.store.base import StoreError
from accelopt_mcp.store.detect import check_store
from accelopt_mcp.store.postgres import mask_dsn
from accelopt_mcp.store.sqlite import SqliteStore
from accelopt_mcp.store.url import describe_store_url, new_sqlite_notice
from tests.cli_inprocess import Finished, run_accelopt
from tests.store.samples import make_definition


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


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:pa/ss1234@127.0.0.1:1/db",  # libpq ends the host at the '/'
        "postgresql://u:pa@ss1234@127.0.0.1:1/db",  # libpq ends the password at the first '@'
        "postgres://u:pa/ss1234@127.0.0.1:1/db?sslmode=require",
    ],
)
def test_a_password_that_needs_percent_encoding_is_refused_without_it(url: str) -> None:
    # libpq splits such a DSN elsewhere than the user meant, and the host, port and database
    # it then reports held the password (the whole DSN came back in the error, '/' case).
    with pytest.raises(StoreError, match="percent-encoded") as raised:
        describe_store_url(url)
    assert "ss1234" not in str(raised.value)
    assert "ss1234" not in mask_dsn(url)
    checked = check_store(url, timeout_s=2)
    assert checked.problem == "bad_url" and "percent-encoded" in checked.message
    assert "ss1234" not in checked.model_dump_json()
    # An '@' after the '?' is a parameter's, not the password's.
    assert describe_store_url("postgresql://db.example.com/k?user=me@corp")[0] == "postgres"


# --------------------------------------------------------------------------- SQLite URLs


@pytest.mark.parametrize(
    ("url", "location"),
    [
        # SQLAlchemy's convention: three slashes end the (empty) host part of the URL.
        ("sqlite:///relative/kernels.db", "relative/kernels.db"),
        ("sqlite:////abs/kernels.db", "/abs/kernels.db"),
        ("sqlite:///~/kernels.db", "~/kernels.db"),
        ("sqlite:///:memory:", ":memory:"),
        ("sqlite://", ":memory:"),
        ("kernels.db", "kernels.db"),
        ("~/x.db", "~/x.db"),
        ("/abs/x.db", "/abs/x.db"),
        (":memory:", ":memory:"),
    ],
)
def test_each_sqlite_form_names_one_path(url: str, location: str) -> None:
    assert describe_store_url(url) == ("sqlite", location)


@pytest.mark.parametrize("url", ["sqlite://host/kernels.db", "sqlite:kernels.db"])
def test_a_sqlite_url_with_a_host_or_no_slashes_is_refused(url: str) -> None:
    with pytest.raises(StoreError, match=r"sqlite:////absolute/kernels\.db"):
        describe_store_url(url)


def test_the_notice_for_a_relative_sqlite_url_says_how_to_write_an_absolute_one() -> None:
    relative = new_sqlite_notice("sqlite:///var/k.db", "var/k.db")
    assert relative.startswith(f"creating a new SQLite database at {Path.cwd() / 'var/k.db'} ")
    assert "for /var/k.db write sqlite:////var/k.db" in relative
    for url, path in [("sqlite:////var/k.db", "/var/k.db"), ("var/k.db", "var/k.db")]:
        assert "sqlite:////" not in new_sqlite_notice(url, path)


def test_open_store_logs_creating_a_new_file_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "new.db"
    with caplog.at_level(logging.WARNING, logger="accelopt_mcp.store"):
        open_store(str(path)).close()
        assert [r.getMessage() for r in caplog.records] == [
            f"creating a new SQLite database at {path} (no file there yet)"
        ]
        caplog.clear()
        open_store(str(path)).close()
        open_store(f"sqlite:///{path}").close()  # sqlite:/// + "/..." is the absolute form
        open_store(":memory:").close()
    assert caplog.records == []


def _accelopt(*args: str, cwd: Path) -> Finished:
    return run_accelopt(*args, env={"COLUMNS": "200"}, cwd=cwd)


def test_the_cli_opens_an_absolute_sqlite_url_from_another_directory(tmp_path: Path) -> None:
    db = tmp_path / "data" / "kernels.db"
    db.parent.mkdir()
    with SqliteStore(db) as store:
        store.upsert_definition(make_definition("stored_before"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    shown = _accelopt("db", "stats", "--store", f"sqlite:///{db}", "--json", cwd=elsewhere)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["counts"]["definitions"] == 1
    assert "creating a new" not in shown.stderr
    assert list(elsewhere.iterdir()) == []  # no relative copy of the path was created


def test_the_cli_says_once_that_it_creates_a_new_database(tmp_path: Path) -> None:
    first = _accelopt("db", "stats", "--store", "sqlite:///tmp/new.db", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    created = tmp_path / "tmp" / "new.db"
    assert created.is_file()
    (note,) = [line for line in first.stderr.splitlines() if "creating a new" in line]
    assert note == (
        f"note: creating a new SQLite database at {created} (no file there yet); "
        "sqlite:///tmp/new.db is relative to the working directory: for /tmp/new.db write "
        "sqlite:////tmp/new.db (four slashes)"
    )
    again = _accelopt("db", "stats", "--store", "sqlite:///tmp/new.db", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "creating a new" not in again.stderr

    plain = _accelopt("db", "stats", "--store", "plain.db", cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert f"note: creating a new SQLite database at {tmp_path / 'plain.db'}" in plain.stderr
    assert "four slashes" not in plain.stderr


def test_the_mcp_server_logs_creating_a_new_database(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = "sqlite:///server/new.db"
    monkeypatch.chdir(tmp_path)
    state = ServerState(url)
    try:
        with caplog.at_level(logging.WARNING):
            state.store()
            state.store()  # opened once: said once
    finally:
        state.close()
    notes = [r.getMessage() for r in caplog.records if "creating a new" in r.getMessage()]
    assert notes == [
        f"creating a new SQLite database at {tmp_path / 'server/new.db'} (no file there yet); "
        "sqlite:///server/new.db is relative to the working directory: for /server/new.db "
        "write sqlite:////server/new.db (four slashes)"
    ]
