"""Every CPU example profiles PASSED in both formats, and its fast kernel beats its baseline."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelopt_mcp.backends.cpu import CpuBackend
from accelopt_mcp.models import BenchmarkConfig
from accelopt_mcp.tasks.kernels import load_solution
from accelopt_mcp.tasks.loader import load_task

ROOT = Path(__file__).resolve().parents[2] / "examples" / "cpu"
CONFIG = BenchmarkConfig(iterations=5, min_processes=1, max_processes=2, max_timing_seconds=2)
NKI_TASKS = sorted((ROOT / "nkibench" / "reference").glob("*.py"))
FI_DEFINITIONS = sorted((ROOT / "flashinfer" / "definitions").glob("*.json"))


@pytest.fixture(scope="module")
def backend() -> CpuBackend:
    return CpuBackend()


def _kernels_for(task_file: Path) -> list[Path]:
    stem = task_file.stem.rsplit("_numpy", 1)[0]
    return sorted((ROOT / "nkibench" / "kernels").glob(f"{stem}_*.py"))


@pytest.mark.parametrize("task_file", NKI_TASKS, ids=lambda p: p.stem)
def test_nkibench_example(backend: CpuBackend, task_file: Path) -> None:
    task = load_task(task_file)
    latencies = {}
    for kernel in _kernels_for(task_file):
        evaluation = backend.evaluate(task, load_solution(kernel, task), CONFIG)
        assert evaluation.passed, f"{kernel.name}: {evaluation.log}"
        latencies[kernel.stem.rsplit("_", 1)[1]] = evaluation.performance.latency_ms
    assert "0" in latencies, "every example has a baseline kernel"
    if "fast" in latencies:
        assert latencies["fast"] < latencies["0"]


@pytest.mark.parametrize("definition_file", FI_DEFINITIONS, ids=lambda p: p.stem)
def test_flashinfer_example(backend: CpuBackend, definition_file: Path) -> None:
    task = load_task(definition_file)
    folder = ROOT / "flashinfer" / "solutions" / task.definition.name
    latencies = {}
    for path in sorted(folder.glob("*.json")):
        evaluation = backend.evaluate(task, load_solution(path, task), CONFIG)
        assert evaluation.passed, f"{path.name}: {evaluation.log}"
        latencies[path.stem.rsplit("_", 1)[1]] = evaluation.performance.latency_ms
    assert "loop" in latencies, "every example has a slow baseline solution"
    if "fast" in latencies:
        assert latencies["fast"] < latencies["loop"]


def test_at_least_two_examples_have_a_fast_kernel() -> None:
    fast = [p for p in (ROOT / "nkibench" / "kernels").glob("*_fast.py")]
    assert len(fast) >= 2
