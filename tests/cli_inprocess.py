"""The `accelopt` command run inside the test process, through click's CliRunner: what the
console script does (accelopt_mcp.cli.main) without the 2-3 s of imports a subprocess pays.

run_accelopt() answers like subprocess.run(capture_output=True, text=True): returncode, stdout
and stderr apart, an unexpected exception's traceback on stderr (exit code 1, as Python gives).
Nothing a run changes outlives it: the environment (CliRunner sets and restores it), the
working directory, the store's `note:` handler and the signal handlers are put back. A
developer's own ACCELOPT_STORE never reaches a run unless `env` names it.

Tests of what needs a process of its own (signals, a kill and resume, the MCP stdio protocol,
the jail, the console-script entry points themselves) run the real script instead."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import traceback
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import click
import typer.main
from click.testing import CliRunner

from accelopt_mcp.cli import _register, app, output
from accelopt_mcp.cli.common import show_store_notices
from accelopt_mcp.isolation.cgroups import remove_stale_groups
from accelopt_mcp.store import STORE_ENV

_LOGGERS = ("", "accelopt_mcp", "accelopt_mcp.store")
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_command: click.Command | None = None


@dataclass(frozen=True)
class Finished:
    """One run, named as subprocess.CompletedProcess names it."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


def _accelopt() -> click.Command:
    global _command
    if _command is None:
        _register()
        _command = typer.main.get_command(app)
    return _command


@contextlib.contextmanager
def _restored(cwd: str | Path | None) -> Iterator[None]:
    """Put back what a run may change in this process."""
    handlers = {name: list(logging.getLogger(name).handlers) for name in _LOGGERS}
    levels = {name: logging.getLogger(name).level for name in _LOGGERS}
    signals = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    # rich fixes a console's width from COLUMNS when the console is made (cli/output.py makes
    # them at import, perhaps inside an earlier run's environment): unfixed for each run, so
    # that the width follows this run's COLUMNS as a fresh process would.
    consoles = (output.console, output.err_console)
    widths = [c._width for c in consoles]
    before = os.getcwd()
    try:
        for c in consoles:
            c._width = None
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        for c, width in zip(consoles, widths, strict=True):
            c._width = width
        os.chdir(before)
        for sig, handler in signals.items():
            if handler is not None:
                signal.signal(sig, handler)
        for name in _LOGGERS:
            logger = logging.getLogger(name)
            logger.handlers[:] = handlers[name]
            logger.setLevel(levels[name])


def run_accelopt(
    *args: str | Path,
    env: Mapping[str, str | None] | None = None,
    cwd: str | Path | None = None,
    input: str | None = None,
) -> Finished:
    """`accelopt ARGS` as the console script runs it, with `env` over this process's
    environment (None unsets a variable) and `cwd` as the working directory."""
    argv = tuple(map(str, args))
    overrides: dict[str, str | None] = {STORE_ENV: None, **(env or {})}
    with _restored(cwd):
        # What main() does before it hands over to the command line.
        remove_stale_groups()
        show_store_notices()
        result = CliRunner().invoke(
            _accelopt(), argv, env=overrides, input=input, prog_name="accelopt"
        )
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        assert result.exc_info is not None
        stderr += "".join(traceback.format_exception(*result.exc_info))
    return Finished(argv, result.exit_code, result.stdout, stderr)
