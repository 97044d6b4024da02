"""`accelopt suite`: the paper's table on the machine you have. One optimization per task case
of a benchmark directory (or a built-in suite), then percent of peak per task before and after,
the speedups with their intervals, cost, and the geometric means; stored, resumable, and
comparable with another suite."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from accelopt_mcp.backends.cluster import cluster_address
from accelopt_mcp.cli.common import ClusterOption, JsonOption, StoreOption, full_id, opened_store
from accelopt_mcp.cli.output import Table, console, fail, plain, print_json, say, short_id
from accelopt_mcp.cli.run_options import with_run_options
from accelopt_mcp.engine.config import resolve_optimize_config
from accelopt_mcp.engine.presets import PRESETS
from accelopt_mcp.engine.runs import default_output_dir
from accelopt_mcp.store.base import KernelStore, SuiteRecord
from accelopt_mcp.suites import builtin_suite
from accelopt_mcp.suites.report import suite_json, write_outputs
from accelopt_mcp.suites.runner import SuiteDriver, create_suite, spec_of
from accelopt_mcp.suites.table import HEADERS, columns, geomean_cells, geomeans, row_cells
from accelopt_mcp.tasks.flashinfer_format import TaskFileError

app = typer.Typer(
    rich_markup_mode=None,
    help="Run a whole benchmark (one optimization per task) and print the percent-of-peak table.",
    no_args_is_help=True,
)

OutOption = Annotated[
    Path | None,
    typer.Option(
        "--out", help="Where the Markdown table and the PNG chart go (default: next to the DB)."
    ),
]


def _suite(db: KernelStore, given: str) -> SuiteRecord:
    """The suite by id or unique prefix (8+ characters), or stop with a one-line error (the
    one resolver every id argument goes through: cli.common.full_id)."""
    hint = "`accelopt suite list` shows them"
    record = db.get_suite(full_id(db, "suite", given.strip(), noun="suite", hint=hint))
    if record is None:  # removed in between
        fail(f"no suite with id {given!r}; {hint}")
    return record


@app.command("run")
@with_run_options(before="store")
def run(
    directory: Annotated[
        Path | None,
        typer.Argument(help="An NKIBench-layout directory or a FlashInfer-Trace set."),
    ] = None,
    builtin: Annotated[
        str | None, typer.Option("--builtin", help="A suite shipped with accelopt: cpu-nkibench.")
    ] = None,
    preset: Annotated[
        str | None,
        typer.Option(help=f"Run settings: {', '.join(PRESETS)} or a JSON file (default quick)."),
    ] = None,
    baseline_only: Annotated[
        bool,
        typer.Option("--baseline-only", help="Profile every baseline (no LLM): the first column."),
    ] = False,
    parallel: Annotated[
        int, typer.Option(min=1, help="How many tasks optimize at once (default 1).")
    ] = 1,
    store: StoreOption = None,
    out: OutOption = None,
    as_json: JsonOption = False,
    skip_llm_check: Annotated[
        bool,
        typer.Option("--skip-llm-check", help="Start without first asking each LLM endpoint."),
    ] = False,
    cluster: ClusterOption = None,
    *,
    given: Mapping[str, Any],
) -> None:
    """Optimize every task of DIRECTORY (or --builtin) under one preset; print the table."""
    if (directory is None) == (builtin is None):
        fail("give a suite directory or --builtin NAME (e.g. --builtin cpu-nkibench), not both")
    try:
        root = builtin_suite(builtin) if builtin is not None else directory
        assert root is not None
        config = resolve_optimize_config(
            preset, {**given, "cluster": cluster_address(cluster) or "local"}
        )
    except ValueError as exc:
        fail(str(exc))
    if not baseline_only:
        from accelopt_mcp.cli.optimize import _check_llm

        _check_llm(config.models_config, config.summarize, probe=not skip_llm_check)
    with opened_store(store) as db:
        try:
            record = create_suite(
                db,
                root,
                name=builtin or root.resolve().name,
                source=f"builtin:{builtin}" if builtin else str(root.resolve()),
                config=config,
                preset=preset,
                baseline_only=baseline_only,
                parallel=parallel,
            )
        except TaskFileError as exc:
            fail(str(exc))
        say("suite ", (record.id, "bold"), f" ({len(spec_of(record).cases)} tasks)", err=as_json)
        _drive(db, store, record.id, out, as_json)


@app.command("resume")
def resume(
    suite: Annotated[str, typer.Argument(help="The suite (id, or 8+ characters).")],
    store: StoreOption = None,
    out: OutOption = None,
    as_json: JsonOption = False,
) -> None:
    """Go on with a suite whose driver stopped (a crash, Ctrl-C): runs it had started are
    found and waited for, interrupted ones resumed, the rest started."""
    with opened_store(store) as db:
        _drive(db, store, _suite(db, suite).id, out, as_json)


@app.command("list")
def list_suites(
    limit: Annotated[int, typer.Option(min=1, help="At most this many.")] = 20,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Stored suites, newest first, with their geometric means."""
    with opened_store(store) as db:
        records = db.list_suites(limit=limit)
        if as_json:
            print_json([suite_json(r) for r in records])
            return
        table = Table(title="suites")
        table.add_id_column()
        for header in ("name", "status", "tasks", "baseline % of peak", "best % of peak"):
            table.add_column(header)
        table.add_column("created")
        for record in records:
            spec = spec_of(record)
            means = geomean_cells(
                geomeans(spec.cases, baseline_only=spec.baseline_only),
                baseline_only=spec.baseline_only,
            )
            table.add_row(
                short_id(record.id),
                plain(record.name),
                record.status,
                str(len(spec.cases)),
                means.get("baseline", "-"),
                means.get("best", "-") if not spec.baseline_only else "(baseline only)",
                record.created_at.isoformat(timespec="seconds") if record.created_at else "-",
            )
        console.print(table)


@app.command("show")
def show(
    suite: Annotated[str, typer.Argument(help="The suite (id, or 8+ characters).")],
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """A suite's table so far (a running suite shows what has finished)."""
    with opened_store(store) as db:
        record = _suite(db, suite)
        if as_json:
            print_json(suite_json(record))
        else:
            _print_table(record)


@app.command("compare")
def compare(
    first: Annotated[str, typer.Argument(help="A suite (id, or 8+ characters).")],
    second: Annotated[
        str, typer.Argument(help="Another suite (id, or 8+ characters): another model or preset.")
    ],
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Two suites side by side per task (best percent of peak and speedup of each), and the
    difference of their geometric means."""
    with opened_store(store) as db:
        a, b = _suite(db, first), _suite(db, second)
    from accelopt_mcp.suites.compare import compare_suites

    found = compare_suites(a, b)
    if as_json:
        print_json(found)
        return
    table = Table(title=f"suite {short_id(a.id)} (A) vs {short_id(b.id)} (B)")
    for header in ("task", "A best % of peak", "B best % of peak", "A speedup", "B speedup"):
        table.add_column(header)
    for row in found.rows:
        table.add_row(plain(row.task), row.a_percent, row.b_percent, row.a_speedup, row.b_speedup)
    console.print(table)
    say(found.summary)


# --------------------------------------------------------------------------- driving


def _drive(
    db: KernelStore, store_url: str | None, suite_id: str, out: Path | None, as_json: bool
) -> None:
    driver = SuiteDriver(
        db,
        suite_id,
        store_url=store_url,
        say=lambda line: say(line, err=as_json),
        check_llm=False,
    )
    try:
        record = driver.run()
    except KeyboardInterrupt:
        driver.save("interrupted")
        fail(f"stopped; `accelopt suite resume {short_id(suite_id)}` goes on from here", code=130)
    folder = out or default_output_dir() / "suites" / record.id
    written = write_outputs(record, folder)
    if as_json:
        print_json(suite_json(record) | written)
        return
    _print_table(record)
    for what, path in written.items():
        if path:
            say(f"{what}: ", plain(path))
    say(f"suite {record.id} {record.status}")


def _print_table(record: SuiteRecord) -> None:
    spec = spec_of(record)
    shown = columns(spec.baseline_only)
    table = Table(title=f"{record.name} ({short_id(record.id)}, {record.status})")
    for column in shown:
        table.add_column(HEADERS[column])
    for case in spec.cases:
        cells = row_cells(case, baseline_only=spec.baseline_only)
        table.add_row(*(plain(cells.get(c, "")) for c in shown))
    means = geomeans(spec.cases, baseline_only=spec.baseline_only)
    total = geomean_cells(means, baseline_only=spec.baseline_only)
    table.add_row(*(plain(total.get(c, "")) for c in shown), style="bold")
    console.print(table)
    for name, value in spec.about.items():
        say(f"{name}: ", plain(value))
    for excluded in means.excluded:
        say(("excluded:", "yellow"), f" {excluded.key}: ", plain(excluded.reason))
