"""The CPU NKIBench that ships in the package (suites/cpu_nkibench): AccelOpt's 14 tasks, each
loading through the NKIBench loader (its modules run in the task jail) with a roofline in
AccelOpt's form, and a few baselines profiled on the cpu backend against their references with
a percent of peak that makes sense. Profiling all 14 would take minutes: three cover the three
ways a task binds (vector work, matmul work, both)."""

from __future__ import annotations

import json
import os

import pytest

from accelopt_mcp.backends.cpu import CpuBackend
from accelopt_mcp.backends.cpu_peaks import PeakSource
from accelopt_mcp.backends.cpu_peaks_records import PeakSizes
from accelopt_mcp.models import Roofline, Task
from accelopt_mcp.suites import BUILTIN_SUITES, builtin_suite
from accelopt_mcp.tasks.nkibench import NkiBenchEntry, default_workload, import_nkibench_dir
from tests.bench import quick_bench

TASKS = {
    "adamw",
    "add_rmsnorm_matmul",
    "bmm",
    "bmm_softmax",
    "gqa_full",
    "lora",
    "mamba",
    "matmul",
    "matmul_add_rmsnorm",
    "rmsnorm_matmul",
    "rope_single_freq_apply",
    "silu",
    "swiglu",
    "transpose_matmul",
}
SUITE = builtin_suite("cpu-nkibench")
# Baselines of 13-25 ms: mamba (vector work only), bmm (matmul only), add_rmsnorm_matmul (both).
PROFILED = ("mamba", "bmm", "add_rmsnorm_matmul")
QUICK = quick_bench(
    seeds=[0], iterations=5, max_timing_seconds=1, target_ci=0.2, timeout_seconds=60
)


@pytest.fixture(scope="module")
def entries() -> dict[str, NkiBenchEntry]:
    return {entry.definition.op_type: entry for entry in import_nkibench_dir(SUITE)}


def test_the_suite_is_found_by_name_and_lists_the_14_tasks() -> None:
    assert BUILTIN_SUITES["cpu-nkibench"] == SUITE and SUITE.is_dir()
    assert set(json.loads((SUITE / "summary.json").read_text())) == TASKS
    assert (SUITE / "README.md").is_file()
    with pytest.raises(ValueError, match="no built-in suite 'nkibench'; known: cpu-nkibench"):
        builtin_suite("nkibench")


def test_every_task_loads_with_its_baseline_and_an_accelopt_roofline(
    entries: dict[str, NkiBenchEntry],
) -> None:
    assert set(entries) == TASKS
    for problem, entry in entries.items():
        roofline = Roofline.from_tags(entry.definition.tags)
        assert roofline is not None and roofline.split, problem
        assert (roofline.matmul_flops or 0) + (roofline.vector_flops or 0) > 0, problem
        assert roofline.bytes_moved > 0, problem
        assert entry.solution is not None and entry.solution.name == (
            f"{entry.definition.name}_baseline"
        )
        # The shape in the file name is the module's: the summary's values are the axes.
        assert entry.definition.name.startswith(problem + "_"), entry.definition.name


@pytest.fixture(scope="module")
def backend() -> CpuBackend:
    # One core, as the engine's pool pins every evaluation; the one-core peaks only.
    core = max(os.sched_getaffinity(0))
    return CpuBackend(cpus={core}, peaks=PeakSource(sizes=PeakSizes(all_cores=False)))


@pytest.mark.parametrize("problem", PROFILED)
def test_a_baseline_passes_against_its_reference_below_the_roofline(
    backend: CpuBackend, entries: dict[str, NkiBenchEntry], problem: str
) -> None:
    entry = entries[problem]
    assert entry.solution is not None
    task = Task(definition=entry.definition, workload=default_workload(entry.definition))
    evaluation = backend.evaluate(task, entry.solution, QUICK)
    assert evaluation.passed, evaluation.log
    percent = evaluation.hardware_counters["roofline_pct_of_peak"]
    assert 0 < percent <= 100, evaluation.log
    assert "above_peak" not in evaluation.flags
    print(f"{problem}: baseline at {percent:.1f}% of its roofline")
