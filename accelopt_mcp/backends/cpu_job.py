"""The job the cpu backend hands its harness (backends/cpu_runner.py), and the limits it runs
under: what the child is started with (`runner_argv`, `TIMING_ENV`), how long and how many
processes it may take (`evaluation_backstop_s`, `stress_allowance`, `JAIL_MAX_PROCESSES`), and
the job file itself (`write_job`: the reference, each kernel's files, the plans and settings).

The parent side only (it imports pydantic models); the harness reads job.json, never this.
"""

from __future__ import annotations

import ast
import json
import secrets
import sys
from pathlib import Path
from typing import Any

from accelopt_mcp.backends.cpu_outcomes import MAX_STRESS_SETS
from accelopt_mcp.backends.cpu_result import EVALUATION_CAP_S, output_plan
from accelopt_mcp.models import BenchmarkConfig, Solution, Task
from accelopt_mcp.pysource import parse_python, source_imports_any
from accelopt_mcp.tasks.inputs import input_plan, stress_scales

RUNNER_MODULE = "accelopt_mcp.backends.cpu_runner"
HARNESS_PROCESSES = 16
JAIL_MAX_PROCESSES = 64
"""Processes and threads one jailed kernel may have at once."""
TORCH = ("torch",)
# Keep freed memory in the heap instead of returning it to the OS: otherwise every fresh
# output array of a timed call is a new mmap whose page faults (zeroing, on a loaded host)
# cost as much as a small kernel and vary from call to call.
TIMING_ENV = {
    "MALLOC_MMAP_THRESHOLD_": str(1 << 30),
    "MALLOC_TRIM_THRESHOLD_": str(1 << 31),
    "MALLOC_TOP_PAD_": str(64 << 20),
}


def reference_style(reference: str) -> str:
    """'nkibench' when the reference draws its own inputs (`get_inputs`), else 'flashinfer'."""
    try:
        module = parse_python(reference)
    except SyntaxError:
        return "flashinfer"
    names = {n.name for n in module.body if isinstance(n, ast.FunctionDef)}
    return "nkibench" if "get_inputs" in names else "flashinfer"


def evaluation_backstop_s(config: BenchmarkConfig, kernels: int, stress_sets: int = 0) -> float:
    """How long the harness may run in all before it is killed. The harness bounds every call
    itself (timeout_seconds for the import and first call, then a limit scaled from that
    call) and its sampling (max_timing_seconds, at least MIN_ROUNDS rounds), so this is the
    backstop for a harness that stops answering: every untimed call of every contestant at
    the per-call limit (the task's `stress_sets` and, when asked for, the breakdown's traced
    call included), plus the sampling cap, never past EVALUATION_CAP_S. A slow baseline
    (seconds per call) fits at the defaults; it is refused only by its own calls' limits."""
    contestants = kernels + 1
    untimed = (
        len(config.seeds)
        + 2
        + stress_sets
        + config.warmup_runs
        + config.max_processes
        + (1 if config.breakdown else 0)
    )
    needed = config.timeout_seconds * contestants * untimed + config.max_timing_seconds * 2
    return min(EVALUATION_CAP_S, needed)


def stress_allowance(reference: str) -> int:
    """How many stress sets an evaluation of this task may check, read from its source
    without running it: its STRESS_SCALES, and up to MAX_STRESS_SETS when it defines
    `stress_inputs` (how many that returns is known only in the task's jail)."""
    try:
        module = parse_python(reference)
    except SyntaxError:
        return 0
    if any(isinstance(n, ast.FunctionDef) and n.name == "stress_inputs" for n in module.body):
        return MAX_STRESS_SETS
    return min(MAX_STRESS_SETS, len(stress_scales(reference)))


def runner_argv(job: Path, result: Path) -> list[str]:
    # -I: the sandbox dir (where the candidate's files are) is not on sys.path, so a kernel
    # file cannot shadow numpy or our runner.
    return [sys.executable, "-I", "-m", RUNNER_MODULE, str(job), str(result)]


def write_job(
    work: Path,
    task: Task,
    kernels: list[tuple[str, Solution]],
    config: BenchmarkConfig,
    *,
    primary: bool,
    cpus: set[int] | None,
    jail: str,
) -> dict[str, Any]:
    """Write the harness's job into `work` (job.json, the reference, each kernel's files in a
    directory of its own) and return it. `kernels` are (label, solution) pairs, the harness's
    labels; `cpus` the cores it is pinned to (None: every usable one); `jail` 'bwrap' or
    'none'. Raises InputError or ValueError when the task's inputs cannot be planned."""
    definition, workload = task.definition, task.workload
    style = reference_style(definition.reference)
    (work / "reference.py").write_text(definition.reference)
    specs = []
    for label, solution in kernels:
        # Names that do not tell a kernel its role (candidate, baseline, rival): nothing
        # to behave differently on when it is compared.
        kernel_dir = work / f"kernel_{secrets.token_hex(4)}"
        for source in solution.sources:
            target = kernel_dir / source.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(source.content)
        specs.append(
            {
                "label": label,
                "kernel_dir": kernel_dir.name,
                "entry_file": solution.entry_file,
                "entry_symbol": solution.entry_symbol,
                "destination_passing_style": solution.spec.destination_passing_style,
            }
        )
    use_torch = source_imports_any(definition.reference, TORCH) or any(
        source_imports_any(s.content, TORCH)
        for _, solution in kernels
        for s in solution.sources
        if s.path.endswith(".py")
    )
    plan = input_plan(definition, workload) if style == "flashinfer" else None
    job = {
        "mode": "evaluate",
        "style": style,
        "reference_path": "reference.py",
        "kernels": specs,
        "primary": primary,
        "input_plan": plan,
        "output_plan": output_plan(definition, workload.axes),
        "use_torch": use_torch,
        "cpus": sorted(cpus) if cpus else None,
        "memory_limit_mb": config.memory_limit_mb,
        # Not a perf field (a latency does not depend on it), but every call is held to it.
        "timeout_seconds": config.timeout_seconds,
        "jail_max_processes": JAIL_MAX_PROCESSES,
        # Added to the jail's own minimal environment (isolation.jail sets the rest, thread
        # counts included): the harness's allocator settings, so both time alike.
        "jail_env": TIMING_ENV,
        "jail": jail,
        "nonce": secrets.token_hex(16),
        # Checked in the correctness pass only (never timed): cpu_session's _stress.
        "stress_scales": stress_scales(definition.reference),
        # Not a perf field either: taken after the timed rounds (cpu_session._breakdown).
        "breakdown": config.breakdown,
        **config.perf_fields(),
    }
    (work / "job.json").write_text(json.dumps(job))
    return job
