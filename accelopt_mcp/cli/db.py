"""`accelopt db ...`: initialise, check, inspect, export and import the kernel database."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
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
from accelopt_mcp.models import LatencyStats
from accelopt_mcp.store.base import StoreError
from accelopt_mcp.store.url import describe_store_url

app = typer.Typer(
    help="The kernel database: init, check, stats, best, lineage, export, import.",
    no_args_is_help=True,
)


@app.command()
def init(store: StoreOption = None) -> None:
    """Create the schema (SQLite file, or schema_v2.txt applied to PostgreSQL), or bring an
    older one up to date, keeping every row; says what it changed."""
    try:
        kind, location = describe_store_url(store)
    except StoreError as exc:
        fail(str(exc))
    if kind == "supabase":
        fail(
            "a Supabase project's schema cannot be created through its REST API. Apply "
            "schema_v2.txt once in the project's SQL editor, or run `accelopt db init --store "
            "postgresql://...` with the project's direct connection string (Project Settings -> "
            "Database), then `accelopt db check` to confirm."
        )
    changes: list[str] = []
    if kind == "postgres":
        from accelopt_mcp.store.postgres import PostgresStore

        try:
            with PostgresStore(location, init_schema=True) as pg:
                changes = list(pg.schema_changes)
        except StoreError as exc:
            fail(str(exc))
    else:
        with opened_store(store) as db:
            changes = list(db.schema_changes)
    for change in changes:
        say(f"  {change}")
    say(("schema ready", "green"), f" ({kind})", "" if changes else "; it was up to date")


@app.command()
def check(
    url: Annotated[str | None, typer.Argument(help="Database URL; default: --store.")] = None,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Tell whether the database answers, accepts the key and has the schema; say how to fix
    it when not."""
    from accelopt_mcp.store.detect import check_store

    result = check_store(url or store)
    if as_json:
        print_json(result)
    else:
        colour = "green" if result.ok else "red"
        say((result.message, colour), f"  ({result.kind}: {result.location})")
        for step in result.next_steps:
            say(f"  - {step}")
        for table, count in (result.tables or {}).items():
            say(f"  {table}: {count}")
    raise typer.Exit(0 if result.ok else 1)


@app.command()
def stats(store: StoreOption = None, as_json: JsonOption = False) -> None:
    """Row counts per table."""
    with opened_store(store) as db:
        result = db.stats()
    if as_json:
        print_json(result)
        return
    say(f"{result.backend}: {result.location}")  # a line: a table title wraps and cuts
    table = Table()
    table.add_column("table")
    table.add_column("rows", justify="right")
    for name, count in result.counts.items():
        table.add_row(name, str(count))
    console.print(table)


@app.command()
def best(
    definition: Annotated[str, typer.Argument(help="Definition name, e.g. rmsnorm_h4096.")],
    hardware: Annotated[str | None, typer.Option(help="Only profiles on this hardware.")] = None,
    limit: Annotated[int, typer.Option(min=1)] = 10,
    include_flagged: Annotated[
        bool,
        typer.Option(
            "--include-flagged",
            help="Rank profiles flagged untrusted too (above_peak, constant_output, ...).",
        ),
    ] = False,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """The fastest correct solutions of a definition, by each profile's latency pooled over all
    its measurements (shown with its confidence interval and how many measurements it pools).
    A result flagged untrusted (its numbers cannot be believed: above_peak, constant_output,
    ...) is left out unless --include-flagged."""
    with opened_store(store) as db:
        if db.get_definition(definition) is None:
            fail(f"no definition named {definition!r}; `accelopt db stats` shows what is stored")
        ranked = db.best_solutions(
            definition, hardware=hardware, limit=limit, include_flagged=include_flagged
        )
    if as_json:
        print_json([r.model_dump(mode="json") for r in ranked])
        return
    title = f"fastest correct solutions of {definition}"
    say(title + (" (untrusted included)" if include_flagged else ""))
    table = Table()
    for column in (
        "solution id",
        "name",
        "language",
        "hardware",
        "latency ms [CI]",
        "measurements",
        "speedup vs reference",
        "flags",
    ):
        table.add_column(column)
    for r in ranked:
        speedup = f"{r.profile.speedup:.2f}x" if r.profile.speedup else "-"
        flags = ", ".join(r.profile.flags)
        stats = r.profile.evaluation.latency_stats
        table.add_row(
            plain(r.solution.id),
            plain(r.solution.solution.name),
            plain(r.solution.spec_language),
            plain(r.profile.eval_hardware),
            plain(_latency_cell(r.profile.latency_ms, stats)),
            str(stats.measurements) if stats else "1",
            speedup,
            plain(f"UNTRUSTED: {flags}" if not r.profile.trusted else flags or "-"),
        )
    console.print(table)


def _latency_cell(latency_ms: float | None, stats: LatencyStats | None) -> str:
    """The pooled latency with its confidence interval, when the profile has one."""
    if latency_ms is None:
        return "-"
    if stats is None or stats.ci_low_ms is None or stats.ci_high_ms is None:
        return f"{latency_ms:.4f}"
    return f"{latency_ms:.4f} [{stats.ci_low_ms:.4f}, {stats.ci_high_ms:.4f}]"


@app.command()
def lineage(
    solution_id: Annotated[str, typer.Argument(help="Solution id.")],
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Ancestors (nearest first) and descendants of a solution."""
    with opened_store(store) as db:
        if db.get_solution(solution_id) is None:
            fail(f"no solution with id {solution_id!r}")
        up, down = db.ancestors(solution_id), db.descendants(solution_id)
    if as_json:
        print_json(
            {
                "ancestors": [s.model_dump(mode="json") for s in up],
                "descendants": [s.model_dump(mode="json") for s in down],
            }
        )
        return
    say((solution_id, "bold"))
    for depth, s in enumerate(up, start=1):
        say(f"  ancestor {depth}: {s.id}  {s.solution.name}")
    for s in down:
        say(f"  descendant: {s.id}  {s.solution.name} (parent {s.parent_id})")


@app.command("export")
def export_(
    directory: Annotated[Path, typer.Argument(help="Target folder (created if missing).")],
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Write into a folder that already holds files (same names replaced)."
        ),
    ] = False,
    store: StoreOption = None,
) -> None:
    """Write the whole database as a FlashInfer-Trace directory (plus lineage, runs, memory)."""
    from accelopt_mcp.transfer.traceset import export_traceset

    _check_export_target(directory, force)
    with opened_store(store) as db:
        try:
            counts = export_traceset(db, directory)
        except OSError as exc:
            fail(f"cannot write the export to {directory}: {exc.strerror or exc}")
    say(f"exported to {directory}: {counts.model_dump()}")


def _check_export_target(directory: Path, force: bool) -> None:
    """An export never replaces a file, nor mixes into a folder with files unless --force."""
    if directory.exists() and not directory.is_dir():
        fail(
            f"{directory} exists and is not a folder; remove it or give another path "
            "(an export is a folder of definitions, workloads, solutions and traces)"
        )
    if directory.is_dir() and not force and any(directory.iterdir()):
        fail(
            f"{directory} already holds files; remove it, give another folder, or pass --force "
            "to write into it (files of the same name are replaced)"
        )


@app.command("import")
def import_(
    directory: Annotated[
        Path, typer.Argument(help="A FlashInfer-Trace directory (e.g. from `db export`).")
    ],
    store: StoreOption = None,
) -> None:
    """Load a FlashInfer-Trace directory (or an NKIBench one: the format is detected)."""
    from accelopt_mcp.cli.imports import import_into_store

    import_into_store(directory, store, "auto")
