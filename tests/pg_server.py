"""Starts a throwaway PostgreSQL server on 127.0.0.1 for the test session.

Uses Debian's PostgreSQL binaries (`postgresql-15`, installed by .ci/run). Root may not run the
server, so as root the cluster is created and started as the `postgres` user. Set
ACCELOPT_TEST_PG_DSN to use a server you already run instead. A test that stops and restarts
a server starts one of its own (PostgresServer: halt, resume, restart), never the session's.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest


def _pg_bin() -> Path:
    for pattern in ("/usr/lib/postgresql/*/bin", "/usr/local/pgsql/bin"):
        for candidate in sorted(glob.glob(pattern), reverse=True):
            if (Path(candidate) / "initdb").exists():
                return Path(candidate)
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    raise RuntimeError(
        "PostgreSQL server binaries not found: install them with "
        "`apt-get install -y postgresql-15` (.ci/run does this), or set ACCELOPT_TEST_PG_DSN"
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PostgresServer:
    """durable: commits survive a crash (`halt("immediate")`), as on a real server; the
    session's server trades that for speed (synchronous_commit=off)."""

    def __init__(self, *, durable: bool = False) -> None:
        self.durable = durable
        self.bin = _pg_bin()
        self.root = Path(tempfile.mkdtemp(prefix="accelopt-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.as_root = os.geteuid() == 0

    def _run(self, *args: str) -> None:
        cmd = list(args)
        if self.as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)

    def start(self) -> str:
        if self.as_root:
            shutil.chown(self.root, "postgres", "postgres")
        self._run(
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
            "-E",
            "UTF8",
        )
        self.resume()
        return self.dsn

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def halt(self, mode: str = "immediate") -> None:
        """Stop the server and keep its data (`immediate`: as a crash, no client told)."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self, *, down_s: float = 0.0, mode: str = "immediate") -> None:
        """Stop the server, leave it down for `down_s` seconds, start it again."""
        self.halt(mode)
        time.sleep(down_s)
        self.resume()

    def resume(self) -> None:
        """Start the (initialised) server on its port and wait until it takes connections."""
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            f"-c synchronous_commit={'on' if self.durable else 'off'} -c full_page_writes=off "
            "-c max_connections=200"
        )
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.root / "server.log"),
            "-w",
            "start",
        )
        dsn = self.dsn
        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(dsn, connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def stop(self) -> None:
        try:
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        except subprocess.CalledProcessError:
            pass  # not running (halted by a test)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


@contextmanager
def private_server() -> Iterator[PostgresServer]:
    """A durable server of the caller's own, to stop and restart at will (never the session's,
    which other tests share); removed afterwards. Needs the server binaries even where
    ACCELOPT_TEST_PG_DSN names a server (pytest.skip there if they are missing)."""
    try:
        server = PostgresServer(durable=True)
    except RuntimeError as exc:
        if os.environ.get("ACCELOPT_TEST_PG_DSN"):
            pytest.skip(f"restart tests need a server of their own: {exc}")
        raise
    server.start()
    try:
        yield server
    finally:
        server.stop()


def create_database(admin_dsn: str, name: str) -> str:
    """A fresh, empty database on the server; returns its DSN."""
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return admin_dsn.rsplit("/", 1)[0] + f"/{name}"
