"""The cpu backend's time breakdown (one traced call after the timed rounds) and a task's stress
inputs (extra input sets checked in the correctness pass), end to end through real jails.

Hostile kernels try to break the breakdown (suppress the tracer, raise in a trace function,
forge a huge report, hang or die in the traced call): none may change the verdict, and what
comes back is bounded. Tasks are untrusted too: a stress_inputs() that raises, returns garbage
or too many sets gives one clear error."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from accelopt_mcp.backends.breakdown import MAX_ENTRIES, MAX_WHAT_CHARS, breakdown_from
from accelopt_mcp.backends.cpu import CpuBackend
from accelopt_mcp.backends.cpu_breakdown import shape_breakdown
from accelopt_mcp.models import EvaluationStatus, Task
from accelopt_mcp.tasks.inputs import InputError, stress_scales
from accelopt_mcp.tasks.kernels import solution_from_source
from accelopt_mcp.tasks.loader import load_task
from tests.bench import quick_bench

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "cpu" / "nkibench"
SOFTMAX = EXAMPLES / "reference" / "softmax_M256_N1024_numpy_0.py"
SLOW = (EXAMPLES / "kernels" / "softmax_M256_N1024_0.py").read_text()
FAST = (EXAMPLES / "kernels" / "softmax_M256_N1024_fast.py").read_text()
CONFIG = quick_bench(iterations=3, processes=1, max_timing_seconds=2, timeout_seconds=20)
WITH_BREAKDOWN = CONFIG.model_copy(update={"breakdown": True})

# Mathematically the same softmax, without the max-shift: right on get_inputs() (|x| < 6),
# inf / inf = NaN once a row holds values past ~88.
UNSHIFTED = """
import numpy as np

def kernel(x):
    e = np.exp(x)
    return e / e.sum(axis=1, keepdims=True)
"""


def _evaluate(task: Task, source: str, config=CONFIG):  # type: ignore[no-untyped-def]
    solution = solution_from_source(textwrap.dedent(source), task.definition.name)
    return CpuBackend().evaluate(task, solution, config)


@pytest.fixture(scope="module")
def softmax() -> Task:
    return load_task(SOFTMAX)


# --------------------------------------------------------------------------- breakdown


def test_a_breakdown_names_the_kernels_own_lines_largest_first(softmax: Task) -> None:
    evaluation = _evaluate(softmax, SLOW, WITH_BREAKDOWN)
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    entries = evaluation.breakdown
    assert 3 <= len(entries) <= MAX_ENTRIES
    assert all(e.what.startswith("L") and ": " in e.what for e in entries)
    assert any("np.exp(row - peak)" in e.what for e in entries)
    assert [e.ms for e in entries] == sorted((e.ms for e in entries), reverse=True)
    # Self times of one call: they add up to at most the call; the loop body runs 256 times.
    assert 0 < sum(e.share for e in entries) <= 1.0 + 1e-9
    assert any(e.calls == 256 and "np.exp" in e.what for e in entries)
    # Not asked for: none, and the same verdict.
    plain = _evaluate(softmax, SLOW)
    assert plain.status == EvaluationStatus.PASSED and plain.breakdown == []


def test_helper_functions_get_their_own_lines(softmax: Task) -> None:
    source = """
    import numpy as np

    def _row(r):
        e = np.exp(r - r.max())
        return e / e.sum()

    def kernel(x):
        out = np.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = _row(x[i])
        return out
    """
    evaluation = _evaluate(softmax, source, WITH_BREAKDOWN)
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    texts = [e.what for e in evaluation.breakdown]
    assert any("np.exp(r - r.max())" in t for t in texts), texts
    assert any("out[i] = _row(x[i])" in t for t in texts), texts


def test_a_trace_past_its_cap_stops_and_says_so(softmax: Task) -> None:
    source = """
    import sys, time
    import numpy as np

    def kernel(x):
        if sys.gettrace() is not None:
            time.sleep(2.3)
        out = x - x.max(axis=1, keepdims=True)
        np.exp(out, out=out)
        out /= out.sum(axis=1, keepdims=True)
        return out
    """
    evaluation = _evaluate(softmax, source, WITH_BREAKDOWN)
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    entries = evaluation.breakdown
    assert "time.sleep(2.3)" in entries[0].what and entries[0].ms > 2000
    assert entries[-1].what.startswith("(tracing stopped after 2 s")
    # The lines after the cap are not broken down: they are the note's time.
    assert not any("np.exp(out, out=out)" in e.what for e in entries)
    assert evaluation.latency_stats is not None and evaluation.latency_stats.median_ms < 100


HOSTILE = {
    # Turns the tracer off as soon as it is called.
    "untraces": """
    import sys
    import numpy as np

    def kernel(x):
        sys.settrace(None)
        out = x - x.max(axis=1, keepdims=True)
        np.exp(out, out=out)
        out /= out.sum(axis=1, keepdims=True)
        return out
    """,
    # Puts in a trace function that raises: the traced call fails.
    "raising_tracer": """
    import sys
    import numpy as np

    def _boom(frame, event, arg):
        raise RuntimeError("tracer sabotaged")

    def kernel(x):
        if sys.gettrace() is not None:
            sys.settrace(_boom)
        out = x - x.max(axis=1, keepdims=True)
        np.exp(out, out=out)
        out /= out.sum(axis=1, keepdims=True)
        return out
    """,
    # Replaces the runner's report with a forged, oversized one written straight to the arena.
    "forged_report": """
    import json, sys
    import numpy as np

    def _forge(buffer, report):
        lines = [
            {"file": "x\\u0007" * 50, "line": i, "text": "A" * 5000, "ms": 1e12, "calls": 10**15}
            for i in range(150)
        ] + [{"file": 1, "line": "x"}, {"ms": float("nan")}, "junk"]
        header = json.dumps({"sets": [], "breakdown": {"total_ms": 1e15, "lines": lines}})
        data = header.encode()[: len(buffer) - 16]
        buffer[:8] = len(data).to_bytes(8, "little")
        buffer[8 : 8 + len(data)] = data

    def kernel(x):
        runner = sys.modules["__main__"]
        if hasattr(runner, "write_breakdown"):
            runner.write_breakdown = _forge
        out = x - x.max(axis=1, keepdims=True)
        np.exp(out, out=out)
        out /= out.sum(axis=1, keepdims=True)
        return out
    """,
    # Hangs in the traced call only (it can tell: a tracer is set).
    "hangs_when_traced": """
    import sys, time
    import numpy as np

    def kernel(x):
        if sys.gettrace() is not None:
            sys.settrace(None)
            time.sleep(3600)
        out = x - x.max(axis=1, keepdims=True)
        np.exp(out, out=out)
        out /= out.sum(axis=1, keepdims=True)
        return out
    """,
    # Dies in the traced call only.
    "dies_when_traced": """
    import os, sys
    import numpy as np

    def kernel(x):
        if sys.gettrace() is not None:
            os._exit(3)
        out = x - x.max(axis=1, keepdims=True)
        np.exp(out, out=out)
        out /= out.sum(axis=1, keepdims=True)
        return out
    """,
}


@pytest.mark.parametrize("attack", sorted(HOSTILE))
def test_a_hostile_kernel_cannot_break_the_evaluation_through_its_breakdown(
    softmax: Task, attack: str
) -> None:
    evaluation = _evaluate(softmax, HOSTILE[attack], WITH_BREAKDOWN)
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    assert evaluation.trusted, evaluation.flags
    assert evaluation.performance is not None and evaluation.performance.latency_ms > 0
    assert len(evaluation.breakdown) <= MAX_ENTRIES + 1
    for entry in evaluation.breakdown:
        assert len(entry.what) <= MAX_WHAT_CHARS and entry.what.isprintable()
        assert 0 <= entry.share <= 1
    assert sum(e.share for e in evaluation.breakdown) <= 1.0 + 1e-9
    if attack in ("raising_tracer", "hangs_when_traced", "dies_when_traced"):
        assert evaluation.breakdown == []
        assert "no time breakdown:" in evaluation.log
    if attack == "forged_report":
        # Bounded by the harness's own clock around the traced call (seconds at most).
        assert evaluation.breakdown and all(e.ms < 60_000 for e in evaluation.breakdown)
        assert all(e.calls <= 10**9 for e in evaluation.breakdown)


# Only the breakdown's call runs under a tracer: there it holds ~384 MB more and prints.
HUNGRY_WHEN_TRACED = (
    FAST.replace("def kernel(x)", "def _softmax(x)")
    + """

import sys as _sys


_said = []


def kernel(x):
    if not _said:
        _said.append(print("PRINTED BY AN UNTRACED CALL", file=_sys.stderr))
    if _sys.gettrace() is not None:
        hog = np.ones(96 * 2**20, dtype=np.float32)
        print("PRINTED BY THE TRACED CALL", file=_sys.stderr)
        hog[::4096] += 1.0
    return _softmax(x)
"""
)


def test_the_traced_call_changes_no_figure_of_the_timed_work(softmax: Task) -> None:
    from accelopt_mcp.isolation.jail_probe import jail_status

    evaluation = _evaluate(softmax, HUNGRY_WHEN_TRACED, WITH_BREAKDOWN)
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    assert evaluation.breakdown, evaluation.log
    # What the kernel prints reaches the log, but not what the traced call printed.
    assert "PRINTED BY AN UNTRACED CALL" in evaluation.log, evaluation.log
    assert "PRINTED BY THE TRACED CALL" not in evaluation.log
    measurement = evaluation.measurement
    if "jail_memory_peak_mb" not in measurement:
        assert jail_status().kind != "bwrap"
        pytest.skip("no memory cgroup here: no jail peak is reported")
    # The timed work's peak leaves the traced call's 384 MB out; that one is reported apart.
    assert measurement["jail_memory_peak_mb"] < 300, measurement
    assert measurement["breakdown_jail_memory_peak_mb"] > 384, measurement


LONG_LOOP = """
import sys


def kernel(n, hostile):
    tracer = sys._getframe().f_trace  # the harness's line tracer (None when not traced)
    total = 0
    for i in range(n):
        if hostile and tracer is not None and sys.gettrace() is None:
            sys.settrace(tracer)  # put the tracer back, for the whole thread
        a = i + 1
        b = a * 3
        c = b - a
        total += c ^ i
    return total
"""


@pytest.mark.parametrize("hostile", [False, True], ids=["honest", "reinstalls-the-tracer"])
def test_a_traced_call_far_past_the_cap_ends_near_it(tmp_path: Path, hostile: bool) -> None:
    import importlib.util
    import time

    from accelopt_mcp.backends.cpu_candidate import traced_call

    path = tmp_path / "looping.py"
    path.write_text(LONG_LOOP)
    spec = importlib.util.spec_from_file_location("looping_kernel", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # Timed in this thread's CPU time, not wall time: beside the parallel stage's other tests
    # the wall clock stretched one call and not the other (1.30 s against a bound of 1.26).
    clock = time.thread_time
    # About 0.25 s untraced; traced line by line it would take tens of times that.
    n = 200_000
    started = clock()
    module.kernel(n, hostile)
    while clock() - started < 0.25:
        n *= 2
        started = clock()
        module.kernel(n, hostile)
    untraced = clock() - started
    # A kernel that puts the tracer back past the cap leaves the interpreter in its tracing
    # mode, where every line is checked for a trace function the kernel's frame no longer has:
    # no line is traced, but the loop runs about 3 times slower than untraced (measured: 0.30 s
    # untraced, 0.91 s in tracing mode). No guard can undo that without an event to act on, and
    # the kernel only slows its own breakdown. So the hostile call's floor is that mode's cost,
    # measured here the same way: a thread tracer that traces no frame.
    floor = untraced
    if hostile:
        sys.settrace(lambda *_: None)
        started = clock()
        try:
            module.kernel(n, False)
        finally:
            sys.settrace(None)
        floor = clock() - started
    cap = 0.2
    started = clock()
    _, report = traced_call(lambda: module.kernel(n, hostile), str(tmp_path), path.name, cap)
    spent = clock() - started
    assert report["capped"] and report["lines"], report
    # The cap (wall time, so at most that much CPU), then the rest at (about) the floor's speed;
    # traced line by line to the end it would take tens of times the floor.
    assert spent < cap + 2 * floor + 0.3, (spent, report["total_ms"], untraced, floor)
    assert sys.gettrace() is None


def test_shape_breakdown_trusts_nothing_in_the_report() -> None:
    assert shape_breakdown(None, 5.0) == []
    assert shape_breakdown({"lines": "x"}, 5.0) == []
    assert shape_breakdown({"lines": []}, float("nan")) == []
    entries = shape_breakdown(
        {
            "total_ms": 1e9,
            "entry": "main.py",
            "capped": True,
            "lines": [
                {"file": "main.py", "line": 3, "text": "y = 1\n\x1b[2J", "ms": 4.0, "calls": 2},
                {"file": "helper.py", "line": 7, "text": "z", "ms": 4.0, "calls": True},
                {"file": "main.py", "line": -1, "text": "bad", "ms": 1.0},
                {"file": "main.py", "line": 5, "text": "inf", "ms": float("inf")},
            ],
        },
        wall_ms=4.0,
    )
    # Two valid lines claiming 8 ms of a 4 ms call: scaled down to it; then the cap note.
    assert [e["what"] for e in entries[:2]] == ["L3: y = 1 [2J", "helper.py:L7: z"]
    assert sum(e["share"] for e in entries[:2]) == pytest.approx(1.0)
    assert entries[1]["calls"] == 0
    assert entries[2]["what"].startswith("(tracing stopped")
    forged = {"what": "y", "ms": 1, "calls": 10**30}
    validated = breakdown_from(
        [*entries, {"what": "", "ms": 1}, {"what": "x", "ms": -1}, 3, forged]
    )
    assert [e.what for e in validated] == [e["what"] for e in entries]


# --------------------------------------------------------------------------- stress inputs


def test_a_kernel_without_the_max_shift_fails_the_stress_set_by_name(softmax: Task) -> None:
    evaluation = _evaluate(softmax, UNSHIFTED)
    assert evaluation.status == EvaluationStatus.INCORRECT_NUMERICAL, evaluation.log
    assert "stress set 'x_scaled_100'" in evaluation.log
    assert "passed the 5 seeds" in evaluation.log or "passed the" in evaluation.log


def test_the_safe_kernel_passes_every_stress_set_and_says_so(softmax: Task) -> None:
    evaluation = _evaluate(softmax, FAST)
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    assert "2 stress sets (x_scaled_6, x_scaled_100)" in evaluation.log


def _task_with(tmp_path: Path, extra: str) -> Task:
    source = SOFTMAX.read_text()
    source = (
        source.split("def stress_inputs")[0]
        + textwrap.dedent(extra)
        + "\n\n"
        + ("def forward" + source.split("def forward")[1])
    )
    path = tmp_path / "softmax_M256_N1024_numpy_0.py"
    path.write_text(source)
    return load_task(path)


def test_a_task_without_stress_inputs_is_checked_as_before(tmp_path: Path) -> None:
    task = _task_with(tmp_path, "")
    evaluation = _evaluate(task, UNSHIFTED)
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    assert "stress" not in evaluation.log


def test_stress_scales_are_read_from_the_reference_without_running_it(tmp_path: Path) -> None:
    assert stress_scales("import numpy as np\nSTRESS_SCALES = (6.0, 100)\n") == [6.0, 100.0]
    assert stress_scales("def run(x):\n    return x\n") == []
    for bad in ("STRESS_SCALES = open('x')", "STRESS_SCALES = (0,)", "STRESS_SCALES = 'ab'"):
        with pytest.raises(InputError, match="STRESS_SCALES must be"):
            stress_scales(bad)
    with pytest.raises(InputError):
        stress_scales(f"STRESS_SCALES = {tuple(range(1, 20))}")
    # Declared on a task: the scaled set fails the unshifted kernel by its name.
    task = _task_with(tmp_path, "STRESS_SCALES = (100.0,)")
    evaluation = _evaluate(task, UNSHIFTED)
    assert evaluation.status == EvaluationStatus.INCORRECT_NUMERICAL, evaluation.log
    assert "stress set 'inputs_x100'" in evaluation.log


@pytest.mark.parametrize(
    "declaration",
    [
        f"STRESS_SCALES = ({10**400},)",
        f"STRESS_SCALES = (-{10**400},)",
        "STRESS_SCALES = (1j, 2.0)",
        "STRESS_SCALES = (float('inf'),)",
        "STRESS_SCALES = (1e400,)",
        "STRESS_SCALES = ((6.0,),)",
        "STRESS_SCALES = {6.0}",
    ],
)
def test_garbage_stress_scales_are_the_tasks_clear_error_not_a_crash(
    tmp_path: Path, declaration: str
) -> None:
    with pytest.raises(InputError, match="STRESS_SCALES must be"):
        stress_scales(declaration)
    evaluation = _evaluate(_task_with(tmp_path, declaration), FAST)
    assert evaluation.status == EvaluationStatus.RUNTIME_ERROR, evaluation.log
    assert evaluation.log.startswith("the task cannot be run: STRESS_SCALES must be")


def test_unparsable_source_declares_no_stress_scales() -> None:
    # An int literal past the interpreter's digit limit fails to parse with a ValueError.
    assert stress_scales(f"STRESS_SCALES = ({'9' * 5000},)\n") == []


BAD_TASKS = {
    "raises": ("def stress_inputs():\n    raise ValueError('no')\n", "stress_inputs() failed"),
    "garbage": ("def stress_inputs():\n    return 5\n", "it returned a int"),
    "too_many": (
        "def stress_inputs():\n    return {str(i): (np.zeros(1),) for i in range(100)}\n",
        "it returned 100 sets",
    ),
    "bad_pair": ("def stress_inputs():\n    return [('a', 1, 2)]\n", "not a (name, inputs)"),
    "wrong_arity": (
        "def stress_inputs():\n    return {'two': (get_inputs()[0], get_inputs()[0])}\n",
        "holds 2 inputs; get_inputs() gives 1",
    ),
    "too_large": (
        "def stress_inputs():\n    return {'big': (np.zeros((4096, 1024), np.float32),)}\n",
        "stress set 'big' holds 16.0 MiB",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_TASKS))
def test_a_bad_stress_declaration_is_one_clear_task_error(tmp_path: Path, case: str) -> None:
    extra, expected = BAD_TASKS[case]
    evaluation = _evaluate(_task_with(tmp_path, extra), FAST)
    assert evaluation.status == EvaluationStatus.RUNTIME_ERROR, evaluation.log
    assert "the task's reference failed (not the candidate's fault)" in evaluation.log
    assert expected in evaluation.log


def test_a_flashinfer_definitions_stress_scales_are_checked() -> None:
    definition = ROOT / "examples" / "cpu" / "flashinfer" / "definitions" / "softmax_n1024.json"
    task = load_task(definition)
    unshifted = UNSHIFTED.replace("def kernel(x)", "def run(x)")
    evaluation = _evaluate(task, unshifted)
    assert evaluation.status == EvaluationStatus.INCORRECT_NUMERICAL, evaluation.log
    assert "stress set 'inputs_x100'" in evaluation.log
    safe = _evaluate(task, FAST.replace("def kernel(x)", "def run(x)"))
    assert safe.status == EvaluationStatus.PASSED, safe.log
    assert "2 stress sets (inputs_x6, inputs_x100)" in safe.log
