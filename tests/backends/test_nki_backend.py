"""The nki backend end to end: real sandboxed child processes running our nki_runner against the
stand-in Neuron SDK (tests/backends/standins: a numpy `neuronxcc.nki` and a `neuron-profile`
executable). The stand-ins reach the child only through its environment (PYTHONPATH, PATH)."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from accelopt_mcp.backends.base import BackendUnavailableError
from accelopt_mcp.backends.nki import INSTALL_HINT, NkiBackend
from accelopt_mcp.models import (
    AxisConst,
    BenchmarkConfig,
    BuildSpec,
    Definition,
    EvaluationStatus,
    Language,
    RandomInput,
    Roofline,
    Solution,
    Task,
    TensorSpec,
    Workload,
)
from tests.store.samples import one_file_solution

HERE = Path(__file__).parent
STANDINS = HERE / "standins"
EXAMPLE = HERE.parents[1] / "examples" / "nki"
TASK_SOURCE = (EXAMPLE / "reference" / "silu_M256_N512_numpy_0.py").read_text()
KERNEL_SOURCE = (EXAMPLE / "kernels" / "silu_M256_N512_0.py").read_text()
ELEMENTS = 256 * 512

FAST = BenchmarkConfig(warmup_runs=1, iterations=4)


def silu_task(reference: str = TASK_SOURCE, roofline: Roofline | None = None) -> Task:
    definition = Definition(
        name="silu_M256_N512",
        op_type="silu",
        axes={"M": AxisConst(value=256), "N": AxisConst(value=512)},
        inputs={"x": TensorSpec(shape=["M", "N"], dtype="float32")},
        outputs={"out": TensorSpec(shape=["M", "N"], dtype="float32")},
        reference=reference + "\n\ndef run(*inputs):\n    return forward(*inputs)\n",
        tags=["format:nkibench"],
    )
    workload = Workload(axes={}, inputs={"x": RandomInput()}, uuid="silu_M256_N512-0")
    return Task(definition=definition, workload=workload, roofline=roofline)


def nki_solution(source: str, name: str = "candidate") -> Solution:
    return one_file_solution(
        source,
        "silu_M256_N512",
        name=name,
        language=Language.NKI,
        hardware=("trn1",),
        entry_point="kernel.py::kernel",
    )


def numpy_kernel(body: str) -> str:
    """A stand-in-only kernel: plain numpy behind the nki decorator."""
    return (
        "import numpy as np\nimport neuronxcc.nki as nki\n\n\n@nki.jit\ndef kernel(x):\n"
        + "".join(f"    {line}\n" for line in body.strip().splitlines())
    )


def make_backend(
    tmp_path: Path, *, device: bool = True, standin_sdk: bool = True, **knobs: str
) -> NkiBackend:
    devices = tmp_path / "dev"
    devices.mkdir(exist_ok=True)
    if device:
        (devices / "neuron0").touch()
    python_path = str(STANDINS) if standin_sdk else str(tmp_path / "empty")
    env = {
        "PYTHONPATH": python_path,
        "PATH": f"{STANDINS / 'bin'}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        **knobs,
    }
    return NkiBackend(
        core_id=0,
        hardware="trn1",
        device_glob=str(devices / "neuron*"),
        extra_env=env,
        neuron_profile=str(STANDINS / "bin" / "neuron-profile"),
    )


# --------------------------------------------------------------------------- device path


def test_example_kernel_passes_with_latency_and_counters_from_the_profile(tmp_path: Path) -> None:
    roofline = Roofline(flops=4.0 * ELEMENTS, bytes_moved=2.0 * 4 * ELEMENTS)
    backend = make_backend(tmp_path, STANDIN_NKI_TOTAL_TIME_S="0.0005")
    availability = backend.availability()
    assert availability.usable, availability.reason
    assert availability.hardware == "trn1"

    evaluation = backend.evaluate(silu_task(roofline=roofline), nki_solution(KERNEL_SOURCE), FAST)

    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    assert evaluation.performance is not None and evaluation.latency_stats is not None
    assert evaluation.performance.latency_ms == pytest.approx(0.5)
    assert evaluation.latency_stats.runs == 4
    assert evaluation.latency_stats.measurement_rounds == 1
    assert evaluation.environment.hardware == "trn1"
    assert evaluation.environment.libs == {"neuronxcc": "0.0.0+standin"}
    assert evaluation.correctness is not None
    assert evaluation.correctness.extra is not None
    assert evaluation.correctness.extra["l2_relative_error"] < 2e-5
    counters = evaluation.hardware_counters
    assert counters["hbm_read_bytes"] == 4 * ELEMENTS
    assert counters["hbm_write_bytes"] == 4 * ELEMENTS
    assert counters["spill_bytes"] == 0
    assert counters["vector_engine_active_time_percent"] == pytest.approx(0.41)
    expected_memory = (8.0 * ELEMENTS / 0.5e-3) / (410 * 1024**3)
    assert counters["peak_memory_fraction"] == pytest.approx(expected_memory)
    assert "no_reference_latency" in evaluation.flags
    assert "above_peak" not in evaluation.flags


def test_a_breakdown_gives_each_engines_busy_time_from_the_profile(tmp_path: Path) -> None:
    backend = make_backend(tmp_path, STANDIN_NKI_TOTAL_TIME_S="0.0005")
    task, kernel = silu_task(), nki_solution(KERNEL_SOURCE)
    evaluation = backend.evaluate(task, kernel, FAST.model_copy(update={"breakdown": True}))
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    # The stand-in's busy fractions (DMA 0.55, vector 0.41, scalar 0.37, the others 0) of 0.5 ms.
    shown = [(e.what, round(e.ms, 6), e.share) for e in evaluation.breakdown]
    assert shown[:3] == [
        ("DMA queues busy", 0.275, 0.55),
        ("vector engine busy", 0.205, 0.41),
        ("scalar engine busy", 0.185, 0.37),
    ]
    assert {what for what, _, _ in shown[3:]} == {
        "tensor engine (matmul) busy",
        "gpsimd engine busy",
    }
    assert backend.evaluate(task, kernel, FAST).breakdown == []


def test_engine_breakdown_skips_what_the_summary_lacks() -> None:
    from accelopt_mcp.backends.neuron_profile import engine_breakdown

    assert engine_breakdown({"vector_engine_active_time_percent": 0.5}, 0.0) == []
    entries = engine_breakdown(
        {"vector_engine_active_time_percent": 1.7, "dma_active_time_percent": float("nan")}, 2.0
    )
    assert entries == [{"what": "vector engine busy", "ms": 2.0, "share": 1.0, "calls": 0}]


def test_claimed_work_above_the_hardware_peak_is_flagged(tmp_path: Path) -> None:
    backend = make_backend(tmp_path, STANDIN_NKI_TOTAL_TIME_S="0.0005")
    impossible = Roofline(flops=1e12, bytes_moved=8.0 * ELEMENTS)
    evaluation = backend.evaluate(silu_task(roofline=impossible), nki_solution(KERNEL_SOURCE), FAST)
    assert evaluation.status == EvaluationStatus.PASSED
    assert "above_peak" in evaluation.flags
    assert evaluation.hardware_counters["peak_roofline_fraction"] > 1


CHANGES_WHILE_TIMED = """
global calls
calls = globals().get("calls", 0) + 1
y = x / (1 + np.exp(-x))
return y if calls <= 6 else y + 1
"""


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        pytest.param(
            "h = x.astype(np.float16)\nreturn (h / (1 + np.exp(-h))).astype(np.float32)",
            EvaluationStatus.INCORRECT_DTYPE,
            "16-bit floats",
            id="float16-in-source",
        ),
        # The dtype code "e" is float16 without saying so: the output check catches it.
        pytest.param(
            "return (x / (1 + np.exp(-x))).astype('e')",
            EvaluationStatus.INCORRECT_DTYPE,
            "dtype float16, the reference has float32",
            id="float16-in-outputs",
        ),
        # Correct for the 5 seed checks and the warm-up run, then wrong: only the timed-output
        # check can see it.
        pytest.param(
            CHANGES_WHILE_TIMED,
            EvaluationStatus.INCORRECT_NUMERICAL,
            "timed run 1",
            id="output-that-changes-while-timed",
        ),
    ],
)
def test_a_wrong_kernel_is_caught(
    tmp_path: Path, body: str, status: EvaluationStatus, message: str
) -> None:
    backend = make_backend(tmp_path, STANDIN_NKI_TOTAL_TIME_S="0.0005")
    evaluation = backend.evaluate(silu_task(), nki_solution(numpy_kernel(body)), FAST)
    assert evaluation.status == status
    assert message in evaluation.log


# Right for get_inputs() (|x| < 6), NaN where |x| > 10.
GUARDED_SILU = "return np.where(np.abs(x) > 10, np.nan, x / (1.0 + np.exp(-x))).astype(x.dtype)"


@pytest.mark.parametrize(
    "declaration, name",
    [
        (
            "def stress_inputs():\n    return {'x_scaled_6': (get_inputs()[0] * 6,)}\n",
            "x_scaled_6",
        ),
        ("STRESS_SCALES = (6.0,)\n", "inputs_x6"),
    ],
)
def test_a_stress_set_catches_what_the_seeds_miss(
    tmp_path: Path, declaration: str, name: str
) -> None:
    backend = make_backend(tmp_path, STANDIN_NKI_TOTAL_TIME_S="0.0005")
    kernel = nki_solution(numpy_kernel(GUARDED_SILU))
    assert backend.evaluate(silu_task(), kernel, FAST).status == EvaluationStatus.PASSED
    stressed = silu_task(TASK_SOURCE + "\n\n" + declaration)
    evaluation = backend.evaluate(stressed, kernel, FAST)
    assert evaluation.status == EvaluationStatus.INCORRECT_NUMERICAL, evaluation.log
    assert f"stress set '{name}', output 0" in evaluation.log
    honest = backend.evaluate(stressed, nki_solution(KERNEL_SOURCE), FAST)
    assert honest.status == EvaluationStatus.PASSED, honest.log
    assert f"stress set '{name}': correct" in honest.log


def test_a_broken_stress_declaration_is_the_tasks_fault(tmp_path: Path) -> None:
    backend = make_backend(tmp_path, STANDIN_NKI_TOTAL_TIME_S="0.0005")
    broken = silu_task(TASK_SOURCE + "\n\ndef stress_inputs():\n    return 3\n")
    with pytest.raises(ValueError, match="stress_inputs\\(\\) must return a dict"):
        backend.evaluate(broken, nki_solution(KERNEL_SOURCE), FAST)


@pytest.mark.parametrize(
    "declaration",
    [
        f"STRESS_SCALES = ({10**400},)",
        f"STRESS_SCALES = (-{10**400}, 2.0)",
        "STRESS_SCALES = (1j,)",
    ],
    ids=["int-past-float-range", "negative-huge-int", "complex"],
)
def test_a_malformed_stress_scales_is_the_tasks_clear_error(
    tmp_path: Path, declaration: str
) -> None:
    # Read by the parent before anything runs: a TypeError or OverflowError from a literal
    # no float can hold would escape evaluate() as a crash.
    backend = make_backend(tmp_path, STANDIN_NKI_TOTAL_TIME_S="0.0005")
    broken = silu_task(TASK_SOURCE + "\n\n" + declaration + "\n")
    with pytest.raises(ValueError) as raised:
        backend.evaluate(broken, nki_solution(KERNEL_SOURCE), FAST)
    message = str(raised.value)
    assert message.startswith("task 'silu_M256_N512' cannot be run: STRESS_SCALES must be")
    assert "\n" not in message and type(raised.value) is ValueError


def test_compile_errors_are_mapped(tmp_path: Path) -> None:
    failing = make_backend(tmp_path, STANDIN_NKI_COMPILE_ERROR="tile exceeds SBUF partition size")
    evaluation = failing.evaluate(silu_task(), nki_solution(KERNEL_SOURCE), FAST)
    assert evaluation.status == EvaluationStatus.COMPILE_ERROR
    assert "tile exceeds SBUF partition size" in evaluation.log
    assert evaluation.correctness is None and evaluation.performance is None

    backend = make_backend(tmp_path)
    broken = backend.evaluate(silu_task(), nki_solution("def kernel(x:\n    pass\n"), FAST)
    assert broken.status == EvaluationStatus.COMPILE_ERROR
    assert "SyntaxError" in broken.log
    unnamed = backend.evaluate(silu_task(), nki_solution("def other(x):\n    return x\n"), FAST)
    assert unnamed.status == EvaluationStatus.COMPILE_ERROR
    assert "no function 'kernel'" in unnamed.log


def test_wrong_numbers_and_wrong_shape(tmp_path: Path) -> None:
    backend = make_backend(tmp_path)
    wrong = backend.evaluate(silu_task(), nki_solution(numpy_kernel("return x * 0.5")), FAST)
    assert wrong.status == EvaluationStatus.INCORRECT_NUMERICAL
    assert wrong.correctness is not None and wrong.correctness.max_absolute_error > 0.1
    assert "seed 0" in wrong.log and "exceeds the tolerance" in wrong.log
    shape = backend.evaluate(silu_task(), nki_solution(numpy_kernel("return x[:128]")), FAST)
    assert shape.status == EvaluationStatus.INCORRECT_SHAPE
    assert "(128, 512)" in shape.log


def test_flaky_profiler_is_retried(tmp_path: Path) -> None:
    marker = tmp_path / "profile-failed-once"
    backend = make_backend(
        tmp_path, STANDIN_NKI_TOTAL_TIME_S="0.0005", STANDIN_NEURON_PROFILE_FAIL_FIRST=str(marker)
    )
    evaluation = backend.evaluate(silu_task(), nki_solution(KERNEL_SOURCE), FAST)
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    assert marker.exists()
    assert "neuron-profile failed (try 1 of 3), retrying" in evaluation.log
    assert "failed to attach to the NeuronCore" in evaluation.log


def test_junk_profiler_output_is_a_clear_error(tmp_path: Path) -> None:
    backend = make_backend(tmp_path, STANDIN_NEURON_PROFILE_JUNK="1")
    evaluation = backend.evaluate(silu_task(), nki_solution(KERNEL_SOURCE), FAST)
    assert evaluation.status == EvaluationStatus.RUNTIME_ERROR
    assert "profiler_error" in evaluation.flags
    assert "neuron-profile failed after 3 tries" in evaluation.log
    assert "did not print JSON" in evaluation.log


def test_noisy_round_is_measured_again(tmp_path: Path) -> None:
    # One trace for the compile run, a round of 4 with 20 % spread, then a steady round.
    sequence = ["0.001", "0.001", "0.0012", "0.001", "0.001"] + ["0.002"] * 4
    backend = make_backend(tmp_path, STANDIN_NKI_TOTAL_TIME_SEQUENCE=",".join(sequence))
    evaluation = backend.evaluate(silu_task(), nki_solution(KERNEL_SOURCE), FAST)
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    assert evaluation.latency_stats is not None and evaluation.performance is not None
    assert evaluation.latency_stats.measurement_rounds == 2
    assert evaluation.latency_stats.relative_spread == 0
    assert evaluation.performance.latency_ms == pytest.approx(2.0)
    assert "unstable_latency" not in evaluation.flags


def test_latency_that_never_settles_is_flagged(tmp_path: Path) -> None:
    backend = make_backend(tmp_path, STANDIN_NKI_TOTAL_TIME_SEQUENCE="0.001,0.0011,0.0013")
    config = BenchmarkConfig(warmup_runs=0, iterations=3, max_measurement_rounds=2)
    evaluation = backend.evaluate(silu_task(), nki_solution(KERNEL_SOURCE), config)
    assert evaluation.status == EvaluationStatus.PASSED
    assert evaluation.latency_stats is not None
    assert evaluation.latency_stats.measurement_rounds == 2
    assert "unstable_latency" in evaluation.flags


def test_hanging_kernel_times_out(tmp_path: Path) -> None:
    backend = make_backend(tmp_path)
    config = BenchmarkConfig(timeout_seconds=3, warmup_runs=0, iterations=1)
    evaluation = backend.evaluate(
        silu_task(), nki_solution(numpy_kernel("while True:\n    pass")), config
    )
    assert evaluation.status == EvaluationStatus.TIMEOUT
    assert "time limit" in evaluation.log


def test_a_kernel_that_forges_its_result_file_is_a_failed_attempt(tmp_path: Path) -> None:
    backend = make_backend(tmp_path)
    forge = 'import os\nopen("result.json", "w").write("{\\"status\\": 1}")\nos._exit(0)'
    evaluation = backend.evaluate(silu_task(), nki_solution(numpy_kernel(forge)), FAST)
    assert evaluation.status == EvaluationStatus.RUNTIME_ERROR
    assert evaluation.performance is None


# --------------------------------------------------------------------------- without hardware


def test_without_neuronxcc_the_reason_names_what_to_install(tmp_path: Path) -> None:
    backend = make_backend(tmp_path, standin_sdk=False)
    availability = backend.availability()
    assert not availability.usable
    assert "neuronxcc is not installed" in availability.reason
    assert "pip.repos.neuron.amazonaws.com" in availability.reason
    with pytest.raises(BackendUnavailableError, match="pip install neuronx-cc"):
        backend.evaluate(silu_task(), nki_solution(KERNEL_SOURCE))
    with pytest.raises(BackendUnavailableError, match="simulator needs neuronxcc"):
        backend.simulate(silu_task(), nki_solution(KERNEL_SOURCE))
    assert INSTALL_HINT in availability.reason


def test_without_a_device_correctness_comes_from_the_simulator(tmp_path: Path) -> None:
    backend = make_backend(tmp_path, device=False)
    availability = backend.availability()
    assert not availability.usable
    assert "no Neuron device" in availability.reason and "simulate()" in availability.reason
    with pytest.raises(BackendUnavailableError, match="latency needs a trn1/trn2 instance"):
        backend.evaluate(silu_task(), nki_solution(KERNEL_SOURCE))

    report = backend.simulate(silu_task(), nki_solution(KERNEL_SOURCE))
    assert report.correct, report.log
    assert report.flags == ["latency_unavailable"]
    assert report.environment.hardware == "nki-simulator"
    assert report.correctness is not None and report.correctness.max_absolute_error < 1e-5

    wrong = backend.simulate(
        silu_task(), nki_solution(numpy_kernel("return x / (1 + np.exp(-x)) + 1"))
    )
    assert wrong.status == EvaluationStatus.INCORRECT_NUMERICAL and not wrong.correct
    assert wrong.correctness is not None and math.isclose(
        wrong.correctness.max_absolute_error, 1.0, rel_tol=1e-5
    )


def test_missing_profiler_makes_the_backend_unusable(tmp_path: Path) -> None:
    backend = make_backend(tmp_path)
    backend.neuron_profile = str(tmp_path / "no-neuron-profile")
    availability = backend.availability()
    assert not availability.usable
    assert "aws-neuronx-tools" in availability.reason


def test_bad_input_is_a_clear_error(tmp_path: Path) -> None:
    backend = make_backend(tmp_path)
    python_solution = nki_solution(KERNEL_SOURCE).model_copy(
        update={
            "spec": BuildSpec(
                language="python", target_hardware=["cpu"], entry_point="kernel.py::kernel"
            )
        }
    )
    with pytest.raises(ValueError, match=r"spec\.language is 'nki'"):
        backend.evaluate(silu_task(), python_solution, FAST)
    flashinfer_style = silu_task(reference="import numpy as np\n")
    with pytest.raises(ValueError, match="defines no get_inputs or forward"):
        backend.evaluate(flashinfer_style, nki_solution(KERNEL_SOURCE), FAST)
    with pytest.raises(ValueError, match="core_id"):
        NkiBackend(core_id=-1)


def test_example_directory_loads_and_profiles_through_the_task_loaders(tmp_path: Path) -> None:
    from accelopt_mcp.tasks.kernels import load_solution
    from accelopt_mcp.tasks.loader import load_task
    from accelopt_mcp.tasks.nkibench import import_nkibench_dir

    entries = import_nkibench_dir(EXAMPLE)
    assert [entry.definition.name for entry in entries] == ["silu_M256_N512"]
    task = load_task(EXAMPLE / "reference" / "silu_M256_N512_numpy_0.py")
    solution = load_solution(EXAMPLE / "kernels" / "silu_M256_N512_0.py", task)
    assert solution.spec.language == Language.NKI
    backend = make_backend(tmp_path, STANDIN_NKI_TOTAL_TIME_S="0.00025")
    evaluation = backend.evaluate(task, solution, FAST)
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    assert evaluation.performance is not None
    assert evaluation.performance.latency_ms == pytest.approx(0.25)
