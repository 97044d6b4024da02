"""`accelopt optimize` and `accelopt resume`: run the beam search here, with a live display
in a terminal, one timestamped line per event elsewhere (nohup, pipes, CI), and a last line
that says how the run ended."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, TextIO

import typer
from pydantic import ValidationError
from rich.live import Live
from rich.text import Text

from accelopt_mcp.backends.base import BackendUnavailableError
from accelopt_mcp.backends.cluster import ClusterError, cluster_address
from accelopt_mcp.backends.placement import require_backend_where
from accelopt_mcp.cli.common import (
    ClusterOption,
    StoreOption,
    full_id,
    opened_store,
    task_and_kernel,
)
from accelopt_mcp.cli.output import Table, console, fail, plain, say
from accelopt_mcp.cli.run_options import with_run_options
from accelopt_mcp.engine.beam import BeamSearch, InitialKernelFailed, RunNotRunnable
from accelopt_mcp.engine.checkpoint import Checkpoint
from accelopt_mcp.engine.config import resolve_optimize_config
from accelopt_mcp.engine.events import Activity, ActivitySource, EngineEvent
from accelopt_mcp.engine.presets import PRESETS
from accelopt_mcp.engine.report import plot_best_latency, reference_latency
from accelopt_mcp.engine.runs import (
    RunNotFound,
    change_settings,
    default_output_dir,
    holder_alive,
    load_run,
    prepare_run,
    result_text,
    speedup,
)
from accelopt_mcp.llm import LlmConfigError, load_role_configs
from accelopt_mcp.store.base import KernelStore, RunRecord, RunUpdate, StoreOutageError
from accelopt_mcp.viewer.links import run_url

OutputDirOption = Annotated[
    Path | None,
    typer.Option(
        "--output-dir", help="Where the winning kernel and plot go (default: next to the DB)."
    ),
]
QuietOption = Annotated[
    bool, typer.Option("--quiet", "-q", help="No live display (or progress lines).")
]
SkipLlmCheckOption = Annotated[
    bool,
    typer.Option(
        "--skip-llm-check",
        help="Start without first checking that every role's LLM endpoint answers (offline).",
    ),
]
log = logging.getLogger(__name__)


@with_run_options(before="store")
def optimize(
    kernel: Annotated[Path, typer.Argument(help="Initial kernel: a kernel .py or solution .json.")],
    task: Annotated[
        Path, typer.Option("--task", help="Task: definition .json, NKIBench task .py or folder.")
    ],
    workload: Annotated[str | None, typer.Option(help="Workload uuid or index.")] = None,
    preset: Annotated[
        str | None,
        typer.Option(help=f"Run settings: {', '.join(PRESETS)} or a JSON file (default quick)."),
    ] = None,
    store: StoreOption = None,
    output_dir: OutputDirOption = None,
    quiet: QuietOption = False,
    skip_llm_check: SkipLlmCheckOption = False,
    cluster: ClusterOption = None,
    *,
    given: Mapping[str, Any],
) -> None:
    """Optimize KERNEL for TASK with the AccelOpt beam search; stores everything in the DB."""
    overrides = {
        **given,
        # Kept with the run (ACCELOPT_RAY_ADDRESS resolved now), so that a resume, here or by
        # a server with another environment, profiles where the run started.
        "cluster": cluster_address(cluster) or "local",
    }
    try:
        settings = resolve_optimize_config(preset, overrides)
    except ValueError as exc:
        fail(str(exc))
    # What cannot work is refused here, before a run row exists.
    _check_backend(settings.backend, settings.cluster)
    loaded_task, solution = task_and_kernel(task, workload, kernel, settings.backend)
    _check_llm(settings.models_config, settings.summarize, probe=not skip_llm_check)
    with opened_store(store) as db:
        run_id = prepare_run(
            db,
            loaded_task,
            solution,
            settings,
            request={"kernel_path": str(kernel), "task_path": str(task), "workload": workload},
        )
        say("run ", (run_id, "bold"), f" ({loaded_task.definition.name})")
        _say_viewer(db, run_id)
        _drive(db, run_id, output_dir or default_output_dir(), quiet)


def resume(
    run_id: Annotated[str, typer.Argument(help="The run to continue (id, or 8+ characters).")],
    iterations: Annotated[int | None, typer.Option(help="Raise T (run longer).")] = None,
    budget_usd: Annotated[float | None, typer.Option(help="New USD cap.")] = None,
    budget_tokens: Annotated[int | None, typer.Option(help="New token cap.")] = None,
    budget_wall_s: Annotated[float | None, typer.Option(help="New wall-time cap (s).")] = None,
    store: StoreOption = None,
    output_dir: OutputDirOption = None,
    quiet: QuietOption = False,
    skip_llm_check: SkipLlmCheckOption = False,
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster",
            help="Profile on this Ray cluster from now on ('local': this host); default: "
            "where the run was started.",
        ),
    ] = None,
) -> None:
    """Continue a run from its last checkpoint (after a crash, kill or budget stop)."""
    with opened_store(store) as db:
        run_id = full_id(db, "run", run_id, noun="run", hint="list runs with `accelopt runs list`")
        try:
            run, spec, checkpoint = load_run(db, run_id)
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
        if run.status in ("running", "pending") and holder_alive(run, checkpoint):
            fail(
                f"run {run_id} is still being run by worker {run.worker_id or '?'}; stop "
                "it first (Ctrl-C where it runs, or cancel_job over MCP) or wait for it"
            )
        # --cluster local is kept as said: this host from now on, whatever the environment.
        where = (cluster_address(cluster) or "local") if cluster is not None else None
        hardware = _check_backend(spec.optimize.backend, where or spec.optimize.cluster)
        if checkpoint.hardware and hardware and hardware != checkpoint.hardware:
            fail(
                f"run {run_id} was measured on {checkpoint.hardware}, but it would now profile "
                f"on {hardware}: its stored figures would be ranked against new ones; resume "
                "it where it ran (--cluster), or start a new run"
            )
        _check_llm(spec.optimize.models_config, spec.optimize.summarize, probe=not skip_llm_check)
        if changes or where is not None:
            try:
                change_settings(
                    db, run_id, **changes, **({"cluster": where} if where is not None else {})
                )
            except (ValueError, ValidationError) as exc:
                fail(str(exc))
            if run.status == "completed":
                db.update_run(run_id, RunUpdate(status="pending"))
        # Without --output-dir, the folder the run was started with (its winner, plot, lock).
        kept = Path(checkpoint.output_dir) if checkpoint.output_dir else None
        _say_viewer(db, run_id)
        _drive(db, run_id, output_dir or kept or default_output_dir(), quiet)


def _check_backend(name: str, cluster: str | None = None) -> str | None:
    """The hardware the backend's evaluations would run on; stops (one line, exit code 2)
    when it cannot run on this host, or on the cluster the run profiles on (cluster None:
    ACCELOPT_RAY_ADDRESS, else this host)."""
    address = cluster_address(cluster)
    try:
        return require_backend_where(name, address)
    except (BackendUnavailableError, ClusterError, ValueError) as exc:
        shows = f"`accelopt backends --cluster {address}`" if address else "`accelopt backends`"
        fail(f"{exc}; {shows} shows what runs {'there' if address else 'here'}")


def _check_llm(models_config: str | None, summarize: bool = True, *, probe: bool = True) -> None:
    """Stop (one line, exit code 2, before a run row exists) when a role's LLM endpoint cannot
    serve it. probe False (--skip-llm-check): only what needs no network, the model config and
    every role's API key variable."""
    # Imported here: the check needs the network stack only when it runs.
    from accelopt_mcp.llm.client import check_keys
    from accelopt_mcp.llm.preflight import PreflightFailed, check_endpoints, roles_used

    try:
        configs = load_role_configs(Path(models_config) if models_config else None)
        check_keys(configs, roles_used(summarize))
        if probe:
            asyncio.run(check_endpoints(configs, roles_used(summarize)))
    except PreflightFailed as exc:
        fail(f"{exc} (or pass --skip-llm-check to start anyway)")
    except LlmConfigError as exc:  # a config or key no run could work with
        fail(str(exc))


# --------------------------------------------------------------------------- driving a run


def _drive(db: KernelStore, run_id: str, output_dir: Path, quiet: bool) -> None:
    """Run the engine to its end, showing progress; then the summary, whose last line says how
    the run ended, and the exit code that goes with it (see outcome)."""
    crash: str | None = None
    try:
        if quiet:
            asyncio.run(BeamSearch(db, run_id, output_dir=output_dir).run_with_signals())
        elif _stdout_is_terminal():
            display = LiveDisplay(run_id)
            engine = BeamSearch(db, run_id, on_event=display, output_dir=output_dir)
            with Live(get_renderable=display.render, console=console, refresh_per_second=4):
                asyncio.run(engine.run_with_signals())
        else:
            lines = EventLines(sys.stdout)
            engine = BeamSearch(db, run_id, on_event=lines, output_dir=output_dir)
            asyncio.run(engine.run_with_signals())
    except (InitialKernelFailed, RunNotRunnable, LlmConfigError) as exc:
        # RunNotRunnable: another worker holds the run (or took it over): nothing more to do.
        fail(str(exc))
    except KeyboardInterrupt:
        fail(f"interrupted; continue with `accelopt resume {run_id}`", code=130)
    except StoreOutageError as exc:
        # Nothing is lost and the run is not failed: it goes on from its checkpoint.
        fail(
            f"run {run_id} interrupted: {exc}; once the database is back, continue with "
            f"`accelopt resume {run_id}`",
            code=75,
        )
    except Exception as exc:  # recorded on the run as failed; said in the last line
        log.debug("run %s raised", run_id, exc_info=True)
        crash = f"{type(exc).__name__}: {exc}"
    raise typer.Exit(_summary(db, run_id, output_dir, crash))


def _say_viewer(db: KernelStore, run_id: str) -> None:
    """The run's page, when `accelopt view` serves this database (no token in the link: it
    opens in the browser that opened the viewer's own URL, and may go into a log)."""
    url = run_url(db, run_id)
    if url is not None:
        say(f"watch it: {url}")


def _stdout_is_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # replaced or closed stdout
        return False


def _latency_text(best_ms: float | None, initial_ms: float | None) -> str:
    if not best_ms:
        return "-"
    ratio = speedup(initial_ms, best_ms)
    return f"{best_ms:.4g} ms ({ratio:.2f}x vs initial)" if ratio else f"{best_ms:.4g} ms"


class LiveDisplay:
    """The live view in a terminal: the run's figures at its last event, and what it waits
    on now (read from the engine's activity source at every refresh, between events too)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.last: EngineEvent | None = None
        self._activity: ActivitySource | None = None

    def __call__(self, event: EngineEvent) -> None:
        self.last = event

    def watch_activity(self, source: ActivitySource) -> None:
        self._activity = source

    def activity(self) -> Activity | None:
        """What the run is doing now; at the last event when the engine gave no source."""
        if self._activity is not None:
            try:
                return self._activity()
            except Exception:  # a display must never stop a run
                log.debug("activity source failed", exc_info=True)
        return self.last.activity if self.last is not None else None

    def render(self) -> Table:
        table = Table(show_header=False, box=None)
        table.add_row("run", plain(self.run_id))
        event = self.last
        activity = self.activity()
        if event is None:
            table.add_row("status", "starting (profiling the initial kernel)")
            if activity is not None:
                table.add_row("now", plain(activity.describe()))
            return table
        table.add_row("iteration", f"{event.iteration} / {event.iterations_total}")
        table.add_row("progress", f"{event.progress * 100:.0f}%")
        table.add_row(
            "attempts",
            f"{event.attempts_done} done, {event.attempts_passed} passed, "
            f"{event.attempts_failed} failed",
        )
        best = _latency_text(event.best_latency_ms, event.initial_latency_ms)
        table.add_row("best latency", best)
        table.add_row("LLM", f"{event.tokens_in + event.tokens_out} tokens, ${event.cost_usd:.4f}")
        if activity is not None:
            table.add_row("now", plain(activity.describe()))
        table.add_row("last", plain(event.message))
        return table


def event_line(event: EngineEvent) -> str:
    """One event as one plain line (no timestamp): what happened, the run's figures, and what
    it is waiting on."""
    figures = (
        f"iteration {event.iteration}/{event.iterations_total}, "
        f"{event.attempts_done} attempt{'' if event.attempts_done == 1 else 's'} "
        f"({event.attempts_passed} passed, "
        f"{event.attempts_failed} failed), "
        f"best {_latency_text(event.best_latency_ms, event.initial_latency_ms)}, "
        f"LLM ${event.cost_usd:.4f} ({event.tokens_in + event.tokens_out} tokens)"
    )
    return f"{event.kind}: {event.message} | {figures} | {event.activity.describe()}"


class EventLines:
    """Progress where no one watches a terminal: one line per event, timestamped and flushed
    at once, never wrapped or cut."""

    def __init__(self, stream: TextIO) -> None:
        self.stream: TextIO | None = stream

    def __call__(self, event: EngineEvent) -> None:
        if self.stream is None:
            return
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(event.at))
        try:
            self.stream.write(f"{stamp} {event_line(event)}\n")
            self.stream.flush()
        except (OSError, ValueError):  # the reader went away (`| head`): the run goes on
            self.stream = None


# --------------------------------------------------------------------------- the run's end

EXIT_CODES = {"completed": 0, "budget_exhausted": 0, "cancelled": 0, "failed": 1}
LLM_UNAVAILABLE_EXIT = 3


def outcome(run: RunRecord, checkpoint: Checkpoint, crash: str | None = None) -> tuple[str, int]:
    """The run's last line, and the command's exit code: 0 completed (with or without a
    faster kernel), budget_exhausted or cancelled; 1 failed; 3 llm_unavailable."""
    status = run.status
    head = f"run {run.id}: {status}"
    reason = run.error or crash
    if status == "completed":
        return f"{head}, {result_text(run, checkpoint)}", 0
    if status == "llm_unavailable":
        return (
            f"{head}: {reason or 'the LLM calls failed'}; fix the endpoint or model config, "
            f"then `accelopt resume {run.id}`",
            LLM_UNAVAILABLE_EXIT,
        )
    if status == "budget_exhausted":
        return (
            f"{head}: {reason or 'a budget ran out'}; {result_text(run, checkpoint)}; raise the "
            f"budget and `accelopt resume {run.id}` to go on",
            0,
        )
    if status == "cancelled":
        return f"{head}; {result_text(run, checkpoint)}; go on with `accelopt resume {run.id}`", 0
    if status == "failed" or crash is not None:
        return f"run {run.id}: failed: {reason or 'no reason recorded'}", 1
    return head, EXIT_CODES.get(status, 0)


def _summary(db: KernelStore, run_id: str, output_dir: Path, crash: str | None) -> int:
    """Print the run's iterations, plot and winner, and last the outcome line; the exit
    code."""
    try:
        run, spec, checkpoint = load_run(db, run_id)
    except (RunNotFound, ValueError) as exc:
        say(f"run {run_id}: failed: {crash or exc}")
        return 1
    table = Table()
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
    if checkpoint.history:
        say(f"run {run_id}: {run.status}")
        console.print(table)
    initial = checkpoint.initial.latency_ms if checkpoint.initial else None
    if initial and run.best_latency_ms:
        say(
            f"initial {initial:.4g} ms -> best {run.best_latency_ms:.4g} ms "
            f"({initial / run.best_latency_ms:.2f}x), LLM cost ${run.cost_usd:.4f}"
        )
    if checkpoint.initial is not None:
        plot = plot_best_latency(
            checkpoint.history,
            initial,
            output_dir / run_id / "best_latency.png",
            f"{spec.task.definition.name} ({run_id[:8]})",
            reference_latency(initial, checkpoint.initial.reference_speedup),
        )
        if plot is not None:
            say(f"plot: {plot}")
    if checkpoint.winning_kernel_path:
        say(f"winning kernel: {checkpoint.winning_kernel_path}")
    _say_viewer(db, run_id)
    line, code = outcome(run, checkpoint, crash)
    style = "green" if code == 0 and run.status == "completed" else "bold red" if code else ""
    say(Text(line, style=style))
    return code
