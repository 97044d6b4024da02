"""`accelopt db ...`: initialise, check, inspect, export and import the kernel database."""

from __future__ import annotations

import typer

app = typer.Typer(
    help="The kernel database: init, check, stats, export, import.", no_args_is_help=True
)
