"""A --store URL with a password on the command line is readable by every local user (ps,
/proc/PID/cmdline): `accelopt` and `accelopt-mcp` say so in one line, without the password,
and point to $ACCELOPT_STORE; the same URL from the environment draws no warning. The
commands run as real subprocesses against a port nothing listens on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from accelopt_mcp.store.url import PASSWORD_IN_ARGUMENT, holds_password, password_on_command_line

SECRET = "hunter2-not-for-ps"
URL = f"postgresql://me:{SECRET}@127.0.0.1:9/kernels"


@pytest.mark.parametrize(
    ("url", "held"),
    [
        (URL, True),
        (f"postgres://me:{SECRET}@db.example/kernels", True),
        (f"postgresql://me@127.0.0.1/kernels?password={SECRET}", True),
        (f"host=127.0.0.1 dbname=kernels password={SECRET}", True),
        (f"password={SECRET} host=127.0.0.1", True),
        ("postgresql://me@127.0.0.1:5432/kernels", False),
        ("postgresql://me@127.0.0.1/kernels?sslmode=require", False),
        ("host=127.0.0.1 dbname=kernels user=me", False),
        ("sqlite:////tmp/kernels.db", False),
        ("/home/me/kernels.db", False),
        ("https://abcd.supabase.co", False),
        ("postgresql://me:@127.0.0.1/kernels", False),  # an empty password is none
        (f"host=db password='{SECRET} with spaces'", True),
        # As libpq reads them (a review found each missed): '#' and '?' unencoded in the
        # password, a backslash escape and a quote inside a plain value.
        ("postgresql://me:pa#ss@db/kernels", True),
        ("postgresql://me:pa?ss@db/kernels", True),
        ("host=db password=a\\ b", True),
        ("host=db password=it's", True),
        ("postgresql://me@db/kernels/x@y", False),  # an '@' past the host is no password
        ("how to keep a password = out of logs", False),  # words, not a connection string
    ],
)
def test_which_urls_hold_a_password(url: str, held: bool) -> None:
    assert holds_password(url) is held


def test_any_argument_holding_a_password_counts() -> None:
    assert password_on_command_line(["runs", "list", "--store", URL]) == PASSWORD_IN_ARGUMENT
    assert password_on_command_line(["runs", "list", f"--store={URL}"]) == PASSWORD_IN_ARGUMENT
    # argparse takes abbreviations (--sto is --store): every argument is looked at.
    assert password_on_command_line(["--sto", URL]) == PASSWORD_IN_ARGUMENT
    assert password_on_command_line([f"--sto={URL}"]) == PASSWORD_IN_ARGUMENT
    assert password_on_command_line([URL.replace("postgresql", "POSTGRESQL")]) is not None
    assert password_on_command_line(["runs", "list", "--store"]) is None  # no value given
    assert password_on_command_line(["--store", "/tmp/kernels.db"]) is None
    assert password_on_command_line(["--store", "postgresql://me@127.0.0.1/k"]) is None
    assert SECRET not in PASSWORD_IN_ARGUMENT


def _run(
    argv: list[str], tmp_path: Path, store_env: str | None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ACCELOPT_STORE"}
    env["ACCELOPT_HOME"] = str(tmp_path / "home")
    if store_env is not None:
        env["ACCELOPT_STORE"] = store_env
    return subprocess.run(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )


@pytest.mark.parametrize(
    "command",
    [["accelopt", "runs", "list"], ["accelopt", "view", "--no-browser"], ["accelopt-mcp"]],
)
def test_the_entry_points_warn_once_without_the_password(
    command: list[str], tmp_path: Path
) -> None:
    argv = [str(Path(sys.executable).parent / command[0]), *command[1:]]
    given = _run([*argv, "--store", URL], tmp_path, None)
    assert given.stderr.count(PASSWORD_IN_ARGUMENT) == 1, given.stderr
    assert SECRET not in given.stderr + given.stdout
    if command[0] == "accelopt-mcp":
        # argparse's abbreviation of --store is the same option, and warned of alike.
        short = _run([*argv, "--sto", URL], tmp_path, None)
        assert short.stderr.count(PASSWORD_IN_ARGUMENT) == 1, short.stderr
    # The warning is not the outcome: the unreachable store still fails `accelopt`.
    if command[0] == "accelopt":
        assert given.returncode != 0 and "not reachable" in given.stderr, given.stderr
    from_env = _run(argv, tmp_path, URL)
    assert PASSWORD_IN_ARGUMENT not in from_env.stderr, from_env.stderr
    assert SECRET not in from_env.stderr + from_env.stdout
