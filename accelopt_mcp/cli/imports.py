"""`accelopt import nkibench|flashinfer DIR`: load a benchmark directory into the database."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from accelopt_mcp.cli.common import StoreOption, opened_store
from accelopt_mcp.cli.output import say
from accelopt_mcp.transfer import ImportFormat, import_directory

app = typer.Typer(
    rich_markup_mode=None,
    help="Load benchmark directories into the kernel database.",
    no_args_is_help=True,
)


def import_into_store(directory: Path, store: str | None, fmt: ImportFormat) -> None:
    """Shared by these commands and `accelopt db import` (which detects the format)."""
    with opened_store(store) as db:
        chosen, counts = import_directory(db, directory, fmt=fmt)
    say(f"imported {chosen} directory {directory}: {counts.model_dump(exclude_defaults=True)}")


@app.command()
def nkibench(
    directory: Annotated[Path, typer.Argument(help="Folder with summary.json (NKIBench layout).")],
    store: StoreOption = None,
) -> None:
    """Import every case of an NKIBench-layout directory: definitions, workloads, baselines."""
    import_into_store(directory, store, "nkibench")


@app.command()
def flashinfer(
    directory: Annotated[Path, typer.Argument(help="A FlashInfer-Trace directory.")],
    store: StoreOption = None,
) -> None:
    """Import a FlashInfer-Trace directory (definitions, workloads, solutions, traces)."""
    import_into_store(directory, store, "flashinfer-trace")
