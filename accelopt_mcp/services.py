"""Operations that both front ends (the `accelopt` CLI and the MCP server) perform the same way:
profile a kernel against a task and record the result, import a directory of kernels, rank the
solutions of a definition. Each takes an open store and plain arguments; none knows about MCP.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from accelopt_mcp.backends.base import BenchmarkConfig, Task
from accelopt_mcp.backends.registry import get_backend
from accelopt_mcp.models import Evaluation, Solution
from accelopt_mcp.store.base import KernelStore, StoredProfile, StoredSolution
from accelopt_mcp.tasks.flashinfer_format import TaskFileError, is_trace_set
from accelopt_mcp.tasks.loader import load_solution, load_task, solution_from_kernel_file
from accelopt_mcp.traceset import TransferCounts

KERNEL_FILE_NAME = "kernel.py"


# --------------------------------------------------------------------------- profiling


class ProfileOutcome(BaseModel):
    """A kernel checked and timed against a task, and where the result was stored."""

    definition_name: str
    workload_uuid: str
    backend: str
    evaluation: Evaluation
    solution_id: str | None = None
    """Set when the result was stored."""
    profile_id: str | None = None


def kernel_solution(
    task: Task,
    *,
    kernel_path: Path | None = None,
    kernel_source: str | None = None,
    name: str | None = None,
    author: str = "user",
) -> Solution:
    """The candidate kernel as a Solution: from a kernel .py / solution .json path, or from the
    source text of a kernel .py. Exactly one of the two must be given."""
    if (kernel_path is None) == (kernel_source is None):
        raise TaskFileError(
            "give exactly one of kernel_path (a kernel .py or solution .json file) and "
            "kernel_source (the text of a kernel .py)"
        )
    if kernel_path is not None:
        return load_solution(Path(kernel_path).expanduser(), task, name=name, author=author)
    assert kernel_source is not None
    with tempfile.TemporaryDirectory(prefix="accelopt-kernel-") as folder:
        path = Path(folder) / KERNEL_FILE_NAME
        path.write_text(kernel_source)
        return solution_from_kernel_file(
            path, task.definition.name, name=name or f"{task.definition.name}_user", author=author
        )


def profile_kernel(
    store: KernelStore | None,
    *,
    task_path: Path,
    kernel_path: Path | None = None,
    kernel_source: str | None = None,
    workload: str | None = None,
    backend: str = "cpu",
    config: BenchmarkConfig | None = None,
    parent_id: str | None = None,
) -> ProfileOutcome:
    """Check and time a kernel on a backend. With a store, the definition, workload, kernel and
    its profile are stored (idempotently) and their ids returned."""
    task = load_task(Path(task_path).expanduser(), workload=workload)
    solution = kernel_solution(task, kernel_path=kernel_path, kernel_source=kernel_source)
    runner = get_backend(backend)
    config = config or BenchmarkConfig()
    evaluation = runner.evaluate(task, solution, config)
    outcome = ProfileOutcome(
        definition_name=task.definition.name,
        workload_uuid=task.workload.uuid,
        backend=backend,
        evaluation=evaluation,
    )
    if store is None:
        return outcome
    store.upsert_definition(task.definition)
    workload_uuid = store.upsert_workload(task.definition.name, task.workload)
    solution_id = store.upsert_solution(solution, parent_id=parent_id)
    profile_id = store.upsert_profile(
        workload_uuid, solution_id, evaluation, benchmark_config(config, backend)
    )
    return outcome.model_copy(
        update={
            "workload_uuid": workload_uuid,
            "solution_id": solution_id,
            "profile_id": profile_id,
        }
    )


def benchmark_config(config: BenchmarkConfig, backend: str) -> dict[str, object]:
    """What is stored with a profile: the settings that change what its latency means."""
    return {"backend": backend, **config.perf_fields()}


# --------------------------------------------------------------------------- import

ImportFormat = Literal["auto", "flashinfer-trace", "nkibench"]


def detect_import_format(root: Path) -> Literal["flashinfer-trace", "nkibench"]:
    if not root.is_dir():
        raise TaskFileError(f"{str(root)!r} is not a directory")
    if is_trace_set(root):
        return "flashinfer-trace"
    if (root / "summary.json").is_file():
        return "nkibench"
    raise TaskFileError(
        f"{str(root)!r} is neither a FlashInfer-Trace directory (definitions/, workloads/, "
        "solutions/, traces/) nor an NKIBench directory (summary.json with reference/ and "
        "kernels/); give the folder that holds one of those"
    )


def import_directory(
    store: KernelStore, root: Path, *, fmt: ImportFormat = "auto"
) -> tuple[str, TransferCounts]:
    """Load a FlashInfer-Trace or NKIBench directory into the store; (format, counts)."""
    root = Path(root).expanduser()
    chosen = detect_import_format(root) if fmt == "auto" else fmt
    if not root.is_dir():
        raise TaskFileError(f"{str(root)!r} is not a directory")
    if chosen == "flashinfer-trace":
        from accelopt_mcp.traceset import import_traceset

        return chosen, import_traceset(store, root)
    from accelopt_mcp.tasks.nkibench import import_nkibench_dir

    counts = TransferCounts()
    for entry in import_nkibench_dir(root):
        store.upsert_definition(entry.definition)
        store.upsert_workload(entry.definition.name, entry.workload)
        counts.definitions += 1
        counts.workloads += 1
        if entry.solution is not None:
            store.upsert_solution(entry.solution)
            counts.solutions += 1
    return chosen, counts


# --------------------------------------------------------------------------- ranking


class RankedEntry(BaseModel):
    solution: StoredSolution
    best_profile: StoredProfile | None = Field(
        default=None, description="Its fastest correct profile; None when none passed."
    )


def ranked_solutions(
    store: KernelStore,
    definition_name: str,
    *,
    hardware: str | None = None,
    language: str | None = None,
    run_id: str | None = None,
) -> list[RankedEntry]:
    """Every solution of a definition, best first: correct ones by latency, then the rest
    (never passed, or not on this hardware) oldest first."""
    solutions = store.list_solutions(
        definition_name=definition_name, run_id=run_id, language=language
    )
    wanted = {s.id for s in solutions}
    ranked = store.best_solutions(definition_name, hardware=hardware, limit=max(len(wanted), 1))
    entries = [
        RankedEntry(solution=r.solution, best_profile=r.profile)
        for r in ranked
        if r.solution.id in wanted
    ]
    seen = {e.solution.id for e in entries}
    entries += [RankedEntry(solution=s) for s in solutions if s.id not in seen]
    return entries
