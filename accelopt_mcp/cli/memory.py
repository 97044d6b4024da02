"""`accelopt memory list|add|remove`: the optimization memory, by hand."""

from __future__ import annotations

from typing import Annotated

import typer
from pydantic import ValidationError
from rich.table import Table

from accelopt_mcp.cli.common import (
    JsonOption,
    StoreOption,
    console,
    fail,
    opened_store,
    plain,
    print_json,
    say,
)
from accelopt_mcp.engine.memory import add_experience
from accelopt_mcp.store.base import ExperienceIn

app = typer.Typer(help="Optimization memory: list, add and remove items.", no_args_is_help=True)


@app.command("list")
def list_items(
    run: Annotated[str | None, typer.Option("--run", help="Items of this run.")] = None,
    namespace: Annotated[str | None, typer.Option(help="Items of this namespace.")] = None,
    search: Annotated[str | None, typer.Option(help="Substring of title/strategy.")] = None,
    include_removed: Annotated[
        bool, typer.Option("--include-removed", help="Also removed items (with --search).")
    ] = False,
    limit: Annotated[int, typer.Option(help="At most this many.")] = 50,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """The newest items (oldest first, as the planner sees them), or a search."""
    with opened_store(store) as db:
        if search is not None or include_removed:
            items = db.search_experiences(
                text=search, namespace=namespace, include_removed=include_removed, limit=limit
            )
        else:
            items = db.recent_experiences(run_id=run, namespace=namespace, limit=limit)
    if as_json:
        print_json([item.model_dump(mode="json") for item in items])
        return
    table = Table(title="optimization memory")
    for column in ("id", "namespace", "definition", "title", "speedup", "removed"):
        table.add_column(column)
    for item in items:
        table.add_row(
            plain(item.id),
            plain(item.namespace),
            plain(item.definition_name),
            plain(item.title),
            f"{item.speedup:.2f}x" if item.speedup else "-",
            "yes" if item.removed else "",
        )
    console.print(table)


@app.command()
def add(
    definition: Annotated[str, typer.Option(help="Definition the lesson came from.")],
    title: Annotated[str, typer.Option(help="Short title.")],
    strategy: Annotated[str, typer.Option(help="The generalizable strategy.")],
    pseudocode: Annotated[str, typer.Option(help="The changed segment, before -> after.")] = "",
    namespace: Annotated[str, typer.Option(help="Memory namespace, e.g. cpu.")] = "default",
    run: Annotated[str | None, typer.Option("--run", help="Attach to this run.")] = None,
    store: StoreOption = None,
) -> None:
    """Add an item by hand (e.g. a known trick for this hardware)."""
    try:
        item = ExperienceIn(
            definition_name=definition,
            title=title,
            strategy=strategy,
            pseudocode=pseudocode,
            namespace=namespace,
            run_id=run,
        )
    except ValidationError as exc:  # the record's own messages name the field
        fail("; ".join(str(error["msg"]) for error in exc.errors()))
    with opened_store(store) as db:
        stored = add_experience(db, item)
    say(f"added {stored.id}")


@app.command()
def remove(
    item_id: Annotated[str, typer.Argument(help="Item id (from `accelopt memory list`).")],
    store: StoreOption = None,
) -> None:
    """Take an item out of the working memory; it stays in the database as history."""
    with opened_store(store) as db:
        if not db.remove_experience(item_id):
            fail(f"no memory item {item_id!r}; see `accelopt memory list`")
    say(f"removed {item_id}")
