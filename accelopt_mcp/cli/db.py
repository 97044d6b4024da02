"""`accelopt db ...`: initialise, check, inspect, export and import the kernel database."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from accelopt_mcp.cli.common import JsonOption, StoreOption, full_id, opened_store
from accelopt_mcp.cli.output import Table, console, fail, plain, print_json, say, short_id
from accelopt_mcp.engine.lineage import speedup_between, timed_beside_children
from accelopt_mcp.engine.runs import SpeedupFigure, figure_text
from accelopt_mcp.models import LatencyStats
from accelopt_mcp.store.base import StoredProfile, StoredSolution, StoreError
from accelopt_mcp.store.url import describe_store_url

app = typer.Typer(
    rich_markup_mode=None,
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
    its measurements (shown with its confidence interval and how many measurements it pools,
    plus how many times its children timed it beside them, which are not pooled), and each
    one's speedup over its parent: timed in the same rounds where that was measured (interval
    and verdict), else labelled "timed apart" (two medians from different times). A result
    flagged untrusted (its numbers cannot be believed: above_peak, constant_output, ...) is
    left out unless --include-flagged."""
    with opened_store(store) as db:
        if db.get_definition(definition) is None:
            fail(f"no definition named {definition!r}; `accelopt db stats` shows what is stored")
        ranked = db.best_solutions(
            definition, hardware=hardware, limit=limit, include_flagged=include_flagged
        )
        every = db.ranked_solutions(definition, hardware=hardware, include_flagged=include_flagged)
        profiles = {e.solution.id: e.best_profile for e in every}
        children: dict[str, list[StoredSolution]] = {}
        for entry in every:
            if entry.solution.parent_id is not None:
                children.setdefault(entry.solution.parent_id, []).append(entry.solution)
        rows = []
        for r in ranked:
            parent_id = r.solution.parent_id
            figure = None
            if parent_id is not None:
                figure = speedup_between(
                    db, r.solution, r.profile, parent_id, profiles.get(parent_id)
                )
            beside = timed_beside_children(
                db, r.solution.id, r.profile, children.get(r.solution.id, [])
            )
            rows.append((r, figure, beside))
    if as_json:
        print_json(
            [
                {
                    **r.model_dump(mode="json"),
                    "speedup_vs_parent": figure.model_dump(mode="json") if figure else None,
                    "timed_beside_children": beside,
                }
                for r, figure, beside in rows
            ]
        )
        return
    title = f"fastest correct solutions of {definition}"
    say(title + (" (untrusted included)" if include_flagged else ""))
    table = Table()
    table.add_id_column("solution")
    for column in (
        "name",
        "language",
        "hardware",
        "latency ms [CI]",
        "measurements",
        "speedup vs reference",
        "vs parent",
        "flags",
    ):
        table.add_column(column)
    for r, figure, beside in rows:
        speedup = f"{r.profile.speedup:.2f}x" if r.profile.speedup else "-"
        flags = ", ".join(r.profile.flags)
        stats = r.profile.evaluation.latency_stats
        own = str(stats.measurements) if stats else "1"
        table.add_row(
            short_id(r.solution.id),
            plain(r.solution.solution.name),
            plain(r.solution.spec_language),
            plain(r.profile.eval_hardware),
            plain(_latency_cell(r.profile.latency_ms, stats)),
            f"{own} + {beside} beside children" if beside else own,
            speedup,
            plain(figure_text(figure, "parent")) if figure is not None else "-",
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
    solution_id: Annotated[str, typer.Argument(help="Solution id, or a prefix of 8+ characters.")],
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Ancestors (nearest first) and descendants of a solution, each with its best latency
    and its speedup over its parent: timed in the same rounds where that was measured
    (interval and verdict), else labelled "timed apart"."""
    with opened_store(store) as db:
        solution_id = full_id(
            db,
            "solution",
            solution_id,
            noun="solution",
            hint="`accelopt db best DEFINITION` lists a definition's solutions",
        )
        found = db.get_solution(solution_id)
        if found is None:  # removed in between
            fail(f"no solution with id {solution_id!r}")
        up, down = db.ancestors(solution_id), db.descendants(solution_id)
        shown = [found, *up, *down]
        profiles: dict[str, StoredProfile | None] = {}
        for name in dict.fromkeys(s.definition_name for s in shown):
            profiles |= {e.solution.id: e.best_profile for e in db.ranked_solutions(name)}
        figures: dict[str, SpeedupFigure | None] = {}
        for s in shown:
            if s.parent_id is not None:
                figures[s.id] = speedup_between(
                    db, s, profiles.get(s.id), s.parent_id, profiles.get(s.parent_id)
                )

    def entry(s: StoredSolution) -> dict[str, Any]:
        profile, figure = profiles.get(s.id), figures.get(s.id)
        return {
            **s.model_dump(mode="json"),
            "best_latency_ms": profile.latency_ms if profile is not None else None,
            "speedup_vs_parent": figure.model_dump(mode="json") if figure else None,
        }

    def line(s: StoredSolution) -> str:
        profile, figure = profiles.get(s.id), figures.get(s.id)
        parts = [f"{s.id}  {s.solution.name}"]
        if profile is not None and profile.latency_ms is not None:
            parts.append(f"{profile.latency_ms:.4g} ms")
        if figure is not None:
            parts.append(figure_text(figure, "its parent"))
        elif s.parent_id is not None:
            parts.append("no speedup over its parent known")
        return "  ".join(parts)

    if as_json:
        print_json(
            {
                "solution": entry(found),
                "ancestors": [entry(s) for s in up],
                "descendants": [entry(s) for s in down],
            }
        )
        return
    say((solution_id, "bold"))
    say(f"  this kernel: {line(found)}")
    for depth, s in enumerate(up, start=1):
        say(f"  ancestor {depth}: {line(s)}")
    for s in down:
        say(f"  descendant: {line(s)} (parent {s.parent_id})")


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
