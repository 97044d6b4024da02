"""Options every CLI command shares (the store, --json, --cluster, and those of the commands
that time kernels), opening the store, and its notices, and loading a task with a kernel file
for it. Printing is cli/output.py."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from accelopt_mcp.backends.registry import backend_help, backend_info
from accelopt_mcp.cli.output import fail, say
from accelopt_mcp.models import BenchmarkConfig, Solution, Task
from accelopt_mcp.store import STORE_ENV, open_store
from accelopt_mcp.store.base import AmbiguousIdError, IdKind, KernelStore, StoreError
from accelopt_mcp.store.ids import unknown_id
from accelopt_mcp.tasks.flashinfer_format import TaskFileError
from accelopt_mcp.tasks.kernels import load_solution
from accelopt_mcp.tasks.loader import load_task

StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        envvar=STORE_ENV,
        help=(
            "Kernel database: a SQLite path (default: the per-user kernels.db; "
            "sqlite:///relative.db or sqlite:////absolute.db), postgresql://... or a Supabase "
            "project URL (key in SUPABASE_KEY)."
        ),
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
ClusterOption = Annotated[
    str | None,
    typer.Option(
        "--cluster",
        help=(
            "Profile on a Ray cluster: host:port (on a node), ray://host:port (Ray Client, e.g. "
            "through an SSH tunnel) or auto; 'local' for this host. Default: "
            "ACCELOPT_RAY_ADDRESS, else this host. Needs accelopt-mcp[ray]."
        ),
    ),
]


class _NoteHandler(logging.Handler):
    """A store's notices (e.g. that it created a new SQLite file) as `note:` lines on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        say(("note:", "yellow"), " ", record.getMessage(), err=True)


def show_store_notices() -> None:
    """Print what open_store logs (it never prints itself: the MCP server keeps it in its log
    instead); called once by the `accelopt` entry point."""
    logger = logging.getLogger("accelopt_mcp.store")
    if not any(isinstance(h, _NoteHandler) for h in logger.handlers):
        logger.addHandler(_NoteHandler(logging.WARNING))


@contextmanager
def opened_store(url: str | None) -> Iterator[KernelStore]:
    """Open the store or stop with its message (which says how to fix it)."""
    try:
        store = open_store(url)
    except StoreError as exc:
        fail(str(exc))
    try:
        yield store
    except (StoreError, ValidationError, ValueError, FileNotFoundError) as exc:
        fail(str(exc))
    finally:
        store.close()


DECIDE_AT_HELP = (
    "Speedups to decide on, comma-separated (default 1.0: faster or slower?). Sampling stops "
    "once every speedup interval is wholly above or below each; 'none': only --target-ci."
)

# The options of the commands that time kernels (profile, compare): what to time, on what, how.
TaskOption = Annotated[
    Path,
    typer.Option("--task", help="Definition .json, NKIBench task .py, or a directory holding one."),
]
BackendOption = Annotated[str, typer.Option(help=f"One of: {backend_help()}.")]
WorkloadOption = Annotated[
    str | None, typer.Option(help="Workload uuid or index (default: the first).")
]
SeedsOption = Annotated[int | None, typer.Option(min=1, help="Number of correctness seeds.")]
TimeoutOption = Annotated[
    float | None,
    typer.Option(
        min=1,
        help="Longest one call of a kernel or the reference may take, s (default 60); "
        "later calls are held to 20x the first (at least 5 s).",
    ),
]
DecideAtOption = Annotated[str | None, typer.Option(help=DECIDE_AT_HELP)]


def task_and_kernel(
    task: Path, workload: str | None, kernel: Path, backend: str
) -> tuple[Task, Solution]:
    """The task (--task, --workload) and the kernel file for it, built for the hardware the
    backend targets; else stop with one line (an unknown backend, an unreadable file)."""
    try:
        hardware = list(backend_info(backend).target_hardware)
        loaded_task = load_task(task, workload=workload)
        return loaded_task, load_solution(kernel, loaded_task, target_hardware=hardware)
    except (TaskFileError, FileNotFoundError, ValueError) as exc:
        fail(str(exc))


def parse_ratios(text: str | None) -> list[float] | None:
    """--decide-at's value: None when not given, [] for 'none', else the positive ratios;
    a bad one fails in one line."""
    if text is None:
        return None
    if text.strip().lower() in ("none", ""):
        return []
    try:
        ratios = [float(part) for part in text.split(",")]
    except ValueError:
        fail(f"--decide-at {text!r} is not a comma-separated list of numbers: try 1.0 or 0.9,1.1")
    if any(not (0 < r < float("inf")) for r in ratios):
        fail(f"--decide-at {text!r} holds a ratio that is not positive: try 1.0 or 0.9,1.1")
    return ratios


def benchmark_config(
    *,
    decide_at: str | None = None,
    seeds: int | None = None,
    iterations: int | None = None,
    max_timing: float | None = None,
    timeout: float | None = None,
    target_ci: float | None = None,
) -> BenchmarkConfig:
    """The defaults with the command line's timing options (None: not given), validated (one
    line when refused). --seeds N draws the inputs from seeds 0, 21, 42, ..."""
    updates: dict[str, object] = {}
    ratios = parse_ratios(decide_at)
    if ratios is not None:
        updates["decide_at"] = ratios
    if seeds is not None:
        updates["seeds"] = [21 * i for i in range(seeds)]
    given = {
        "iterations": iterations,
        "max_timing_seconds": max_timing,
        "timeout_seconds": timeout,
        "target_ci": target_ci,
    }
    updates |= {name: value for name, value in given.items() if value is not None}
    try:
        return BenchmarkConfig.model_validate(updates)
    except ValidationError as exc:
        first = exc.errors()[0]["msg"] if exc.errors() else str(exc)
        fail(str(first).removeprefix("Value error, "))


def full_id(db: KernelStore, kind: IdKind, given: str, *, noun: str, hint: str) -> str:
    """The full id of the record of `kind` that `given` names (its id, or a unique prefix of
    8+ characters, as the CLI prints them); else stop with one line: an ambiguous prefix with
    its matches, or no such record and where to list them (`hint`)."""
    try:
        found = db.resolve_id(kind, given)
    except AmbiguousIdError as exc:
        fail(str(exc).replace(f"{kind} id", f"{noun} id", 1).replace(f"{kind}s (", f"{noun}s (", 1))
    if found is None:
        fail(unknown_id(noun, given, hint))
    return found
