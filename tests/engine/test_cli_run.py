"""`accelopt optimize` run for real as a user runs it under nohup or CI: the console script in
a subprocess whose stdout is a pipe, the scripted LLM stand-in, the silu task on the CPU. How a
run against a dead endpoint ends is run in this process (tests/cli_inprocess.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from accelopt_mcp.cli.optimize import outcome
from accelopt_mcp.engine.checkpoint import Checkpoint, RunSpec
from accelopt_mcp.engine.config import OptimizeConfig
from accelopt_mcp.engine.events import ActivityWatcher, EngineEvent
from accelopt_mcp.engine.live_run import LiveRun
from accelopt_mcp.engine.run_events import RunEvents
from accelopt_mcp.engine.runs import load_run
from accelopt_mcp.llm import Budget
from accelopt_mcp.models import Solution, Task
from accelopt_mcp.store.sqlite import SqliteStore
from tests.cli_inprocess import Finished, run_accelopt
from tests.engine.conftest import (
    KERNEL_PATH,
    KEY,
    KEY_ENV,
    TASK_PATH,
    build_script,
    models_config,
    one_plan_preset,
)
from tests.llm_standin.process import StartStandin

ACCELOPT = str(Path(sys.executable).parent / "accelopt")
STAMPED = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d (?P<kind>[a-z_]+): ")


def small_preset(path: Path) -> Path:
    return one_plan_preset(path, attempts=2, exp_n=2, workers=2)


def console_script(*args: str | Path) -> subprocess.CompletedProcess[str]:
    # stdout is a pipe (not a terminal); 40 columns would wrap anything rich wraps.
    env = {**os.environ, "COLUMNS": "40", KEY_ENV: KEY}
    env.pop("ACCELOPT_STORE", None)
    return subprocess.run(
        [ACCELOPT, *map(str, args)], capture_output=True, text=True, timeout=240, env=env
    )


def accelopt(*args: str | Path) -> Finished:
    """The same command in this process (its stdout is not a terminal either)."""
    return run_accelopt(*args, env={"COLUMNS": "40", KEY_ENV: KEY})


def test_optimize_under_a_pipe_prints_plain_lines_and_ends_with_the_outcome(
    start_standin: StartStandin, tmp_path: Path
) -> None:
    standin = start_standin(build_script(faults=False))
    models = models_config(standin.base_url, tmp_path / "models.json")
    output_dir = tmp_path / "an-output-folder-with-a-name-long-enough-to-wrap-at-40-columns"
    store = tmp_path / "kernels.db"
    done = console_script(
        "optimize", KERNEL_PATH, "--task", TASK_PATH, "--preset", small_preset(tmp_path / "p.json"),
        "--config", models, "--store", store, "--output-dir", output_dir,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "\x1b[" not in done.stdout  # no terminal codes, no live view
    first = re.fullmatch(r"run (?P<id>[0-9a-f-]{36}) \(silu_M512_N1024\)", lines[0])
    assert first is not None, lines[0]
    run_id = first["id"]

    events = [m for line in lines if (m := STAMPED.match(line))]
    kinds = [m["kind"] for m in events]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    assert kinds.count("attempt_profiled") == 2
    for match in events:
        line = match.string
        assert " | iteration " in line and re.search(
            r" \| (idle|waiting on .+|profiling \d+ attempts?( on \d+/\d+ devices)?)$", line
        ), line

    # Whole paths on lines of their own, even at 40 columns.
    plot = next(line for line in lines if line.startswith("plot: "))
    assert Path(plot.removeprefix("plot: ")) == output_dir / run_id / "best_latency.png"
    assert Path(plot.removeprefix("plot: ")).is_file()
    winner = next(line for line in lines if line.startswith("winning kernel: "))
    assert Path(winner.removeprefix("winning kernel: ")).is_file()

    with SqliteStore(store) as db:
        run, _, checkpoint = load_run(db, run_id)
    assert run.status == "completed"
    assert lines[-1] == outcome(run, checkpoint)[0]
    if run.best_solution_id != run.initial_solution_id:
        assert re.fullmatch(
            rf"run {run_id}: completed, best [0-9.]+ ms \([0-9.]+x over the initial kernel, "
            r"[0-9.]+x over the reference\)",
            lines[-1],
        ), lines[-1]
    else:  # the stand-in's fast kernel lost to noise on a busy host, or timed out
        assert lines[-1].startswith(f"run {run_id}: completed, but no attempt ")


def test_a_dead_endpoint_stops_the_run_as_llm_unavailable_with_exit_code_3(
    tmp_path: Path,
) -> None:
    models = tmp_path / "dead.json"
    models.write_text(
        json.dumps(
            {"default": {"base_url": "http://127.0.0.1:9/v1", "model": "m", "max_retries": 0}}
        )
    )
    store = tmp_path / "kernels.db"
    refused = accelopt(
        "optimize", KERNEL_PATH, "--task", TASK_PATH, "--config", models, "--store", store,
    )  # fmt: skip
    assert refused.returncode == 2
    assert refused.stderr.startswith("error: LLM check failed") and not store.exists()

    done = accelopt(
        "optimize", KERNEL_PATH, "--task", TASK_PATH, "--preset", small_preset(tmp_path / "p.json"),
        "--config", models, "--store", store, "--skip-llm-check", "--quiet",
    )  # fmt: skip
    assert done.returncode == 3, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    last = done.stdout.splitlines()[-1]
    found = re.match(r"run ([0-9a-f-]{36}): llm_unavailable: .+; fix the endpoint", last)
    assert found, last
    shown = accelopt("runs", "show", found.group(1), "--store", store)
    assert shown.returncode == 0, shown.stderr
    assert "llm_unavailable" in shown.stdout
    assert "stopped: every LLM call of iteration 1 failed" in shown.stdout
    assert "no attempt passed" in shown.stdout


def test_events_carry_what_the_run_waits_on(silu_task: Task, silu_baseline: Solution) -> None:
    class Sink:
        def __init__(self) -> None:
            self.events: list[EngineEvent] = []
            self.source: Any = None

        def __call__(self, event: EngineEvent) -> None:
            self.events.append(event)

        def watch_activity(self, source: Any) -> None:
            self.source = source

    in_flight = {"planner": 2, "executor": 0}
    busy = [1]
    sink = Sink()
    assert isinstance(sink, ActivityWatcher)
    spec = RunSpec(optimize=OptimizeConfig(), task=silu_task, initial_solution=silu_baseline)
    events = RunEvents(
        sink,
        "r1",
        spec,
        LiveRun(Checkpoint()),
        Budget(),
        llm_in_flight=lambda: in_flight,
        profiling_busy=lambda: busy[0],
    )
    events.emit("run_started", 0, "run started")
    (event,) = sink.events
    assert event.llm_waiting == {"planner": 2} and event.profiling == 1
    in_flight["executor"] = 4
    busy[0] = 0
    assert sink.source().describe() == "waiting on planner (2 calls), executor (4 calls)"

    def broken() -> dict[str, int]:
        raise RuntimeError("dictionary changed size during iteration")

    # Old callers pass neither; a broken source counts as nothing in flight.
    plain = RunEvents(sink, "r1", spec, LiveRun(Checkpoint()), Budget(), llm_in_flight=broken)
    plain.emit("run_started", 0, "run started")
    assert sink.events[-1].llm_waiting == {} and sink.events[-1].profiling == 0
