"""Resume after a real SIGKILL of a real `accelopt optimize` process: nothing finished is lost
or done again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accelopt_mcp.engine.checkpoint import Checkpoint
from accelopt_mcp.engine.runs import load_run
from accelopt_mcp.store.sqlite import SqliteStore
from tests.engine.conftest import KERNEL_PATH, KEY, KEY_ENV, TASK_PATH, build_script, models_config
from tests.llm_standin.process import StandinProcess

StartStandin = Callable[[dict[str, Any]], StandinProcess]
ACCELOPT = [sys.executable, "-c", "from accelopt_mcp.cli import main; main()"]


def _mid_iteration(checkpoint: Checkpoint, plans: int, attempts: int) -> bool:
    """Some, not all, attempts of an iteration are finished."""
    if checkpoint.initial is None:
        return False
    beams = {1: 1} | {h.iteration + 1: len(h.beam) for h in checkpoint.history}
    for iteration, width in beams.items():
        done = len(checkpoint.slots_of(iteration))
        if 2 <= done < width * plans * attempts:
            return True
    return False


def _requests(standin: StandinProcess, role: str) -> int:
    return sum(1 for r in standin.requests() if r["role"] == role)


def test_resume_after_sigkill_loses_and_redoes_nothing(
    start_standin: StartStandin, tmp_path: Path
) -> None:
    standin = start_standin(build_script(faults=False, latency_s=0.15))
    # One executor call at a time, so attempts finish one by one and the kill lands mid-way.
    models = models_config(standin.base_url, tmp_path / "models.json", executor={"concurrency": 1})
    preset = tmp_path / "preset.json"
    preset.write_text(
        json.dumps(
            {
                "iterations": 2,
                "beam": 2,
                "plans": 2,
                "attempts": 2,
                "topk": 2,
                "exp_n": 4,
                "workers": 2,
                "benchmark": {
                    "seeds": [0, 1],
                    "warmup_runs": 1,
                    "iterations": 3,
                    "max_measurement_rounds": 1,
                    "min_processes": 1,
                    "max_processes": 2,
                    "max_timing_seconds": 1.0,
                    "timeout_seconds": 4,
                },
            }
        )
    )
    db_path = tmp_path / "kernels.db"
    env = {**os.environ, KEY_ENV: KEY, "ACCELOPT_HOME": str(tmp_path / "home")}
    common = ["--store", str(db_path), "--output-dir", str(tmp_path / "out"), "--quiet"]
    process = subprocess.Popen(
        [
            *ACCELOPT,
            "optimize",
            str(KERNEL_PATH),
            "--task",
            str(TASK_PATH),
            "--preset",
            str(preset),
            "--config",
            str(models),
            *common,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    store = SqliteStore(db_path)
    try:
        deadline = time.monotonic() + 90
        run_id = None
        while time.monotonic() < deadline and process.poll() is None:
            runs = store.list_runs(limit=1) if db_path.exists() else []
            if runs:
                run_id = runs[0].id
                _, _, checkpoint = load_run(store, run_id)
                if _mid_iteration(checkpoint, plans=2, attempts=2):
                    break
            time.sleep(0.02)
        assert process.poll() is None, process.stdout.read() if process.stdout else ""
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        assert run_id is not None
        executor_before = _requests(standin, "executor")
        planner_before = _requests(standin, "planner")

        run, _, at_kill = load_run(store, run_id)
        assert run.status == "running"  # nobody got to record anything else
        finished = dict(at_kill.slots)
        assert finished
        stamps = {
            slot.solution_id: [
                p.evaluation.timestamp for p in store.list_profiles(solution_id=slot.solution_id)
            ]
            for slot in finished.values()
            if slot.solution_id
        }
        plans_at_kill = {k: list(v) for k, v in at_kill.plans.items()}

        resumed = subprocess.run(
            [*ACCELOPT, "resume", run_id, *common],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr

        run, _, final = load_run(store, run_id)
        assert run.status == "completed"
        assert final.completed_iteration == 2
        # Finished attempts are kept as they were...
        for key, slot in finished.items():
            assert final.slots[key] == slot
        for solution_id, before in stamps.items():
            after = [p.evaluation.timestamp for p in store.list_profiles(solution_id=solution_id)]
            assert after == before, "a finished profile was measured again"
        for key, plans in plans_at_kill.items():
            for index, plan in enumerate(plans):
                if plan is not None:
                    assert final.plans[key][index] == plan
        # ...and only the unfinished ones were asked of the executor again.
        executor_after = _requests(standin, "executor") - executor_before
        assert executor_after == len(final.slots) - len(finished)
        planner_after = _requests(standin, "planner") - planner_before
        known_plans = sum(1 for plans in plans_at_kill.values() for p in plans if p is not None)
        total_plans = sum(len(plans) for plans in final.plans.values())
        assert planner_after == total_plans - known_plans
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
        store.close()


def test_time_before_a_sigkill_counts_against_the_wall_budget(
    start_standin: StartStandin, tmp_path: Path
) -> None:
    standin = start_standin(build_script(faults=False, latency_s=0.3))
    models = models_config(standin.base_url, tmp_path / "models.json", executor={"concurrency": 1})
    preset = tmp_path / "preset.json"
    preset.write_text(
        json.dumps(
            {
                "iterations": 4,
                "beam": 2,
                "plans": 2,
                "attempts": 2,
                "workers": 2,
                "benchmark": {
                    "seeds": [0, 1],
                    "warmup_runs": 1,
                    "iterations": 3,
                    "max_measurement_rounds": 1,
                    "min_processes": 1,
                    "max_processes": 2,
                    "max_timing_seconds": 1.0,
                    "timeout_seconds": 4,
                },
            }
        )
    )
    db_path = tmp_path / "kernels.db"
    env = {**os.environ, KEY_ENV: KEY, "ACCELOPT_HOME": str(tmp_path / "home")}
    common = ["--store", str(db_path), "--output-dir", str(tmp_path / "out"), "--quiet"]
    launched = time.monotonic()
    process = subprocess.Popen(
        [
            *ACCELOPT,
            "optimize",
            str(KERNEL_PATH),
            "--task",
            str(TASK_PATH),
            "--preset",
            str(preset),
            "--config",
            str(models),
            *common,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    store = SqliteStore(db_path)
    try:
        # Let it work for a while (well over the 1 s budget given below), then kill it.
        run_id = None
        while time.monotonic() < launched + 90 and process.poll() is None:
            runs = store.list_runs(limit=1) if db_path.exists() else []
            if runs:
                run_id = runs[0].id
                _, _, checkpoint = load_run(store, run_id)
                if len(checkpoint.slots) >= 3 and time.monotonic() > launched + 8:
                    break
            time.sleep(0.05)
        assert process.poll() is None, "the run ended before it could be killed"
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        assert run_id is not None
        calls_before = len(standin.requests())

        resumed = subprocess.run(
            [*ACCELOPT, "resume", run_id, "--budget-wall-s", "1", *common],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        run, _, final = load_run(store, run_id)
        assert run.status == "budget_exhausted"
        assert run.error and "wall-time budget" in run.error
        assert len(standin.requests()) == calls_before, "the killed run's time was not counted"
        assert final.elapsed_before_s > 1
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        store.close()
