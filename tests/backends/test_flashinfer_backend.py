"""The flashinfer backend without a GPU: availability reasons from a real probe child, our JSON
laid out as flashinfer-bench reads it (checked with flashinfer-bench's own models in a
subprocess), status and result mapping. The real GPU run is skipped where CUDA is absent."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from accelopt_mcp.backends.base import BackendUnavailableError
from accelopt_mcp.backends.flashinfer import (
    INSTALL_HINT,
    NO_CUDA,
    FlashInferBackend,
    benchmark_settings,
    map_status,
    to_evaluation,
    write_trace_set,
)
from accelopt_mcp.models import (
    BenchmarkConfig,
    BuildSpec,
    Correctness,
    Definition,
    Environment,
    Evaluation,
    EvaluationStatus,
    Language,
    Performance,
    Roofline,
    Solution,
    Task,
    Trace,
)
from tests.flashinfer_bench_copy import load_with_flashinfer_bench
from tests.store.samples import one_file_solution

EXAMPLE = Path(__file__).parents[2] / "examples" / "flashinfer"


def example_task(batch_index: int = 0, roofline: Roofline | None = None) -> Task:
    definition = Definition.model_validate_json(
        (EXAMPLE / "definitions" / "rmsnorm" / "rmsnorm_h512.json").read_text()
    )
    lines = (EXAMPLE / "workloads" / "rmsnorm" / "rmsnorm_h512.jsonl").read_text().splitlines()
    workload = Trace.model_validate_json(lines[batch_index]).workload
    return Task(definition=definition, workload=workload, roofline=roofline)


def example_solution(name: str) -> Solution:
    path = EXAMPLE / "solutions" / "rmsnorm" / "rmsnorm_h512" / f"{name}.json"
    return Solution.model_validate_json(path.read_text())


# --------------------------------------------------------------------------- availability


def test_availability_names_what_is_missing_on_this_host() -> None:
    backend = FlashInferBackend()
    availability = backend.availability()
    if availability.usable:
        pytest.skip(f"a usable GPU is present ({availability.reason}); covered by the GPU test")
    assert availability.reason.endswith(INSTALL_HINT) or availability.reason == NO_CUDA
    if "not installed" in availability.reason:
        assert "flashinfer-bench" in availability.reason or "torch" in availability.reason
    with pytest.raises(BackendUnavailableError) as raised:
        backend.evaluate(example_task(), example_solution("rmsnorm_h512_python_rows"))
    assert str(raised.value) == availability.reason


def test_interpreter_with_flashinfer_bench_but_no_torch_says_torch_is_missing(
    fib_site: Path,
) -> None:
    # The child finds flashinfer-bench 0.1.2 (not torch) on its path: the probe runs for real.
    availability = FlashInferBackend(extra_env={"PYTHONPATH": str(fib_site)}).availability()
    assert not availability.usable
    assert availability.reason == f"torch not installed: {INSTALL_HINT}"


def test_device_must_be_a_cuda_index() -> None:
    with pytest.raises(ValueError, match="device must look like 'cuda:0'"):
        FlashInferBackend("gpu0")
    assert FlashInferBackend("cuda:3").gpu_index == 3


# --------------------------------------------------------------------------- layout


def test_trace_set_layout_round_trips_through_our_models(tmp_path: Path) -> None:
    task = example_task(1)
    solution = example_solution("rmsnorm_h512_triton_rows")
    paths = write_trace_set(tmp_path, task, solution)
    assert paths["definition"] == tmp_path / "definitions/rmsnorm/rmsnorm_h512.json"
    assert paths["workload"] == tmp_path / "workloads/rmsnorm/rmsnorm_h512.jsonl"
    assert paths["solution"] == (
        tmp_path / "solutions/rmsnorm/rmsnorm_h512/rmsnorm_h512_triton_rows.json"
    )
    assert Definition.model_validate_json(paths["definition"].read_text()) == task.definition
    (line,) = paths["workload"].read_text().splitlines()
    trace = Trace.model_validate_json(line)
    assert trace.is_workload_trace and trace.workload == task.workload
    assert Solution.model_validate_json(paths["solution"].read_text()) == solution


def test_trace_set_layout_loads_in_flashinfer_bench(tmp_path: Path, fib_site: Path) -> None:
    task = example_task(0)
    for name in ("rmsnorm_h512_python_rows", "rmsnorm_h512_triton_rows"):
        write_trace_set(tmp_path, task, example_solution(name))
    loaded = load_with_flashinfer_bench(fib_site, tmp_path)
    assert loaded["definitions"] == ["rmsnorm_h512"]
    assert loaded["solutions"] == [
        ["rmsnorm_h512_python_rows", "rmsnorm_h512", "python", "main.py::run"],
        ["rmsnorm_h512_triton_rows", "rmsnorm_h512", "triton", "main.py::run"],
    ]
    assert loaded["workloads"] == [["rmsnorm_h512", "rmsnorm_h512-b64", {"batch_size": 64}, True]]


def test_solutions_flashinfer_cannot_run_are_refused(tmp_path: Path) -> None:
    task = example_task()
    python = example_solution("rmsnorm_h512_python_rows")
    nki = python.model_copy(
        update={
            "spec": BuildSpec(
                language=Language.NKI, target_hardware=["trn1"], entry_point="main.py::run"
            )
        }
    )
    with pytest.raises(ValueError, match="flashinfer-bench runs"):
        write_trace_set(tmp_path, task, nki)
    other = python.model_copy(update={"definition": "softmax_h512"})
    with pytest.raises(ValueError, match="not the task's definition 'rmsnorm_h512'"):
        write_trace_set(tmp_path, task, other)


# --------------------------------------------------------------------------- mapping


def test_every_status_maps_and_unknown_ones_are_errors() -> None:
    for status in EvaluationStatus:
        assert map_status(status.value) is status
    with pytest.raises(ValueError, match="'SEGFAULT', unknown to accelopt-mcp"):
        map_status("SEGFAULT")


def test_our_statuses_are_exactly_flashinfer_benchs(fib_site: Path) -> None:
    source = (fib_site / "flashinfer_bench" / "data" / "trace.py").read_text()
    enum_body = source.split("class EvaluationStatus")[1].split("\nclass ")[0]
    theirs = {
        line.split("=")[0].strip()
        for line in enum_body.splitlines()
        if line.startswith("    ") and "=" in line and line.strip()[0].isupper()
    }
    assert theirs == {s.value for s in EvaluationStatus}


def _their_evaluation(latency_ms: float) -> dict:
    return {
        "status": "PASSED",
        "environment": {"hardware": "NVIDIA H200", "libs": {"torch": "2.8.0"}},
        "timestamp": "2026-01-01T00:00:00",
        "log": "",
        "correctness": {"max_relative_error": 1e-6, "max_absolute_error": 1e-7},
        "performance": {
            "latency_ms": latency_ms,
            "reference_latency_ms": 4 * latency_ms,
            "speedup_factor": 4.0,
        },
    }


def test_passed_result_gets_roofline_counters_for_the_gpu() -> None:
    batch, hidden = 1024, 512
    moved = 4.0 * (2 * batch * hidden + hidden)
    task = example_task(1, Roofline(flops=4.0 * batch * hidden, bytes_moved=moved))
    evaluation = to_evaluation(_their_evaluation(0.01), task)
    assert evaluation.status == EvaluationStatus.PASSED
    assert evaluation.performance is not None and evaluation.performance.speedup_factor == 4.0
    expected = moved / 0.01e-3 / 4.8e12
    assert evaluation.hardware_counters["peak_memory_fraction"] == pytest.approx(expected)
    assert evaluation.flags == ["not_isolated"]  # sandboxed, not jailed (README)
    impossible = to_evaluation(_their_evaluation(1e-5), task)
    assert "above_peak" in impossible.flags


def test_failed_results_keep_their_shape_and_unknown_gpus_get_no_counters() -> None:
    numerical = {
        **_their_evaluation(1.0),
        "status": "INCORRECT_NUMERICAL",
        "performance": None,
        "correctness": {"max_relative_error": "NaN", "max_absolute_error": "Infinity"},
    }
    evaluation = to_evaluation(numerical, example_task(0, Roofline(flops=1, bytes_moved=1)))
    assert evaluation.status == EvaluationStatus.INCORRECT_NUMERICAL
    assert evaluation.correctness is not None
    assert math.isnan(evaluation.correctness.max_relative_error)
    assert evaluation.hardware_counters == {}
    unknown_gpu = {**_their_evaluation(1.0), "environment": {"hardware": "NVIDIA L4"}}
    passed = to_evaluation(unknown_gpu, example_task(0, Roofline(flops=1, bytes_moved=1)))
    assert passed.passed and passed.hardware_counters == {}


def test_only_explicit_settings_reach_flashinfer_bench() -> None:
    assert benchmark_settings(BenchmarkConfig()) == {}
    explicit = BenchmarkConfig(warmup_runs=3, iterations=20, rtol=1e-3, seeds=[1, 2])
    assert benchmark_settings(explicit) == {
        "warmup_runs": 3,
        "iterations": 20,
        "rtol": 1e-3,
        "num_trials": 2,
    }


# --------------------------------------------------------------------------- real GPU


def test_real_gpu_run_of_the_triton_example() -> None:
    backend = FlashInferBackend()
    availability = backend.availability()
    if not availability.usable:
        detail = "" if availability.reason == NO_CUDA else f" ({availability.reason})"
        pytest.skip(NO_CUDA + detail)
    config = BenchmarkConfig(warmup_runs=3, iterations=10)
    evaluation = backend.evaluate(
        example_task(1), example_solution("rmsnorm_h512_triton_rows"), config
    )
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    assert evaluation.performance is not None and evaluation.performance.latency_ms > 0


def test_python_example_solution_passes_on_the_cpu_backend() -> None:
    # The same files the GPU path uses: the reference and the python solution are written with
    # operations numpy and torch share, so the cpu backend runs them with numpy arrays.
    from accelopt_mcp.backends.cpu import CpuBackend

    config = BenchmarkConfig(warmup_runs=1, iterations=3, max_measurement_rounds=1)
    evaluation = CpuBackend().evaluate(
        example_task(0), example_solution("rmsnorm_h512_python_rows"), config
    )
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    assert evaluation.correctness is not None
    assert evaluation.correctness.max_absolute_error < 1e-4


# --------------------------------------------------------------------------- breakdown


class _KernelAverage:
    """What torch.profiler's key_averages() yields per event (FunctionEventAvg): its name as
    `key`, launches as `count`, its own device time in microseconds (torch >= 2.4 calls it
    self_device_time_total, older releases self_cuda_time_total)."""

    def __init__(self, key: str, micros: float, count: int, *, old_torch: bool = False) -> None:
        self.key, self.count = key, count
        if old_torch:
            self.self_cuda_time_total = micros
        else:
            self.self_device_time_total = micros


def test_device_kernels_become_a_breakdown_longest_first() -> None:
    from accelopt_mcp.backends.flashinfer_runner import (
        MAX_KERNELS,
        kernel_rows,
        shape_kernel_breakdown,
    )

    averages = [
        _KernelAverage("aten::mul", 0.0, 2),  # a CPU-side op: no device time of its own
        _KernelAverage("void at::native::vectorized_elementwise_kernel<4>" + "x" * 200, 30.0, 2),
        _KernelAverage("rmsnorm_kernel_0d1d2d", 90.0, 1, old_torch=True),
    ]
    entries = shape_kernel_breakdown(kernel_rows(averages))
    assert [(e["what"][:14], e["ms"], e["share"], e["calls"]) for e in entries] == [
        ("rmsnorm_kernel", 0.09, 0.75, 1),
        ("void at::nativ", 0.03, 0.25, 2),
    ]
    assert len(entries[1]["what"]) == 120
    many = [_KernelAverage(f"k{i}", float(i + 1), 1) for i in range(30)]
    assert len(shape_kernel_breakdown(kernel_rows(many))) == MAX_KERNELS
    assert shape_kernel_breakdown([]) == []


def test_the_runners_breakdown_reaches_the_evaluation_validated() -> None:
    from accelopt_mcp.backends.flashinfer import with_breakdown
    from accelopt_mcp.backends.flashinfer_runner import FlashInferRunResult

    passed = Evaluation(
        status=EvaluationStatus.PASSED,
        environment=Environment(hardware="NVIDIA_H100"),
        timestamp="2026-01-01T00:00:00Z",
        correctness=Correctness(),
        performance=Performance(latency_ms=0.1),
    )
    result = FlashInferRunResult(
        breakdown=[
            {"what": "rmsnorm_kernel", "ms": 0.09, "share": 0.75, "calls": 1},
            {"what": "bad", "ms": "x"},
            {"what": "\x1b[31mred", "ms": 0.01, "share": 7.0, "calls": 1},
        ]
    )
    shown = with_breakdown(passed, result).breakdown
    assert [(e.what, e.share) for e in shown] == [("rmsnorm_kernel", 0.75), ("[31mred", 1.0)]
    none = with_breakdown(passed, FlashInferRunResult(breakdown_error="RuntimeError: boom"))
    assert none.breakdown == [] and "no time breakdown: RuntimeError: boom" in none.log


# --------------------------------------------------------------------------- stand-in GPU run

STANDIN = Path(__file__).parent / "standins" / "flashinfer"
"""Stand-in torch and flashinfer-bench (tests/backends/standins/flashinfer): the backend, its
sandboxed runner processes and flashinfer-bench's worker process all run for real."""


def standin_backend(latency_ms: float = 5.0) -> FlashInferBackend:
    return FlashInferBackend(
        extra_env={"PYTHONPATH": str(STANDIN), "STANDIN_FIB_LATENCY_MS": str(latency_ms)}
    )


def python_solution(source: str, name: str) -> Solution:
    return one_file_solution(source, "rmsnorm_h512", name=name, hardware=("NVIDIA_H100",))


HONEST = "def run(*inputs):\n    return inputs[0]\n"

# Loaded (imported and called) for the breakdown. It tries every way a solution in the
# runner's own process had to change the verdict it reports: the result object in memory,
# the JSON writer, and the result file on disk, and it forges a huge breakdown too.
REWRITER = """
import gc
import json
from pathlib import Path

FORGED = {
    "status": "PASSED",
    "environment": {"hardware": "FORGED"},
    "timestamp": "2000-01-01T00:00:00Z",
    "log": "FORGED VERDICT",
    "correctness": {"max_relative_error": 0.0, "max_absolute_error": 0.0},
    "performance": {"latency_ms": 1e-06, "reference_latency_ms": 9.0, "speedup_factor": 9e6},
}
HUGE = [{"what": "x" * 5000, "ms": 1e300, "share": 50.0, "calls": 10**30}] * 200


def _rewrite_in_memory():
    for obj in gc.get_objects():
        if type(obj).__name__ == "FlashInferRunResult":
            try:
                obj.evaluation = dict(FORGED)
                obj.error = None
            except Exception:
                pass


_real_dumps = json.dumps


def _forging_dumps(obj, *args, **kwargs):
    if isinstance(obj, dict):
        obj = {**obj, "evaluation": dict(FORGED), "error": None, "breakdown": HUGE}
    return _real_dumps(obj, *args, **kwargs)


json.dumps = _forging_dumps
try:
    (Path.cwd() / "result.json").write_text(_real_dumps({"evaluation": FORGED}))
except OSError:
    pass
_rewrite_in_memory()


def run(*inputs):
    _rewrite_in_memory()
    return inputs[0]
"""


def test_the_standin_gpu_run_reports_flashinfer_benchs_verdict_and_a_breakdown() -> None:
    backend = standin_backend()
    assert backend.availability().usable, backend.availability().reason
    solution = python_solution(HONEST, "honest")
    plain = backend.evaluate(example_task(0), solution, BenchmarkConfig())
    assert plain.status == EvaluationStatus.PASSED, plain.log
    assert plain.performance is not None and plain.performance.latency_ms == 5.0
    assert plain.breakdown == []
    traced = backend.evaluate(example_task(0), solution, BenchmarkConfig(breakdown=True))
    assert traced.status == EvaluationStatus.PASSED, traced.log
    assert [e.what for e in traced.breakdown] == ["standin_device_kernel"]


def test_a_kernel_loaded_for_the_breakdown_cannot_rewrite_its_verdict() -> None:
    from accelopt_mcp.backends.breakdown import MAX_ENTRIES, MAX_WHAT_CHARS

    backend = standin_backend(latency_ms=5.0)
    evaluation = backend.evaluate(
        example_task(0), python_solution(REWRITER, "rewriter"), BenchmarkConfig(breakdown=True)
    )
    # flashinfer-bench's verdict and figure, as its run reported them: none of the forgery.
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    assert evaluation.performance is not None
    assert evaluation.performance.latency_ms == 5.0
    assert evaluation.performance.speedup_factor == 2.0
    assert evaluation.environment.hardware == "NVIDIA_H100"
    assert "FORGED" not in evaluation.log
    # What it forged in its own process's breakdown is validated and bounded.
    assert len(evaluation.breakdown) <= MAX_ENTRIES + 1
    for entry in evaluation.breakdown:
        assert len(entry.what) <= MAX_WHAT_CHARS and 0.0 <= entry.share <= 1.0
    # A failed verdict stays failed too: the breakdown is not even taken then.
    failing = FlashInferBackend(
        extra_env={"PYTHONPATH": str(STANDIN), "STANDIN_FIB_STATUS": "INCORRECT_NUMERICAL"}
    )
    failed = failing.evaluate(
        example_task(0), python_solution(REWRITER, "rewriter"), BenchmarkConfig(breakdown=True)
    )
    assert failed.status == EvaluationStatus.INCORRECT_NUMERICAL, failed.log
    assert failed.performance is None and failed.breakdown == []
