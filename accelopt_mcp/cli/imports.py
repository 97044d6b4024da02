"""`accelopt import nkibench|flashinfer DIR`: load a benchmark directory into the database."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from accelopt_mcp.cli.common import StoreOption, console, opened_store

app = typer.Typer(help="Load benchmark directories into the kernel database.", no_args_is_help=True)


@app.command()
def nkibench(
    directory: Annotated[Path, typer.Argument(help="Folder with summary.json (NKIBench layout).")],
    store: StoreOption = None,
) -> None:
    """Import every case of an NKIBench-layout directory: definitions, workloads, baselines."""
    from accelopt_mcp.profiling import import_nkibench

    with opened_store(store) as db:
        counts = import_nkibench(db, directory)
    console.print(f"imported from {directory}: {counts.model_dump(exclude_defaults=True)}")


@app.command()
def flashinfer(
    directory: Annotated[Path, typer.Argument(help="A FlashInfer-Trace directory.")],
    store: StoreOption = None,
) -> None:
    """Import a FlashInfer-Trace directory (definitions, workloads, solutions, traces)."""
    from accelopt_mcp.traceset import import_traceset

    with opened_store(store) as db:
        counts = import_traceset(db, directory)
    console.print(f"imported from {directory}: {counts.model_dump(exclude_defaults=True)}")
