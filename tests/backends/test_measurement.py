"""How the cpu backend measures: interleaved rounds over fresh processes, intervals, baselines
timed alongside, comparisons, contention. Real jailed kernels; loose bounds (this host is
noisy), but each assertion fails when the mechanism it checks is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from accelopt_mcp.backends.base import Baseline
from accelopt_mcp.backends.cpu import CpuBackend
from accelopt_mcp.backends.cpu_session import CONTENDED_SHARE
from accelopt_mcp.backends.host_facts import quietest_core
from accelopt_mcp.models import EvaluationStatus, Task
from accelopt_mcp.tasks.kernels import solution_from_source
from accelopt_mcp.tasks.loader import load_task
from tests.backends.test_attacks import ATTACK_DIR as ATTACKS
from tests.backends.test_attacks import EXAMPLES
from tests.backends.test_cpu_backend import SLOW_REFERENCE, VECTORIZED, python_solution, scale_task
from tests.bench import quick_bench

# Timing-sensitive (measured speedups decide what is kept): run alone, not beside other tests
# (scripts/test.sh runs `-m serial` first, then the rest in parallel).
pytestmark = pytest.mark.serial

CONFIG = quick_bench(
    seeds=[0, 21], iterations=8, processes=3, max_timing_seconds=10, timeout_seconds=30
)
# Four hundred times the vectorized kernel's work. Each timed call also pays a fixed cost
# that is the same for both kernels (thawing the kernel's process, the request and its
# answer: 0.2-0.5 ms here), so the work must dwarf it: forty times read only 1.4-1.8x, and
# under the busy-core stage once had an interval down to 1.04 (stop 35's CI). Four hundred
# times reads 5-6x, its interval never below 4.9, with every core busy.
SLOWER = """
import numpy as np

def run(x, scale):
    for _ in range(400):
        y = x * np.float32(scale) + np.float32(1.0)
    return y
"""
LOUD = """
import sys
import numpy as np

print("kernel process started", file=sys.stderr)

def run(x, scale):
    return x * np.float32(scale) + np.float32(1.0)
"""
BROKEN = """
def run(x, scale):
    raise RuntimeError("this baseline is broken")
"""


@pytest.fixture(scope="module")
def backend() -> CpuBackend:
    # Pinned to one core, as every evaluation the product makes is (local_backend, the pools).
    # Unpinned on two cores, a copy of a 0.1 ms kernel read 0.62-1.38x over 20 evaluations of
    # three sets each: which core each process wakes on differs from set to set.
    return CpuBackend(cpus={quietest_core()})


def test_intervals_and_fresh_processes(backend: CpuBackend) -> None:
    # Nothing to decide (decide_at empty): the first pass's minimum is sampled in full.
    config = CONFIG.model_copy(update={"decide_at": []})
    evaluation = backend.evaluate(scale_task(), python_solution(LOUD), config)
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    stats, performance = evaluation.latency_stats, evaluation.performance
    assert stats is not None and performance is not None
    assert stats.ci_low_ms is not None and stats.ci_high_ms is not None
    assert stats.ci_low_ms <= stats.median_ms <= stats.ci_high_ms
    assert stats.q1_ms is not None and stats.q3_ms is not None
    assert stats.relative_spread == pytest.approx((stats.q3_ms - stats.q1_ms) / stats.median_ms)
    assert performance.speedup_ci_low is not None and performance.speedup_ci_high is not None
    assert performance.speedup_ci_low <= performance.speedup_factor <= performance.speedup_ci_high
    # Three sets of fresh processes: the kernel module was imported three times.
    assert stats.measurement_rounds == 3
    assert evaluation.log.count("kernel process started") == 3
    assert stats.runs >= 3 * CONFIG.iterations
    # Harness internals are kept apart from what the planner reads.
    assert evaluation.measurement["timed_calls"] > 0
    assert "timed_calls" not in evaluation.hardware_counters
    assert "CI" in evaluation.log and "over the reference" in evaluation.log


def test_a_baseline_is_timed_in_the_same_rounds(backend: CpuBackend) -> None:
    task = scale_task()
    slower = Baseline(label="parent", solution=python_solution(SLOWER))
    same = Baseline(label="itself", solution=python_solution(VECTORIZED))
    evaluation = backend.evaluate(task, python_solution(VECTORIZED), CONFIG, [slower, same])
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    by_name = {c.baseline: c for c in evaluation.comparisons}
    assert set(by_name) == {"parent", "itself"}
    parent = by_name["parent"]
    assert parent.verdict == "faster", evaluation.log
    assert parent.ci_low > 1.2 and parent.ci_low <= parent.speedup <= parent.ci_high
    itself = by_name["itself"]
    # The same code: its interval reaches 1 (give or take 5 %: a 95 % interval misses now
    # and then, by design; a bias would miss far more).
    assert itself.ci_low < 1.05 and itself.ci_high > 0.95, evaluation.log
    assert "against parent" in evaluation.log


def test_a_failing_baseline_never_fails_the_candidate(backend: CpuBackend) -> None:
    broken = Baseline(label="parent", solution=python_solution(BROKEN))
    evaluation = backend.evaluate(scale_task(), python_solution(VECTORIZED), CONFIG, [broken])
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    assert evaluation.comparisons == []
    assert "baseline parent was not timed" in evaluation.log
    assert "this baseline is broken" in evaluation.log


def test_compare_ranks_and_keeps_failures_apart(backend: CpuBackend) -> None:
    task = scale_task(SLOW_REFERENCE)
    kernels = [
        Baseline(label="slower", solution=python_solution(SLOWER)),
        Baseline(label="broken", solution=python_solution(BROKEN)),
        Baseline(label="fast", solution=python_solution(VECTORIZED)),
    ]
    comparison = backend.compare(task, kernels, CONFIG)
    assert comparison.interleaved
    assert [k.label for k in comparison.kernels] == ["fast", "slower", "broken"]
    assert [k.rank for k in comparison.kernels] == [1, 2, None]
    assert comparison.kernels[2].evaluation.status == EvaluationStatus.RUNTIME_ERROR
    assert "this baseline is broken" in comparison.kernels[2].evaluation.log
    (pair,) = comparison.pairs
    assert (pair.kernel, pair.baseline, pair.verdict) == ("fast", "slower", "faster")
    assert pair.speedup > 1.2
    # Each timed kernel is also set against the task's reference (a loop over rows): the
    # vectorized one beats it, the 400-times one does not.
    fast, slower = (entry.evaluation.performance for entry in comparison.kernels[:2])
    assert fast is not None and slower is not None
    assert fast.speedup_factor > 1.0 > slower.speedup_factor


def test_compare_refuses_one_kernel(backend: CpuBackend) -> None:
    with pytest.raises(ValueError, match="2 to 8 kernels"):
        backend.compare(scale_task(), [Baseline(label="a", solution=python_solution(VECTORIZED))])


def _spinners(cores: list[int]) -> list[subprocess.Popen[bytes]]:
    return [
        subprocess.Popen(
            [sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{c}}})\nwhile True: pass"]
        )
        for c in cores
    ]


def _stop(spinners: list[subprocess.Popen[bytes]]) -> None:
    for spinner in spinners:
        spinner.kill()
        spinner.wait()


def test_a_busy_core_is_seen_and_taken_out_of_every_contestant_alike() -> None:
    """A busy loop on the evaluation's own core: the kernel and the reference both wait for
    the CPU in timed calls; the harness sees it (the log says how much), takes it out of
    every contestant's calls alike and keeps every round."""
    core = min(os.sched_getaffinity(0))
    spinners = _spinners([core])
    try:
        backend = CpuBackend(cpus={core})
        evaluation = backend.evaluate(scale_task(), python_solution(VECTORIZED), CONFIG)
    finally:
        _stop(spinners)
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    assert evaluation.latency_stats is not None
    assert evaluation.latency_stats.contended, evaluation.log
    # Past the share at which the harness calls the host busy (the spinner's time only: the
    # harness's own steps on the shared core are not another program's). A ~0.1 ms kernel that
    # sleeps between calls is favoured by the scheduler on waking, so the share stays modest.
    assert evaluation.measurement["foreign_share"] > CONTENDED_SHARE, evaluation.measurement
    assert "went to other programs" in evaluation.log
    assert "retaken" not in json.dumps(evaluation.measurement)


def test_a_copy_of_the_reference_reads_one_on_a_busy_host() -> None:
    """A/A under load, unpinned, a busy loop on every core (what the engine's own evaluations
    plus one other job do to a 2-core laptop). Before the harness took other programs' time
    out of every contestant alike, it re-took rounds in which the reference alone had waited,
    and such a copy read 0.23-0.69x."""
    task = _softmax_task()
    twin = solution_from_source(
        task.definition.reference + "\n\ndef kernel(x):\n    return forward(x)\n",
        task.definition.name,
        name="twin",
    )
    spinners = _spinners(sorted(os.sched_getaffinity(0)))
    try:
        evaluation = CpuBackend().evaluate(task, twin, CONFIG)
    finally:
        _stop(spinners)
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    performance = evaluation.performance
    assert performance is not None
    # Either the interval reaches 1 (the project's rule for an A/A; under this load it can be
    # wide: 0.742x [0.623, 1.045] with 23 % of the windows lost to the spinners, a CI run of 6 Dec)
    # or, where it misses 1, the estimate stays near 1. KNOWN BUG, not asserted: unpinned on
    # two busy cores this A/A misses 1.00 with its interval in about 1 run of 5, unflagged
    # (0.932x [0.820, 0.977], 1.111x [1.043, 1.180], 1.149x [1.008, 1.188]); that is left to
    # the next measurement issue. The bug this guards against read 0.23-0.69x, one-sided
    # (rounds in which the reference alone had waited were re-taken): every such reading
    # fails the bounds (the last one, 0.7x, holds whatever the interval).
    low, high = performance.speedup_ci_low, performance.speedup_ci_high
    assert low is not None and high is not None
    covers_one = low <= 1.0 <= high
    assert covers_one or 0.8 < performance.speedup_factor < 1.25, evaluation.log
    assert 0.7 < performance.speedup_factor < 1.43, evaluation.log  # never far off either way


def _softmax_task() -> Task:
    return load_task(EXAMPLES / "reference" / "softmax_M256_N1024_numpy_0.py")


def test_a_kernel_cannot_pass_its_own_work_off_as_another_programs() -> None:
    """Attack a19: the work is done by a thread that exits before "done" while the calling
    thread waits runnable behind it. A harness that summed the CPU time of the threads it can
    still see measured it at 1.35x the reference; counted over the whole jail (exited threads
    included), it is the reference's work plus a thread's cost: slower than the reference."""
    task = _softmax_task()
    attack = solution_from_source(
        (ATTACKS / "a19_pass_off_work.py").read_text(), task.definition.name, name="a19"
    )
    backend = CpuBackend(cpus={min(os.sched_getaffinity(0))})
    evaluation = backend.evaluate(task, attack, CONFIG)
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    assert evaluation.performance is not None
    assert evaluation.performance.speedup_factor < 1.0, evaluation.log


SPINNER_KERNEL = textwrap.dedent(
    """
    import threading
    import numpy as np

    def _spin():
        while True:
            pass

    # Tries to slow down whatever runs next to it (the reference, a baseline) to look faster.
    for _ in range(2):
        threading.Thread(target=_spin, daemon=True).start()

    def run(x, scale):
        return x * np.float32(scale) + np.float32(1.0)
    """
)


def test_a_kernel_cannot_slow_down_what_it_is_compared_with(backend: CpuBackend) -> None:
    """Its busy threads are frozen with it whenever the reference or a baseline is timed."""
    task = scale_task()
    honest = backend.evaluate(task, python_solution(VECTORIZED), CONFIG)
    baseline = Baseline(label="parent", solution=python_solution(VECTORIZED))
    sneaky = backend.evaluate(task, python_solution(SPINNER_KERNEL), CONFIG, [baseline])
    assert honest.performance is not None
    if sneaky.status != EvaluationStatus.PASSED:
        return  # stopped by the thread cap: nothing was gained either
    assert sneaky.performance is not None
    # Each speedup is over a reference timed in its own evaluation's rounds, so the host's
    # drift between the two evaluations cancels (their raw reference medians can be 1.6x apart
    # on a busy VM). Slowing the reference down would show as a larger speedup.
    gain = sneaky.performance.speedup_factor / honest.performance.speedup_factor
    assert gain < 1.5, (sneaky.log, honest.log)
    (parent,) = sneaky.comparisons
    # Its own threads compete with its own work, never with the baseline's.
    assert parent.ci_high < 1.2, sneaky.log


SELF_CONTENDING = textwrap.dedent(
    """
    import threading
    import numpy as np

    calls = [0]

    def _spin(stop):
        while not stop.is_set():
            pass

    def run(x, scale):
        # Every other call is slow, and keeps a second thread of its own runnable meanwhile,
        # so that the slow calls look like a busy host and get thrown away.
        calls[0] += 1
        if calls[0] % 2 == 0:
            return x * np.float32(scale) + np.float32(1.0)
        stop = threading.Event()
        spinner = threading.Thread(target=_spin, args=(stop,))
        spinner.start()
        for _ in range(20):
            y = x * np.float32(scale) + np.float32(1.0)
        stop.set()
        spinner.join()
        return y
    """
)


def test_a_kernel_that_contends_with_itself_is_charged_for_it(busy_cores: int) -> None:
    """A kernel whose slow calls keep a second thread of its own runnable: its main thread
    waits for the CPU, but behind its own work, which is no other program's. Those calls stay
    in its figures at their full length: no more of its rounds read as busy than of the
    reference's, timed beside it on the same core (a busy host makes both busy alike)."""
    if busy_cores:
        # With a program spinning on the core, a long call is preempted by it and a short one
        # mostly is not: the busy-round counts would compare call lengths, not self-contention
        # (a19 and the busy A/A test cover a busy host).
        pytest.skip("a quiet-host property: the counts compare call lengths on a busy core")
    backend = CpuBackend(cpus={min(os.sched_getaffinity(0))})
    # No question to stop at: the full minimum of rounds, for a count that means something.
    config = CONFIG.model_copy(update={"decide_at": []})
    evaluation = backend.evaluate(scale_task(), python_solution(SELF_CONTENDING), config)
    assert evaluation.status == EvaluationStatus.PASSED, evaluation.log
    assert evaluation.latency_stats is not None
    rounds = evaluation.measurement["rounds"]
    busy_reference = evaluation.measurement["reference_busy_rounds"]
    assert evaluation.latency_stats.contended_samples < busy_reference + 0.25 * rounds, (
        evaluation.measurement,
        evaluation.log,
    )


def test_every_jailed_runner_gets_a_command_line_of_one_length() -> None:
    """Command lines of different lengths shift where a process's stack starts: identical
    code timed as the reference and as a kernel differed by a steady 4-8 % before."""
    from accelopt_mcp.backends.cpu_candidate_parent import padded_spec

    short = {"entry": "/w/reference_jail/reference.py", "symbol": "forward"}
    long = {"entry": "/w/kernel_0123abcd/main.py", "symbol": "kernel", "extra": "x" * 300}
    a, b = padded_spec(short), padded_spec(long)
    assert len(a) == len(b)
    assert json.loads(a)["entry"] == short["entry"] and json.loads(b)["extra"] == long["extra"]
