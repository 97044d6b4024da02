"""The cpu backend end to end: real sandboxed children, real kernels that misbehave."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from accelopt_mcp.backends.cpu import CpuBackend
from accelopt_mcp.backends.host_facts import host_hardware
from accelopt_mcp.models import (
    AxisConst,
    AxisVar,
    BenchmarkConfig,
    Definition,
    EvaluationStatus,
    RandomInput,
    Roofline,
    ScalarInput,
    Solution,
    Task,
    TensorSpec,
    Workload,
)
from tests.bench import quick_bench
from tests.store.samples import one_file_solution

FAST = quick_bench(iterations=5, processes=2, max_timing_seconds=2, timeout_seconds=20)

# A reference that is slow on purpose (a Python loop), so a vectorized kernel beats it.
SLOW_REFERENCE = textwrap.dedent(
    """
    import numpy as np

    def run(x, scale):
        out = np.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = x[i] * np.float32(scale) + np.float32(1.0)
        return out
    """
)


def scale_task(reference: str = SLOW_REFERENCE) -> Task:
    definition = Definition(
        name="scale_add",
        op_type="elementwise",
        axes={"M": AxisVar(), "N": AxisConst(value=64)},
        inputs={
            "x": TensorSpec(shape=["M", "N"], dtype="float32"),
            "scale": TensorSpec(shape=None, dtype="float32"),
        },
        outputs={"y": TensorSpec(shape=["M", "N"], dtype="float32")},
        reference=reference,
    )
    workload = Workload(
        axes={"M": 256}, inputs={"x": RandomInput(), "scale": ScalarInput(value=2.5)}, uuid="w1"
    )
    return Task(definition=definition, workload=workload)


def python_solution(code: str, *, entry: str = "run", dps: bool = False) -> Solution:
    source = textwrap.dedent(code)
    return one_file_solution(source, "scale_add", entry_point=f"main.py::{entry}", dps=dps)


VECTORIZED = """
import numpy as np

def run(x, scale):
    return x * np.float32(scale) + np.float32(1.0)
"""


@pytest.fixture(scope="module")
def backend() -> CpuBackend:
    return CpuBackend()


def evaluate(backend: CpuBackend, code: str, config: BenchmarkConfig = FAST, **kw):
    return backend.evaluate(scale_task(), python_solution(code, **kw), config)


# A reference 10-20 ms slow (a Python loop per element): the vectorized kernel's
# lead then outlasts a busy host, where a sub-millisecond call can measure a millisecond or two.
ELEMENTWISE_REFERENCE = textwrap.dedent(
    """
    import numpy as np

    def run(x, scale):
        out = np.empty_like(x)
        s = np.float32(scale)
        for i in range(x.shape[0]):
            for j in range(x.shape[1]):
                out[i, j] = x[i, j] * s + np.float32(1.0)
        return out
    """
)


def test_fast_kernel_passes_with_speedup(backend: CpuBackend) -> None:
    task = scale_task(ELEMENTWISE_REFERENCE)
    evaluation = backend.evaluate(task, python_solution(VECTORIZED), FAST)
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    assert evaluation.performance is not None and evaluation.latency_stats is not None
    assert evaluation.performance.speedup_factor > 1.0
    assert evaluation.performance.latency_ms == pytest.approx(evaluation.latency_stats.median_ms)
    stats = evaluation.latency_stats
    assert stats.min_ms <= stats.median_ms <= stats.max_ms
    assert evaluation.hardware_counters["l2_rel_error"] == 0.0
    assert evaluation.environment.hardware == host_hardware()
    assert evaluation.environment.hardware.startswith("cpu/")


def test_destination_passing_style(backend: CpuBackend) -> None:
    code = """
    import numpy as np

    def run(x, scale, y):
        np.multiply(x, np.float32(scale), out=y)
        y += np.float32(1.0)
    """
    evaluation = evaluate(backend, code, dps=True)
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ("return x * np.float32(scale)", EvaluationStatus.INCORRECT_NUMERICAL, "L2-relative"),
        ("return (x * np.float32(scale) + 1)[:5]", EvaluationStatus.INCORRECT_SHAPE, "shape"),
        ("return (x * scale + 1).astype(np.float64)", EvaluationStatus.INCORRECT_DTYPE, "float64"),
        (
            "y = x * np.float32(scale) + 1; y[0, 0] = np.nan; return y",
            EvaluationStatus.INCORRECT_NUMERICAL,
            "NaN",
        ),
        ("raise ValueError('kernel exploded')", EvaluationStatus.RUNTIME_ERROR, "kernel exploded"),
        ("import os; os._exit(3)", EvaluationStatus.RUNTIME_ERROR, "code 3"),
        ("import ctypes; ctypes.string_at(0)", EvaluationStatus.RUNTIME_ERROR, "segmentation"),
        ("x = bytearray(8 * 1024**3); return x", EvaluationStatus.RUNTIME_ERROR, "memory"),
    ],
)
def test_failures_are_classified(backend: CpuBackend, body: str, status, message: str) -> None:
    code = f"import numpy as np\n\ndef run(x, scale):\n    {body}\n"
    evaluation = evaluate(backend, code)
    assert evaluation.status == status, evaluation.log
    assert message in evaluation.log
    if status == EvaluationStatus.INCORRECT_NUMERICAL:
        assert evaluation.correctness is not None and evaluation.performance is None


def test_syntax_and_import_errors_are_compile_errors(backend: CpuBackend) -> None:
    syntax = evaluate(backend, "def run(x, scale):\n    return (\n")
    assert syntax.status == EvaluationStatus.COMPILE_ERROR
    assert "syntax error" in syntax.log and "main.py" in syntax.log
    missing = evaluate(backend, "import no_such_module_anywhere\n\ndef run(x, scale):\n    pass\n")
    assert missing.status == EvaluationStatus.COMPILE_ERROR
    assert "no_such_module_anywhere" in missing.log
    no_entry = evaluate(backend, "def helper():\n    pass\n")
    assert no_entry.status == EvaluationStatus.COMPILE_ERROR
    assert "defines no function `run`" in no_entry.log


def test_infinite_loop_times_out_within_the_limit(backend: CpuBackend) -> None:
    # The kernel says on stderr when its call began (time.monotonic is the host's one clock,
    # the jail's too): the limit is timed from there, so the jails' start and imports before
    # it (about 2 s here, twice that on a busy host) stretch nothing that is checked.
    code = (
        "import sys, time\n\n"
        "def run(x, scale):\n"
        "    print(f'call began at {time.monotonic()!r}', file=sys.stderr, flush=True)\n"
        "    while True:\n"
        "        pass\n"
    )
    config = FAST.model_copy(update={"timeout_seconds": 2.0})
    evaluation = evaluate(backend, code, config)
    ended = time.monotonic()
    assert evaluation.status == EvaluationStatus.TIMEOUT
    assert "did not answer within 2 s" in evaluation.log
    began = re.search(r"call began at ([0-9.]+)", evaluation.log)
    assert began is not None, evaluation.log
    # Given up on 2 s into the call (0.3 s more to kill and close it), not at FAST's 20 s.
    assert ended - float(began.group(1)) < 2 + 4, evaluation.log


def test_fork_bomb_is_contained(backend: CpuBackend) -> None:
    code = "import os\n\ndef run(x, scale):\n    while True:\n        os.fork()\n"
    config = FAST.model_copy(update={"timeout_seconds": 5.0})
    started = time.monotonic()
    evaluation = evaluate(backend, code, config)
    assert evaluation.status in (EvaluationStatus.RUNTIME_ERROR, EvaluationStatus.TIMEOUT)
    assert time.monotonic() - started < 20
    if evaluation.status == EvaluationStatus.RUNTIME_ERROR:
        assert "process limit" in evaluation.log


def test_megabytes_of_prints_give_a_capped_log(backend: CpuBackend) -> None:
    code = """
    def run(x, scale):
        for _ in range(200000):
            print('spam' * 20)
        raise RuntimeError('after the spam')
    """
    evaluation = evaluate(backend, textwrap.dedent(code))
    assert evaluation.status == EvaluationStatus.RUNTIME_ERROR
    assert "after the spam" in evaluation.log
    assert len(evaluation.log) <= 17_000


def test_kernel_cannot_see_parent_secrets(
    backend: CpuBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCELOPT_TEST_SECRET_KEY", "do-not-leak")
    # Correct only when the secret is invisible: a visible secret makes the output wrong.
    code = """
    import os
    import numpy as np

    def run(x, scale):
        leaked = "ACCELOPT_TEST_SECRET_KEY" in os.environ
        return x * np.float32(scale) + np.float32(1.0) + np.float32(100.0 * leaked)
    """
    evaluation = evaluate(backend, code)
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    assert "do-not-leak" not in evaluation.log


CONSTANT_OUTPUT = """
    import numpy as np
    _cache = []

    def run(x, scale):
        if not _cache:
            _cache.append(x * np.float32(scale) + np.float32(1.0))
        return _cache[0]
    """

CORRECT_FIRST_THEN_WRONG = """
    import numpy as np
    calls = [0]

    def run(x, scale):
        calls[0] += 1
        y = x * np.float32(scale) + np.float32(1.0)
        # Right on the 5 fixed seeds and the 2 fresh correctness sets, wrong once timed.
        return y if calls[0] <= 7 else y * np.float32(1.5)
    """


@pytest.mark.parametrize(
    ("code", "flag", "message"),
    [
        pytest.param(
            CONSTANT_OUTPUT,
            "constant_output",
            "same output for different inputs",
            id="constant-output",
        ),
        pytest.param(
            CORRECT_FIRST_THEN_WRONG,
            "timed_output_mismatch",
            "while being timed",
            id="correct-first-then-wrong-while-timed",
        ),
    ],
)
def test_a_cheat_is_incorrect_and_flagged(
    backend: CpuBackend, code: str, flag: str, message: str
) -> None:
    evaluation = evaluate(backend, code)
    assert evaluation.status == EvaluationStatus.INCORRECT_NUMERICAL
    assert flag in evaluation.flags
    assert message in evaluation.log


def test_a_forged_result_file_cannot_reach_the_harness(backend: CpuBackend) -> None:
    # The candidate's jail holds its own folder only: the harness's result file is elsewhere.
    code = """
    import json, os

    def run(x, scale):
        fake = {"status": "PASSED", "flags": [], "error": None, "correctness": {},
                "kernel_rounds_ns": [[1]], "reference_rounds_ns": [[1000]]}
        for folder in (".", "..", "../.."):
            try:
                with open(os.path.join(folder, "result.json"), "w") as f:
                    json.dump(fake, f)
            except OSError:
                pass
        os._exit(0)
    """
    evaluation = evaluate(backend, code)
    assert evaluation.status == EvaluationStatus.RUNTIME_ERROR
    assert "exited with code 0" in evaluation.log
    assert evaluation.performance is None


@pytest.mark.parametrize(
    "payload",
    [
        "'{\"a\": ' * 100000",  # nested past Python's stack
        "'[' + '0,' * (20 << 20) + '0]'",  # larger than the parent will read
    ],
)
def test_a_flooded_or_garbled_result_file_is_a_failed_attempt(
    backend: CpuBackend, payload: str
) -> None:
    code = f"""
    import os

    def run(x, scale):
        with open("result.json", "w") as f:
            f.write({payload})
        os._exit(0)
    """
    evaluation = evaluate(backend, code)
    assert evaluation.status == EvaluationStatus.RUNTIME_ERROR


def test_roofline_counters_and_above_peak_flag(backend: CpuBackend) -> None:
    task = scale_task()
    honest = task.model_copy(
        update={"roofline": Roofline(flops=2 * 256 * 64, bytes_moved=2 * 4 * 256 * 64)}
    )
    evaluation = backend.evaluate(honest, python_solution(VECTORIZED), FAST)
    assert evaluation.passed
    assert evaluation.hardware_counters["gflops"] > 0
    assert "above_peak" not in evaluation.flags
    absurd = task.model_copy(update={"roofline": Roofline(flops=1e18, bytes_moved=1.0)})
    flagged = backend.evaluate(absurd, python_solution(VECTORIZED), FAST)
    assert "above_peak" in flagged.flags


def test_non_python_solution_is_refused_clearly(backend: CpuBackend) -> None:
    solution = python_solution(VECTORIZED)
    nki = solution.model_copy(update={"spec": solution.spec.model_copy(update={"language": "nki"})})
    evaluation = backend.evaluate(scale_task(), nki, FAST)
    assert evaluation.status == EvaluationStatus.COMPILE_ERROR
    assert "nki backend" in evaluation.log


def test_broken_reference_is_reported_as_the_tasks_fault(backend: CpuBackend) -> None:
    task = scale_task("def run(x, scale):\n    raise KeyError('reference bug')\n")
    evaluation = backend.evaluate(task, python_solution(VECTORIZED), FAST)
    assert evaluation.status == EvaluationStatus.RUNTIME_ERROR
    assert "reference failed" in evaluation.log


def test_torch_task_without_torch_says_how_to_install(backend: CpuBackend) -> None:
    pytest.importorskip("numpy")
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("torch is installed here")
    task = scale_task("import torch\n\ndef run(x, scale):\n    return x * scale + 1\n")
    evaluation = backend.evaluate(task, python_solution(VECTORIZED), FAST)
    assert evaluation.status == EvaluationStatus.RUNTIME_ERROR
    assert "pip install torch" in evaluation.log


def test_unbound_workload_axis_is_the_tasks_fault(backend: CpuBackend) -> None:
    task = scale_task()
    unbound = task.model_copy(update={"workload": task.workload.model_copy(update={"axes": {}})})
    evaluation = backend.evaluate(unbound, python_solution(VECTORIZED), FAST)
    assert evaluation.status == EvaluationStatus.RUNTIME_ERROR
    assert "the task cannot be run" in evaluation.log and "'M'" in evaluation.log


def test_cpus_must_be_usable_cores() -> None:
    with pytest.raises(ValueError, match="subset"):
        CpuBackend(cpus={10_000})
    assert CpuBackend().availability().usable


def _seen_in_a_jail(path: Path) -> bool:
    """Whether `path` exists in some process's view of the file system (a jail's work folder
    is a tmpfs of its own, invisible from the host at that path)."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if os.path.exists(f"{proc}/root{path}"):
                    return True
    return False


def test_work_dir_of_a_killed_profiler_is_removed_by_the_next_backend(tmp_path: Path) -> None:
    """A server or job worker killed mid-evaluation cannot remove its temp dir; the next cpu
    backend on the host does, once that process is gone."""
    # The jailed kernel cannot write outside its folder: it leaves a mark there instead. That
    # folder is a tmpfs of its own jail's (its work quota), seen through the jail's /proc root.
    kernel = (
        "import time\n"
        "def run(x, scale):\n"
        "    open('kernel-started', 'w').close()\n"
        "    time.sleep(600)\n"
    )
    profiler = (
        "import sys\n"
        "from tests.backends.test_cpu_backend import CpuBackend, evaluate, BenchmarkConfig\n"
        "evaluate(CpuBackend(), sys.argv[1], BenchmarkConfig(timeout_seconds=600))\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", profiler, kernel], cwd=Path(__file__).resolve().parents[2]
    )
    work_dir = None
    try:
        deadline = time.monotonic() + 60
        pattern = f"accelopt-cpu-*-{process.pid}-*/kernel_*"
        while work_dir is None and time.monotonic() < deadline:
            for folder in Path(tempfile.gettempdir()).glob(pattern):
                if _seen_in_a_jail(folder / "kernel-started"):
                    work_dir = folder.parent
            time.sleep(0.05)
        assert work_dir is not None and work_dir.is_dir(), "the kernel never ran"
        process.kill()
        process.wait(timeout=10)
        assert work_dir.is_dir()
        assert evaluate(CpuBackend(), VECTORIZED).status == EvaluationStatus.PASSED
        assert not work_dir.exists(), "the killed profiler's temp dir stayed"
    finally:
        process.kill()
        process.wait(timeout=10)


def test_isolation_is_reported_and_its_absence_flagged(monkeypatch: pytest.MonkeyPatch) -> None:
    jailed = CpuBackend()
    assert (jailed.availability().isolation or "").startswith("bwrap jail")
    honest = evaluate(jailed, VECTORIZED)
    assert honest.passed and "not_isolated" not in honest.flags
    assert honest.measurement["harness_overhead_us"] > 0
    assert "harness_overhead_us" not in honest.hardware_counters
    monkeypatch.setenv("ACCELOPT_JAIL", "none")
    plain = CpuBackend()
    assert (plain.availability().isolation or "").startswith("none: ACCELOPT_JAIL=none")
    unjailed = evaluate(plain, VECTORIZED)
    assert unjailed.passed and "not_isolated" in unjailed.flags
    assert unjailed.trusted  # informational: it still ranks


# The harness's protocol under attack from the process it times (found in review): each kernel
# goes for the pipes and shared memory it can find among its own file descriptors.

PROTOCOL_FDS = """
import os, stat

def _fds(kind):
    found = []
    for fd in range(3, 64):
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            continue
        if (kind == "pipe" and stat.S_ISFIFO(mode)) or (kind == "file" and stat.S_ISREG(mode)):
            found.append(fd)
    return found
"""


SPIN_MS = 6.0
PING_DELAY_MS = 4.0


def test_a_kernel_that_answers_pings_slowly_gains_nothing(backend: CpuBackend) -> None:
    # Slow answers to the calibration pings would inflate what is subtracted from every sample,
    # if the candidate's own round trip were what the harness calibrated on. The kernel spins
    # for SPIN_MS of its own CPU time per call and answers each ping PING_DELAY_MS late:
    # calibrated on its own pings it would measure about SPIN_MS - PING_DELAY_MS. It spins on
    # its thread's CPU clock, not the wall clock: the time a call waits for a busy core is
    # taken out of its sample (backends/cpu_candidate_parent.py), so a wall-clock spin read
    # shorter than SPIN_MS under load (3.4 ms seen) while a CPU-time one holds an absolute
    # floor on a busy host too (a ratio of two sub-millisecond kernels' speedups did not).
    code = (
        PROTOCOL_FDS
        + f"""
import struct, time
import numpy as np
_read = os.read

def _slow_pings(fd, n):
    data = _read(fd, n)
    if len(data) == 8 and struct.unpack("<II", data)[0] == 2:
        time.sleep({PING_DELAY_MS / 1000})
    return data

os.read = _slow_pings

def run(x, scale):
    end = time.thread_time() + {SPIN_MS / 1000}
    while time.thread_time() < end:
        pass
    return x * np.float32(scale) + np.float32(1.0)
"""
    )
    gamed = evaluate(backend, code)
    assert gamed.passed, gamed.log
    assert gamed.performance is not None
    # Halfway between what an honest calibration gives (>= SPIN_MS) and what a gamed one would.
    assert gamed.performance.latency_ms > SPIN_MS - PING_DELAY_MS / 2, gamed.performance


def test_acks_sent_ahead_are_a_protocol_violation(backend: CpuBackend) -> None:
    code = (
        PROTOCOL_FDS
        + """
import struct
import numpy as np

def run(x, scale):
    for fd in _fds("pipe"):
        for seq in range(1, 200):
            try:
                os.write(fd, struct.pack("<II", 2, seq))
            except OSError:
                break
    return x * np.float32(scale) + np.float32(1.0)
"""
    )
    evaluation = evaluate(backend, code)
    assert evaluation.status == EvaluationStatus.RUNTIME_ERROR, evaluation.log
    assert "protocol violation" in evaluation.log


def test_the_arenas_cannot_be_resized_under_the_harness(backend: CpuBackend) -> None:
    # Shrinking a shared file that the harness has mapped would kill it with SIGBUS.
    code = (
        PROTOCOL_FDS
        + """
import numpy as np
refused = []

def run(x, scale):
    for fd in _fds("file"):
        try:
            os.ftruncate(fd, 0)
        except OSError as exc:
            refused.append(exc.errno)
    if not refused:
        raise RuntimeError("no arena found, or one could be resized")
    return x * np.float32(scale) + np.float32(1.0)
"""
    )
    evaluation = evaluate(backend, code)
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log


def test_large_float32_values_are_compared_without_overflow(backend: CpuBackend) -> None:
    # A float32 dot product of values near 1e20 is inf; inf > inf is False and would pass
    # any finite output.
    code = """
import numpy as np

def run(x, scale):
    return np.full_like(x, 3e38)
"""
    evaluation = evaluate(backend, code)
    assert evaluation.status == EvaluationStatus.INCORRECT_NUMERICAL, evaluation.log
