"""The `accelopt` command. Each command group lives in a module of its own."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="accelopt",
    help="Optimize accelerator kernels the AccelOpt way; browse the kernel database.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    # Imported here so that each group module can import `app` helpers without cycles.
    from accelopt_mcp.cli import compare, db, imports, profile

    app.add_typer(db.app, name="db")
    app.add_typer(imports.app, name="import")
    app.command()(profile.profile)
    app.command()(compare.compare)
    app.command()(profile.backends)

    from accelopt_mcp.cli import memory, optimize, runs

    app.command()(optimize.optimize)
    app.command()(optimize.resume)
    app.add_typer(runs.app, name="runs")
    app.add_typer(memory.app, name="memory")


def main() -> None:
    _register()
    app()
