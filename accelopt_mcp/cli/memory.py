"""`accelopt memory list|add|remove`: the optimization memory, by hand.

Given no namespace, a command uses the default namespace of --backend (default cpu): the
backend's name, which a run on that backend files into and seeds from unless started with
--namespace (accelopt_mcp/engine/memory.py)."""

from __future__ import annotations

from typing import Annotated

import typer
from pydantic import ValidationError

from accelopt_mcp.backends.registry import backend_names
from accelopt_mcp.cli.common import JsonOption, StoreOption, full_id, opened_store
from accelopt_mcp.cli.output import Table, console, fail, plain, print_json, say, short_id
from accelopt_mcp.engine.memory import (
    DEFAULT_BACKEND,
    add_experience,
    memory_namespace_of,
    namespace_note,
)
from accelopt_mcp.store.base import ExperienceIn

app = typer.Typer(
    rich_markup_mode=None,
    help=(
        "Optimization memory: list, search, add and remove items. Items live in namespaces; "
        "a run files into and seeds from its backend's name (cpu, nki, ...) unless started "
        "with --namespace, and these commands use --backend's name when given no --namespace."
    ),
    no_args_is_help=True,
)

BackendOption = Annotated[
    str,
    typer.Option(
        help=f"Backend ({', '.join(backend_names())}) whose namespace, its name, is used "
        "when no --namespace is given."
    ),
]

# The search of `memory list --search` and `memory search`, and how many items either shows.
WORDS_HELP = (
    "Words to look for in title, strategy or pseudocode, any order, each as the start of a "
    "word; items holding more of them first, one is enough to be found."
)
LimitOption = Annotated[int, typer.Option(help="At most this many.")]


@app.command("list")
def list_items(
    run: Annotated[
        str | None, typer.Option("--run", help="Items of this run (id, or 8+ characters).")
    ] = None,
    namespace: Annotated[
        str | None, typer.Option(help="Items of this namespace (default: the backend's).")
    ] = None,
    backend: BackendOption = DEFAULT_BACKEND,
    search: Annotated[
        str | None,
        typer.Option(help=f"{WORDS_HELP} Searches every namespace unless --namespace is given."),
    ] = None,
    include_removed: Annotated[
        bool, typer.Option("--include-removed", help="Also removed items (a search).")
    ] = False,
    limit: LimitOption = 50,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """The newest items of a run or namespace (oldest first, as the planner sees them), or a
    search."""
    if run is not None and namespace is not None:
        fail("give --run or --namespace, not both")
    with opened_store(store) as db:
        if search is not None or include_removed:
            items = db.search_experiences(
                text=search, namespace=namespace, include_removed=include_removed, limit=limit
            )
            title = "optimization memory: search"
        elif run is not None:
            run = full_id(db, "run", run, noun="run", hint="list runs with `accelopt runs list`")
            items = db.recent_experiences(run_id=run, limit=limit)
            title = f"optimization memory of run {run}"
        else:
            chosen = memory_namespace_of(namespace, backend)
            items = db.recent_experiences(namespace=chosen, limit=limit)
            title = f"optimization memory: namespace {chosen}"
    if as_json:
        print_json([item.model_dump(mode="json") for item in items])
        return
    table = Table(title=plain(title))
    table.add_id_column()
    for column in ("namespace", "definition", "title", "speedup", "measured on", "removed"):
        table.add_column(column)
    for item in items:
        table.add_row(
            short_id(item.id),
            plain(item.namespace),
            plain(item.definition_name),
            plain(item.title),
            f"{item.speedup:.2f}x" if item.speedup else "-",
            plain(item.conditions.text()) if item.conditions is not None else "-",
            "yes" if item.removed else "",
        )
    console.print(table)


@app.command()
def add(
    definition: Annotated[str, typer.Option(help="Definition the lesson came from.")],
    title: Annotated[str, typer.Option(help="Short title.")],
    strategy: Annotated[str, typer.Option(help="The generalizable strategy.")],
    pseudocode: Annotated[str, typer.Option(help="The changed segment, before -> after.")] = "",
    namespace: Annotated[
        str | None,
        typer.Option(help="Memory namespace (default: the backend's, which its runs read)."),
    ] = None,
    backend: BackendOption = DEFAULT_BACKEND,
    run: Annotated[
        str | None, typer.Option("--run", help="Attach to this run (id, or 8+ characters).")
    ] = None,
    store: StoreOption = None,
) -> None:
    """Add an item by hand (e.g. a known trick for this hardware); says when no run reads its
    namespace."""
    try:
        item = ExperienceIn(
            definition_name=definition,
            title=title,
            strategy=strategy,
            pseudocode=pseudocode,
            namespace=memory_namespace_of(namespace, backend),
            run_id=run,
        )
    except ValidationError as exc:  # the record's own messages name the field
        fail("; ".join(str(error["msg"]) for error in exc.errors()))
    except ValueError as exc:
        fail(str(exc))
    with opened_store(store) as db:
        stored = add_experience(db, item)
        note = namespace_note(db, stored.namespace, backend)
    if note is not None:
        say(("note:", "bold yellow"), " ", note, err=True)
    say(f"added {stored.id}")


@app.command()
def search(
    words: Annotated[list[str], typer.Argument(help=WORDS_HELP, show_default=False)],
    namespace: Annotated[
        str | None, typer.Option(help="Only this namespace (default: every namespace).")
    ] = None,
    include_removed: Annotated[
        bool, typer.Option("--include-removed", help="Also removed items.")
    ] = False,
    limit: LimitOption = 50,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Items holding the words, best match first (the same as `memory list --search`)."""
    list_items(
        run=None,
        namespace=namespace,
        backend=DEFAULT_BACKEND,
        # Quoted as one argument or given as several, the same words.
        search=" ".join(words),
        include_removed=include_removed,
        limit=limit,
        store=store,
        as_json=as_json,
    )


@app.command()
def remove(
    item_id: Annotated[
        str, typer.Argument(help="Item id (from `accelopt memory list`), or a prefix of 8+.")
    ],
    store: StoreOption = None,
) -> None:
    """Take an item out of the working memory; it stays in the database as history."""
    with opened_store(store) as db:
        item_id = full_id(
            db, "experience", item_id, noun="memory item", hint="see `accelopt memory list`"
        )
        if not db.remove_experience(item_id):
            fail(f"memory item {item_id} was removed already; see `accelopt memory list`")
    say(f"removed {item_id}")
