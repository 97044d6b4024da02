"""Resume after a real SIGKILL of a real `accelopt optimize` process: nothing finished is lost
or done again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accelopt_mcp.backends.pool import DevicePool
from accelopt_mcp.engine.checkpoint import Checkpoint
from accelopt_mcp.engine.runs import load_run
from accelopt_mcp.profiling import profile_kernel
from accelopt_mcp.store.sqlite import SqliteStore
from tests.engine.conftest import (
    KERNEL_PATH,
    KEY,
    KEY_ENV,
    TASK_PATH,
    build_script,
    models_config,
    write_preset,
)
from tests.llm_standin.process import StandinProcess, StartStandin

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


def _optimize_in_background(
    tmp_path: Path, models: Path, preset: dict[str, Any], **output: Any
) -> tuple[subprocess.Popen[bytes], dict[str, str], list[str]]:
    """`accelopt optimize` of the silu kernel with `preset` (on FAST_BENCH's settings), as a
    process of its own that stores in tmp_path/kernels.db; gives the process, and the
    environment and the options to resume its run with. `output`: where its output goes."""
    preset_path = write_preset(tmp_path / "preset.json", **preset)
    env = {**os.environ, KEY_ENV: KEY, "ACCELOPT_HOME": str(tmp_path / "home")}
    common = [
        "--store",
        str(tmp_path / "kernels.db"),
        "--output-dir",
        str(tmp_path / "out"),
        "--quiet",
    ]
    process = subprocess.Popen(
        [
            *ACCELOPT,
            "optimize",
            str(KERNEL_PATH),
            "--task",
            str(TASK_PATH),
            "--preset",
            str(preset_path),
            "--config",
            str(models),
            *common,
        ],
        env=env,
        **output,
    )
    return process, env, common


def _watch_run(
    store: SqliteStore,
    process: subprocess.Popen[bytes],
    until: Callable[[Checkpoint], bool],
    deadline: float,
    pause_s: float,
) -> str | None:
    """Reads the run `process` makes until `until` holds of its checkpoint (or the process
    ends, or the deadline passes); gives the run's id, None if it made none."""
    run_id = None
    while time.monotonic() < deadline and process.poll() is None:
        runs = store.list_runs(limit=1) if Path(store.path).exists() else []
        if runs:
            run_id = runs[0].id
            _, _, checkpoint = load_run(store, run_id)
            if until(checkpoint):
                break
        time.sleep(pause_s)
    return run_id


def _resume(run_id: str, *options: str, env: dict[str, str]) -> None:
    """`accelopt resume RUN_ID OPTIONS` in a process of its own, to its successful end."""
    resumed = subprocess.run(
        [*ACCELOPT, "resume", run_id, *options],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr


def test_resume_after_sigkill_loses_and_redoes_nothing(
    start_standin: StartStandin, tmp_path: Path
) -> None:
    standin = start_standin(build_script(faults=False, latency_s=0.15))
    # One executor call at a time, so attempts finish one by one and the kill lands mid-way.
    models = models_config(standin.base_url, tmp_path / "models.json", executor={"concurrency": 1})
    preset = {
        "iterations": 2,
        "beam": 2,
        "plans": 2,
        "attempts": 2,
        "topk": 2,
        "exp_n": 4,
        # One planner call per plan, so that the count of calls redone is exact.
        "plan_mode": "independent",
        "workers": 2,
    }
    process, env, _ = _optimize_in_background(
        tmp_path, models, preset, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    db_path = tmp_path / "kernels.db"
    store = SqliteStore(db_path)
    try:
        # Mid-iteration, with a kernel stored whose attempt is not finished (being profiled):
        # the window a crash used to lose.
        run_id = _watch_run(
            store,
            process,
            lambda c: _mid_iteration(c, plans=2, attempts=2) and bool(c.pending),
            deadline=time.monotonic() + 90,
            pause_s=0.02,
        )
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
        pending = dict(at_kill.pending)
        assert pending
        assert not set(pending) & set(finished)
        # One pending kernel gets its profile stored, as when the kill lands after the profile
        # was written but before the attempt was: the resumed run must take it, not redo it.
        profiled_key, profiled = next(iter(pending.items()))
        _, spec, _ = load_run(store, run_id)
        stored = store.get_solution(profiled.solution_id)
        assert stored is not None
        # Profiled here, filed as the run files its profiles (its pool's conditions).
        hand = profile_kernel(
            spec.task, stored.solution, config=spec.optimize.benchmark, store=store, save=False
        )
        conditions = DevicePool.for_cpu(spec.optimize.workers).measuring_conditions()
        store.upsert_profile(
            spec.task.workload.uuid,
            profiled.solution_id,
            hand.evaluation,
            spec.optimize.benchmark.profile_key(
                workers=conditions["workers"] or 1, cores=conditions["cores"]
            ),
        )
        hand_stamps = [
            p.evaluation.timestamp for p in store.list_profiles(solution_id=profiled.solution_id)
        ]
        assert len(hand_stamps) == 1, hand

        # Resumed without --output-dir: the run keeps the folder it was started with.
        _resume(run_id, "--store", str(db_path), "--quiet", env=env)

        run, _, final = load_run(store, run_id)
        assert run.status == "completed"
        assert final.completed_iteration == 2
        assert final.winning_kernel_path is not None
        assert Path(final.winning_kernel_path).is_relative_to(tmp_path / "out" / run_id)
        assert final.output_dir == str((tmp_path / "out").resolve())
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
        # ...kernels stored before the kill are profiled (or their profile taken), not asked
        # for again...
        for key, waiting in pending.items():
            slot = final.slots[key]
            # The pending kernel is the slot's result, or (it failed) the first it repaired.
            tried = [*slot.repaired_from, slot.solution_id]
            assert waiting.solution_id in tried, (key, waiting, slot)
        hand_slot = final.slots[profiled_key]
        if hand_slot.solution_id == profiled.solution_id:
            assert hand_slot.reused_profile
        after = [
            p.evaluation.timestamp for p in store.list_profiles(solution_id=profiled.solution_id)
        ]
        assert after == hand_stamps, "a stored profile was measured again"
        assert not final.pending
        # ...and only the attempts with nothing stored were asked of the executor again (plus
        # the repair tries made after the resume).
        executor_after = _requests(standin, "executor") - executor_before
        expected = sum(
            (0 if key in pending else 1)
            + slot.repairs
            - (pending[key].repairs if key in pending else 0)
            for key, slot in final.slots.items()
            if key not in finished
        )
        assert executor_after == expected
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
    preset = {"iterations": 4, "beam": 2, "plans": 2, "attempts": 2, "workers": 2}
    launched = time.monotonic()
    process, env, common = _optimize_in_background(
        tmp_path, models, preset, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    store = SqliteStore(tmp_path / "kernels.db")
    try:
        # Let it work for a while (well over the 1 s budget given below), then kill it.
        run_id = _watch_run(
            store,
            process,
            lambda c: len(c.slots) >= 3 and time.monotonic() > launched + 8,
            deadline=launched + 90,
            pause_s=0.05,
        )
        assert process.poll() is None, "the run ended before it could be killed"
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        assert run_id is not None
        calls_before = len(standin.requests())

        _resume(run_id, "--budget-wall-s", "1", *common, env=env)
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
