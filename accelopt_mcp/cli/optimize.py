"""`accelopt optimize` and `accelopt resume`: run the beam search here, with a live display."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from accelopt_mcp.backends.registry import backend_help, backend_info
from accelopt_mcp.cli.common import StoreOption, console, fail, opened_store
from accelopt_mcp.engine.beam import BeamSearch, InitialKernelFailed, RunBusy
from accelopt_mcp.engine.config import resolve_optimize_config
from accelopt_mcp.engine.events import EngineEvent
from accelopt_mcp.engine.presets import PRESETS
from accelopt_mcp.engine.report import plot_best_latency
from accelopt_mcp.engine.runs import (
    RunNotFound,
    change_settings,
    default_output_dir,
    load_run,
    prepare_run,
    speedup,
    worker_alive,
)
from accelopt_mcp.llm import LlmConfigError, model_config_names
from accelopt_mcp.store.base import KernelStore, RunUpdate
from accelopt_mcp.tasks.flashinfer_format import TaskFileError
from accelopt_mcp.tasks.kernels import load_solution
from accelopt_mcp.tasks.loader import load_task

OutputDirOption = Annotated[
    Path | None,
    typer.Option(
        "--output-dir", help="Where the winning kernel and plot go (default: next to the DB)."
    ),
]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No live display.")]


def optimize(
    kernel: Annotated[Path, typer.Argument(help="Initial kernel: a kernel .py or solution .json.")],
    task: Annotated[
        Path, typer.Option("--task", help="Task: definition .json, NKIBench task .py or folder.")
    ],
    workload: Annotated[str | None, typer.Option(help="Workload uuid or index.")] = None,
    backend: Annotated[
        str | None, typer.Option(help=f"One of: {backend_help()} (default cpu).")
    ] = None,
    preset: Annotated[
        str | None,
        typer.Option(help=f"Run settings: {', '.join(PRESETS)} or a JSON file (default quick)."),
    ] = None,
    iterations: Annotated[int | None, typer.Option(help="T: iterations.")] = None,
    beam: Annotated[int | None, typer.Option(help="B: beam width.")] = None,
    plans: Annotated[int | None, typer.Option(help="N: plans per beam kernel.")] = None,
    attempts: Annotated[int | None, typer.Option(help="K: attempts per plan.")] = None,
    topk: Annotated[int | None, typer.Option(help="TopK: experiences per iteration.")] = None,
    exp_n: Annotated[int | None, typer.Option("--exp-n", help="ExpN: memory capacity.")] = None,
    positive_threshold: Annotated[float | None, typer.Option(help="e.g. 1.04")] = None,
    negative_threshold: Annotated[float | None, typer.Option(help="e.g. 0.87")] = None,
    config: Annotated[
        str | None,
        typer.Option(
            "--config",
            help="Model config: a file, or the name of one in templates/models "
            f"({', '.join(model_config_names()) or 'none shipped'}).",
        ),
    ] = None,
    budget_usd: Annotated[float | None, typer.Option(help="Stop at this LLM spend.")] = None,
    budget_tokens: Annotated[int | None, typer.Option(help="Stop at this many tokens.")] = None,
    budget_wall_s: Annotated[float | None, typer.Option(help="Stop after this many s.")] = None,
    namespace: Annotated[str | None, typer.Option(help="Memory namespace.")] = None,
    seed_memory: Annotated[
        bool, typer.Option("--seed-memory", help="Start from the namespace's memory.")
    ] = False,
    workers: Annotated[int | None, typer.Option(help="Profiling slots.")] = None,
    store: StoreOption = None,
    output_dir: OutputDirOption = None,
    quiet: QuietOption = False,
) -> None:
    """Optimize KERNEL for TASK with the AccelOpt beam search; stores everything in the DB."""
    overrides = {
        "backend": backend,
        "iterations": iterations,
        "beam": beam,
        "plans": plans,
        "attempts": attempts,
        "topk": topk,
        "exp_n": exp_n,
        "positive_threshold": positive_threshold,
        "negative_threshold": negative_threshold,
        "models_config": config,
        "budget_usd": budget_usd,
        "budget_tokens": budget_tokens,
        "budget_wall_s": budget_wall_s,
        "namespace": namespace,
        "seed_from_namespace": seed_memory or None,
        "workers": workers,
    }
    try:
        settings = resolve_optimize_config(preset, overrides)
        loaded_task = load_task(task, workload=workload)
        solution = load_solution(
            kernel,
            loaded_task,
            target_hardware=list(backend_info(settings.backend).target_hardware),
        )
    except (TaskFileError, ValueError, FileNotFoundError) as exc:
        fail(str(exc))
    with opened_store(store) as db:
        run_id = prepare_run(
            db,
            loaded_task,
            solution,
            settings,
            request={"kernel_path": str(kernel), "task_path": str(task), "workload": workload},
        )
        console.print(f"run [bold]{run_id}[/] ({escape(loaded_task.definition.name)})")
        _drive(db, run_id, output_dir or default_output_dir(), quiet)


def resume(
    run_id: Annotated[str, typer.Argument(help="The run to continue.")],
    iterations: Annotated[int | None, typer.Option(help="Raise T (run longer).")] = None,
    budget_usd: Annotated[float | None, typer.Option(help="New USD cap.")] = None,
    budget_tokens: Annotated[int | None, typer.Option(help="New token cap.")] = None,
    budget_wall_s: Annotated[float | None, typer.Option(help="New wall-time cap (s).")] = None,
    store: StoreOption = None,
    output_dir: OutputDirOption = None,
    quiet: QuietOption = False,
) -> None:
    """Continue a run from its last checkpoint (after a crash, kill or budget stop)."""
    with opened_store(store) as db:
        try:
            run, _, checkpoint = load_run(db, run_id)
        except (RunNotFound, ValueError) as exc:
            fail(str(exc))
        changes = {
            key: value
            for key, value in {
                "iterations": iterations,
                "budget_usd": budget_usd,
                "budget_tokens": budget_tokens,
                "budget_wall_s": budget_wall_s,
            }.items()
            if value is not None
        }
        if run.status == "completed" and not changes.get("iterations"):
            fail(
                f"run {run_id} is already completed; see `accelopt runs show {run_id}` (or "
                "continue it with a larger --iterations)"
            )
        if run.status == "running" and worker_alive(checkpoint):
            fail(
                f"run {run_id} is still being run by process {checkpoint.worker_pid}; stop it "
                "first or wait for it"
            )
        if changes:
            try:
                change_settings(db, run_id, **changes)
            except (ValueError, ValidationError) as exc:
                fail(str(exc))
            if run.status == "completed":
                db.update_run(run_id, RunUpdate(status="pending"))
        _drive(db, run_id, output_dir or default_output_dir(), quiet)


def _drive(db: KernelStore, run_id: str, output_dir: Path, quiet: bool) -> None:
    display = _LiveDisplay(run_id)
    engine = BeamSearch(
        db, run_id, on_event=None if quiet else display.update, output_dir=output_dir
    )
    try:
        if quiet:
            run = asyncio.run(engine.run_with_signals())
        else:
            with Live(display.render(), console=console, refresh_per_second=4) as live:
                display.live = live
                run = asyncio.run(engine.run_with_signals())
    except (InitialKernelFailed, RunBusy) as exc:
        fail(str(exc))
    except LlmConfigError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        fail(f"interrupted; continue with `accelopt resume {run_id}`", code=130)
    _summary(db, run_id, output_dir)
    if run.status == "failed":
        raise typer.Exit(1)


class _LiveDisplay:
    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.last: EngineEvent | None = None
        self.live: Live | None = None

    def update(self, event: EngineEvent) -> None:
        self.last = event
        if self.live is not None:
            self.live.update(self.render())

    def render(self) -> Table:
        table = Table(title=f"accelopt run {self.run_id}", show_header=False, box=None)
        event = self.last
        if event is None:
            table.add_row("status", "starting (profiling the initial kernel)")
            return table
        best = event.best_latency_ms
        ratio = speedup(event.initial_latency_ms, best)
        shown = f"{ratio:.2f}x" if ratio else "-"
        table.add_row("iteration", f"{event.iteration} / {event.iterations_total}")
        table.add_row("progress", f"{event.progress * 100:.0f}%")
        table.add_row(
            "attempts",
            f"{event.attempts_done} done, {event.attempts_passed} passed, "
            f"{event.attempts_failed} failed",
        )
        table.add_row("best latency", f"{best:.4g} ms ({shown})" if best else "-")
        table.add_row("LLM", f"{event.tokens_in + event.tokens_out} tokens, ${event.cost_usd:.4f}")
        table.add_row("last", escape(event.message))
        return table


def _summary(db: KernelStore, run_id: str, output_dir: Path) -> None:
    run, spec, checkpoint = load_run(db, run_id)
    table = Table(title=f"run {run_id}: {run.status}")
    for column in ("iteration", "attempts", "passed", "failed", "experiences", "best ms"):
        table.add_column(column, justify="right")
    for item in checkpoint.history:
        best = f"{item.best_latency_ms:.4g}" if item.best_latency_ms else "-"
        table.add_row(
            str(item.iteration),
            str(item.attempts),
            str(item.passed),
            str(item.failed),
            str(item.experiences_added),
            best,
        )
    console.print(table)
    initial = checkpoint.initial.latency_ms if checkpoint.initial else None
    if initial and run.best_latency_ms:
        console.print(
            f"initial {initial:.4g} ms -> best {run.best_latency_ms:.4g} ms "
            f"({initial / run.best_latency_ms:.2f}x), LLM cost ${run.cost_usd:.4f}"
        )
    if run.error:
        console.print(f"stopped: {escape(run.error)}")
    plot = plot_best_latency(
        checkpoint.history,
        initial,
        output_dir / run_id / "best_latency.png",
        f"{spec.task.definition.name} ({run_id[:8]})",
    )
    if plot is not None:
        console.print(f"plot: {plot}")
    if checkpoint.winning_kernel_path:
        console.print(f"winning kernel: {checkpoint.winning_kernel_path}")
