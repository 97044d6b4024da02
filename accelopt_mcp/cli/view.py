"""`accelopt view`: a local web viewer of the kernel database (accelopt_mcp/viewer)."""

from __future__ import annotations

from typing import Annotated

import typer

from accelopt_mcp.cli.common import opened_store
from accelopt_mcp.cli.output import fail, say
from accelopt_mcp.store import STORE_ENV
from accelopt_mcp.viewer.serve import DEFAULT_PORT, PortBusy, serve


def view(
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            "--db",
            envvar=STORE_ENV,
            help=(
                "Kernel database: a SQLite path (default: the per-user kernels.db), "
                "postgresql://... or a Supabase project URL (key in SUPABASE_KEY)."
            ),
            show_default=False,
        ),
    ] = None,
    port: Annotated[
        int,
        typer.Option(min=0, max=65535, help="Port on 127.0.0.1 (0: any free one)."),
    ] = DEFAULT_PORT,
    no_browser: Annotated[
        bool, typer.Option("--no-browser", help="Do not open a browser; just print the URL.")
    ] = False,
) -> None:
    """Watch runs in a browser: runs, each run's tree of kernels with code, diffs, profiles,
    LLM calls and lessons, the memory and the suites; a run in progress updates live. Serves
    on 127.0.0.1 only; the first line printed is the URL to open (it holds the access token:
    keep it to yourself). From another machine: ssh -L PORT:127.0.0.1:PORT."""
    with opened_store(store) as db:
        try:
            serve(db, port=port, open_browser=not no_browser, say=lambda line: say(line, err=True))
        except PortBusy as exc:
            fail(str(exc))
        except KeyboardInterrupt:
            pass
