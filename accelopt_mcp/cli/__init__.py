"""The `accelopt` command. Each command group lives in a module of its own."""

from __future__ import annotations

from typing import Annotated

import typer

from accelopt_mcp import __version__

app = typer.Typer(
    rich_markup_mode=None,
    name="accelopt",
    help="Optimize accelerator kernels the AccelOpt way; browse the kernel database.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"accelopt {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Optimize accelerator kernels the AccelOpt way; browse the kernel database."""


def _register() -> None:
    # Imported here so that each group module can import `app` helpers without cycles.
    from accelopt_mcp.cli import compare, db, imports, profile

    app.add_typer(db.app, name="db")
    app.add_typer(imports.app, name="import")
    app.command()(profile.profile)
    app.command()(compare.compare)
    app.command()(profile.backends)

    from accelopt_mcp.cli import memory, optimize, runs, suite, view

    app.command()(optimize.optimize)
    app.command()(optimize.resume)
    app.add_typer(runs.app, name="runs")
    app.add_typer(memory.app, name="memory")
    app.add_typer(suite.app, name="suite")
    app.command()(view.view)


def main() -> None:
    import sys

    from accelopt_mcp.cli.common import show_store_notices
    from accelopt_mcp.isolation.cgroups import remove_stale_groups
    from accelopt_mcp.store.url import password_on_command_line

    # Said, not refused: the password is already in the process list by the time we run.
    warning = password_on_command_line(sys.argv[1:])
    if warning:
        typer.echo(warning, err=True)

    # What a killed run left (frozen jails, their cgroups), should its reaper be gone too.
    remove_stale_groups()
    show_store_notices()
    _register()
    app()
