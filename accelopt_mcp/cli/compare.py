"""`accelopt compare`: time 2-8 kernels of one task against each other."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from accelopt_mcp.backends.base import BackendUnavailableError, Baseline
from accelopt_mcp.backends.cluster import ClusterError
from accelopt_mcp.backends.registry import backend_info
from accelopt_mcp.cli.common import (
    BackendOption,
    ClusterOption,
    DecideAtOption,
    JsonOption,
    SeedsOption,
    StoreOption,
    TaskOption,
    TimeoutOption,
    WorkloadOption,
    benchmark_config,
    opened_store,
)
from accelopt_mcp.cli.output import Table, console, fail, plain, print_json, say
from accelopt_mcp.comparing import (
    check_count,
    compare_kernels,
    file_kernel,
    latency_text,
    level_text,
    pair_text,
    reference_speedup_text,
    shown_comparison,
    stored_kernel,
)
from accelopt_mcp.models import KernelComparison, Task
from accelopt_mcp.store.base import KernelStore, StoreError
from accelopt_mcp.tasks.flashinfer_format import TaskFileError
from accelopt_mcp.tasks.loader import load_task


def _is_file_ref(ref: str) -> bool:
    """A kernel named by path (it exists, or reads like a path) rather than by a stored id."""
    path = Path(ref).expanduser()
    return path.exists() or path.suffix in (".py", ".json") or "/" in ref


def _kernel(task: Task, ref: str, db: KernelStore | None, hardware: list[str]) -> Baseline:
    if _is_file_ref(ref):
        return file_kernel(task, ref, target_hardware=hardware)
    assert db is not None
    try:
        return stored_kernel(db, task, ref)
    except LookupError as exc:
        fail(
            f"{exc} and no such file: give a kernel .py / solution .json path, or a solution id "
            f"(`accelopt db best {task.definition.name}` lists them)"
        )


def compare(
    kernels: Annotated[
        list[str],
        typer.Argument(
            help="2 to 8 kernels: kernel .py / solution .json files, or stored solution ids (or "
            "their 8+ first characters).",
            show_default=False,
        ),
    ],
    task: TaskOption,
    backend: BackendOption = "cpu",
    workload: WorkloadOption = None,
    seeds: SeedsOption = None,
    iterations: Annotated[
        int | None, typer.Option(min=1, help="Timed rounds per set of processes.")
    ] = None,
    max_timing: Annotated[
        float | None, typer.Option(min=0.1, help="Cap on the time spent sampling, s.")
    ] = None,
    timeout: TimeoutOption = None,
    decide_at: DecideAtOption = None,
    store: StoreOption = None,
    as_json: JsonOption = False,
    cluster: ClusterOption = None,
) -> None:
    """Time kernels of one task against each other: ranked medians with intervals, and a
    verdict for every pair. Nothing is stored; exit code 1 when a kernel did not pass."""
    try:
        check_count(len(kernels))
        info = backend_info(backend)
        loaded_task = load_task(task, workload=workload)
    except (TaskFileError, FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    config = benchmark_config(
        decide_at=decide_at,
        seeds=seeds,
        iterations=iterations,
        max_timing=max_timing,
        timeout=timeout,
    )
    hardware = list(info.target_hardware)

    with ExitStack() as stack:
        # The database is opened only when a kernel is named by its id.
        db = None
        if not all(_is_file_ref(k) for k in kernels):
            db = stack.enter_context(opened_store(store))
        try:
            chosen = [_kernel(loaded_task, k, db, hardware) for k in kernels]
            found = compare_kernels(
                loaded_task, chosen, backend=backend, config=config, cluster=cluster
            )
        except (
            TaskFileError,
            BackendUnavailableError,
            ClusterError,
            StoreError,
            ValueError,
        ) as exc:
            fail(str(exc))
    if as_json:
        print_json(shown_comparison(found))
    else:
        _print_comparison(loaded_task, found)
    passed = all(k.evaluation.passed for k in found.kernels)
    raise typer.Exit(0 if passed else 1)


def _print_comparison(task: Task, found: KernelComparison) -> None:
    hardware = found.kernels[0].evaluation.environment.hardware if found.kernels else "?"
    how = (
        "timed in the same interleaved rounds"
        if found.interleaved
        else "each timed on its own (intervals combined, wider)"
    )
    say(
        (task.definition.name, "bold"),
        f" ({hardware}): {how}; intervals {level_text(found.confidence)}",
    )
    table = Table(show_header=True, header_style="bold", box=None)
    for column in ("rank", "kernel", "status", "median", "speedup"):
        table.add_column(column, justify="right" if column == "rank" else "left")
    for entry in found.kernels:
        ev = entry.evaluation
        colour = "green" if ev.passed else "red"
        latency = latency_text(ev) or "-"
        table.add_row(
            str(entry.rank) if entry.rank is not None else "-",
            plain(entry.label),
            Text(ev.status.value, style=colour),
            plain(latency.replace(f" {level_text(found.confidence)}", "")),
            plain(reference_speedup_text(ev) or "-"),
        )
    console.print(table, highlight=False)
    for pair in found.pairs:
        say(pair_text(pair))
    for entry in found.kernels:
        ev = entry.evaluation
        if not ev.passed:
            say((entry.label, "red"), " did not pass:")
            console.print(ev.log[-2000:], highlight=False, markup=False)
