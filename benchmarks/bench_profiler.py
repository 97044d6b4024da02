"""Can the cpu profiler's numbers be ranked on? One command; figures and targets side by side.

(a) precision: the spread ((max - min) / median) of the medians of 10 evaluations of the same
    kernel, for a fast (~1 ms) and a slow (~8 ms) one, on a quiet host and with a busy loop
    on the other core; targets <= 1 % quiet, <= 3 % busy. Also the mean interval half-width
    the evaluations reported, and how often their intervals held the pooled median.
(b) honesty: a kernel identical to the reference; its speedup interval contains 1.0 in
    >= 95 % of evaluations.
(c) cost: evaluations per minute at the defaults, today's code against the version before
    interleaved intervals (extracted from git, run side by side in this run).
(d) ranking: three kernels doing 1.00x, 1.05x and 1.20x the work, compared head to head
    (Backend.compare) 20 times; target: ordered correctly in >= 19 of 20.
(e) calibration under load (issue 24), side by side in one run, in three conditions: quiet, a
    busy loop on every core, and the engine's default concurrency (one evaluation per core at
    once, as a run's DevicePool does). Per condition: A/A against the reference (a kernel whose
    body is the reference) and A/A between two copies of one kernel (compare), each as bias
    (median estimate - 1) and coverage (share of 95 % intervals holding 1.00); and the
    1.00/1.05/1.20x ranking. Targets: |bias| <= 2 % quiet, <= 5 % loaded; coverage >= 90 %;
    ordering >= 19/20 of the trials.

(f) wall time of one `accelopt profile` (the CLI's start-up included) of the ~1 ms softmax
    kernel and of a copy of its reference, quiet and with a busy loop on every core, with the
    time outside timed calls and evaluations per minute; target <= 1.5 s for the clear case.

    .venv/bin/python benchmarks/bench_profiler.py [--only a,b,c,d,e,f] [--repeats 10]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from accelopt_mcp.backends.base import Baseline
from accelopt_mcp.backends.cpu import CpuBackend
from accelopt_mcp.models import BenchmarkConfig, BuildSpec, Evaluation, Solution, SourceFile, Task
from accelopt_mcp.tasks.kernels import load_solution
from accelopt_mcp.tasks.loader import load_task

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "cpu" / "nkibench"
CONFIG = BenchmarkConfig()
BEFORE = "73d2a75"
"""The last commit before interleaved intervals: what 'today' meant when issue 14 was filed."""


def example(task_stem: str, kernel_stem: str) -> tuple[Task, Solution]:
    task = load_task(EXAMPLES / "reference" / f"{task_stem}_numpy_0.py")
    return task, load_solution(EXAMPLES / "kernels" / f"{kernel_stem}.py", task)


def verdict(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


def python_kernel(task: Task, code: str, name: str) -> Solution:
    return Solution(
        name=name,
        definition=task.definition.name,
        author="bench",
        spec=BuildSpec(
            language="python",
            target_hardware=["cpu"],
            entry_point="main.py::kernel",
            destination_passing_style=False,
        ),
        sources=[SourceFile(path="main.py", content=textwrap.dedent(code))],
    )


@contextmanager
def busy_core(core: int | None) -> Iterator[None]:
    """A busy loop pinned to `core` for the duration (nothing when None)."""
    if core is None:
        yield
        return
    hog = subprocess.Popen(
        [sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True: pass"]
    )
    try:
        time.sleep(0.2)
        yield
    finally:
        hog.kill()
        hog.wait()


def _passed(evaluation: Evaluation) -> Evaluation:
    assert evaluation.passed and evaluation.performance, evaluation.log
    return evaluation


def bench_precision(repeats: int) -> None:
    cores = sorted(os.sched_getaffinity(0))
    mine, other = cores[0], (cores[1] if len(cores) > 1 else None)
    backend = CpuBackend(cpus={mine})
    for task_stem, kernel_stem in (
        ("softmax_M256_N1024", "softmax_M256_N1024_fast"),
        ("silu_M512_N1024", "silu_M512_N1024_0"),
    ):
        task, solution = example(task_stem, kernel_stem)
        for condition, hog, target in (("quiet", None, 0.01), ("busy", other, 0.03)):
            if condition == "busy" and other is None:
                print(f"(a) {kernel_stem} busy: skipped, needs a second core")
                continue
            medians, widths, seconds = [], [], []
            lows, highs, speedups = [], [], []
            with busy_core(hog):
                for _ in range(repeats):
                    started = time.perf_counter()
                    evaluation = _passed(backend.evaluate(task, solution, CONFIG))
                    seconds.append(time.perf_counter() - started)
                    stats = evaluation.latency_stats
                    assert stats is not None and stats.ci_half_width is not None
                    medians.append(stats.median_ms)
                    assert evaluation.performance is not None
                    speedups.append(evaluation.performance.speedup_factor)
                    widths.append(stats.ci_half_width)
                    lows.append(stats.ci_low_ms or 0.0)
                    highs.append(stats.ci_high_ms or 0.0)
            middle = statistics.median(medians)
            spread = (max(medians) - min(medians)) / middle
            held = sum(lo <= middle <= hi for lo, hi in zip(lows, highs, strict=True))
            print(
                f"(a) {kernel_stem} {condition}: medians {min(medians):.4f}..{max(medians):.4f} "
                f"ms, spread {spread:.2%} over {repeats} evaluations (target <= {target:.0%}: "
                f"{verdict(spread <= target)}); stdev/mean "
                f"{statistics.stdev(medians) / statistics.fmean(medians):.2%}; reported CI "
                f"half-width mean ±{statistics.fmean(widths):.2%}; intervals holding the "
                f"median of medians {held}/{repeats}; {statistics.fmean(seconds):.1f} s each"
            )
            ratio_spread = (max(speedups) - min(speedups)) / statistics.median(speedups)
            print(
                f"    speedup over the reference (what rankings use): "
                f"{min(speedups):.3f}..{max(speedups):.3f}x, spread {ratio_spread:.2%} "
                f"(target <= {target:.0%}: {verdict(ratio_spread <= target)}); stdev/mean "
                f"{statistics.stdev(speedups) / statistics.fmean(speedups):.2%}"
            )


def bench_identical(repeats: int) -> None:
    task = load_task(EXAMPLES / "reference" / "softmax_M256_N1024_numpy_0.py")
    code = task.definition.reference + "\n\ndef kernel(x):\n    return forward(x)\n"
    twin = python_kernel(task, code, "reference_twin")
    backend = CpuBackend(cpus={min(os.sched_getaffinity(0))})
    held, speedups = 0, []
    for _ in range(repeats):
        performance = _passed(backend.evaluate(task, twin, CONFIG)).performance
        assert performance is not None
        low, high = performance.speedup_ci_low or 0.0, performance.speedup_ci_high or 0.0
        held += low <= 1.0 <= high
        speedups.append(f"{performance.speedup_factor:.3f} [{low:.3f}, {high:.3f}]")
    print(
        f"(b) a kernel identical to the reference: speedup interval holds 1.0 in {held}/"
        f"{repeats} evaluations ({held / repeats:.0%}; target >= 95 %: "
        f"{verdict(held / repeats >= 0.95)}); e.g. {', '.join(speedups[:3])}"
    )


COST_SCRIPT = """
import json, sys, time
from pathlib import Path
from typing import Any
from accelopt_mcp.backends.cpu import CpuBackend
from accelopt_mcp.models import BenchmarkConfig
from accelopt_mcp.tasks.kernels import load_solution
from accelopt_mcp.tasks.loader import load_task
examples = Path(sys.argv[1])
task = load_task(examples / "reference" / "softmax_M256_N1024_numpy_0.py")
solution = load_solution(examples / "kernels" / "softmax_M256_N1024_fast.py", task)
import accelopt_mcp.backends.cpu as cpu
root = sys.argv[4]
# The runner is started with -I (no PYTHONPATH): point it at this tree's package explicitly.
boot = (f"import sys, runpy; sys.path.insert(0, {root!r}); sys.argv = sys.argv[:1] + sys.argv[1:]; "
        "runpy.run_module('accelopt_mcp.backends.cpu_runner', run_name='__main__')")
cpu.runner_argv = lambda job, result: [sys.executable, "-s", "-c", boot, str(job), str(result)]
backend = cpu.CpuBackend(cpus={int(sys.argv[3])})
first = backend.evaluate(task, solution, BenchmarkConfig())
assert first.passed, first.log
started = time.perf_counter()
for _ in range(int(sys.argv[2])):
    assert backend.evaluate(task, solution, BenchmarkConfig()).passed
print(json.dumps({"seconds": (time.perf_counter() - started) / int(sys.argv[2])}))
"""


def _seconds_per_evaluation(package_root: Path, repeats: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(package_root)}
    env.pop("ACCELOPT_JAIL", None)
    core = str(min(os.sched_getaffinity(0)))
    out = subprocess.run(
        [sys.executable, "-c", COST_SCRIPT, str(EXAMPLES), str(repeats), core, str(package_root)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=package_root,
    ).stdout
    return float(json.loads(out.splitlines()[-1])["seconds"])


def bench_cost(repeats: int) -> None:
    with tempfile.TemporaryDirectory(prefix="accelopt-before-") as tmp:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", BEFORE, "accelopt_mcp"],
            capture_output=True,
            check=False,
        )
        if archive.returncode != 0:
            print(f"(c) cost: skipped, commit {BEFORE} is not in this clone")
            return
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        # Alternate, so that load on the host hits both alike.
        before, now = [], []
        for _ in range(2):
            before.append(_seconds_per_evaluation(Path(tmp), max(1, repeats // 2)))
            now.append(_seconds_per_evaluation(ROOT, max(1, repeats // 2)))
    b, n = statistics.fmean(before), statistics.fmean(now)
    print(
        f"(c) cost at the defaults (softmax fast, one core): {60 / n:.1f} evaluations/min now "
        f"({n:.2f} s each) vs {60 / b:.1f}/min before ({b:.2f} s each): {n / b:.1f}x the time"
    )


RATIO_CODE = """
import numpy as np

def kernel(x):
    scratch = np.empty_like(x)
    for _ in range({n}):
        np.multiply(x, np.float32(1.0001), out=scratch)
    return (x / (np.float32(1.0) + np.exp(-x))).astype(np.float32)
"""


def _ratio_kernels(task: Task) -> list[Baseline]:
    """Correct silu (x * sigmoid(x)) plus 20, 21 and 24 units of extra work."""
    return [
        Baseline(label=label, solution=python_kernel(task, RATIO_CODE.format(n=n), label))
        for label, n in (("1.00x", 20), ("1.05x", 21), ("1.20x", 24))
    ]


def bench_ranking(trials: int) -> None:
    task = load_task(EXAMPLES / "reference" / "silu_M512_N1024_numpy_0.py")
    solutions = _ratio_kernels(task)
    backend = CpuBackend(cpus={min(os.sched_getaffinity(0))})
    correct, told_apart = 0, 0
    for trial in range(trials):
        order = solutions[trial % 3 :] + solutions[: trial % 3]
        comparison = backend.compare(task, order, CONFIG)
        ranked = [k.label for k in comparison.kernels]
        correct += ranked == ["1.00x", "1.05x", "1.20x"]
        told_apart += sum(p.verdict == "faster" for p in comparison.pairs)
    print(
        f"(d) ranking 1.00x/1.05x/1.20x work: ordered correctly in {correct}/{trials} "
        f"comparisons (target >= {trials - 1}/{trials}: {verdict(correct >= trials - 1)}); "
        f"pairs told apart (verdict faster) {told_apart}/{3 * trials}"
    )


def _twin(task: Task, name: str) -> Solution:
    code = task.definition.reference + "\n\ndef kernel(x):\n    return forward(x)\n"
    return python_kernel(task, code, name)


def _load(condition: str) -> list[subprocess.Popen[bytes]]:
    if condition != "busy":
        return []
    return [
        subprocess.Popen(
            [sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{c}}})\nwhile True: pass"]
        )
        for c in sorted(os.sched_getaffinity(0))
    ]


def _summary(estimates: list[float], held: int, loaded: bool) -> str:
    bias = statistics.median(estimates) - 1.0
    coverage = held / len(estimates)
    ok = abs(bias) <= (0.05 if loaded else 0.02) and coverage >= 0.9
    return (
        f"bias {bias:+.1%}, coverage {held}/{len(estimates)} ({coverage:.0%}), range "
        f"{min(estimates):.3f}..{max(estimates):.3f}: {verdict(ok)}"
    )


def _aa_evaluations(task: Task, twin: Solution, pool: Any, repeats: int) -> list[Evaluation]:
    """`repeats` evaluations of `twin` on the first core, or, with the engine's pool, as many
    at once as it has cores (every one of them an A/A sample)."""
    if pool is None:
        backend = CpuBackend(cpus={min(os.sched_getaffinity(0))})
        return [backend.evaluate(task, twin, CONFIG) for _ in range(repeats)]
    found: list[Evaluation] = []
    while len(found) < repeats:
        found += [p.evaluation for p in pool.map(CpuBackend, [(task, twin)] * pool.size, CONFIG)]
    return found[:repeats]


def _compare_beside(task: Task, kernels: list[Baseline], other: Solution, *, loaded: bool) -> Any:
    """compare on the first core; when `loaded`, the other cores run A/A evaluations
    meanwhile, as a run's pool would."""
    from concurrent.futures import ThreadPoolExecutor

    cores = sorted(os.sched_getaffinity(0))
    backend = CpuBackend(cpus={cores[0]})
    if not loaded or len(cores) == 1:
        return backend.compare(task, kernels, CONFIG)
    with ThreadPoolExecutor(len(cores) - 1) as side:
        others = [
            side.submit(CpuBackend(cpus={c}).evaluate, task, other, CONFIG) for c in cores[1:]
        ]
        found = backend.compare(task, kernels, CONFIG)
        for future in others:
            future.result()
    return found


def bench_calibration(repeats: int, trials: int) -> None:
    from accelopt_mcp.backends.pool import DevicePool

    task = load_task(EXAMPLES / "reference" / "softmax_M256_N1024_numpy_0.py")
    twin_a, twin_b = _twin(task, "a"), _twin(task, "b")
    cores = sorted(os.sched_getaffinity(0))
    for condition in ("quiet", "busy", "engine"):
        loaded = condition != "quiet"
        hogs = _load(condition)
        pool = DevicePool.for_cpu() if condition == "engine" else None
        try:
            time.sleep(0.2)

            started = time.perf_counter()
            estimates, held = [], 0
            for evaluation in _aa_evaluations(task, twin_a, pool, repeats):
                performance = _passed(evaluation).performance
                assert performance is not None
                low = performance.speedup_ci_low or 0.0
                high = performance.speedup_ci_high or math.inf
                estimates.append(performance.speedup_factor)
                held += low <= 1.0 <= high
            seconds = (time.perf_counter() - started) / repeats
            print(
                f"(e) {condition}: A/A against the reference, {repeats} evaluations "
                f"({seconds:.1f} s each): {_summary(estimates, held, loaded)}"
            )
            pair_estimates, pair_held = [], 0
            for _ in range(max(2, repeats // 2)):
                comparison = _compare_beside(
                    task,
                    [Baseline(label="a", solution=twin_a), Baseline(label="b", solution=twin_b)],
                    twin_b,
                    loaded=pool is not None,
                )
                (pair,) = comparison.pairs
                value = pair.speedup if pair.kernel == "a" else 1.0 / pair.speedup
                pair_estimates.append(value)
                pair_held += pair.ci_low <= 1.0 <= (pair.ci_high or math.inf)
            print(
                f"(e) {condition}: A/A between two copies (compare): "
                f"{_summary(pair_estimates, pair_held, loaded)}"
            )
            correct = 0
            solutions = _ratio_kernels(
                task_silu := load_task(EXAMPLES / "reference" / "silu_M512_N1024_numpy_0.py")
            )
            for trial in range(trials):
                order = solutions[trial % 3 :] + solutions[: trial % 3]
                backend = CpuBackend(cpus={cores[0]})
                ranked = [k.label for k in backend.compare(task_silu, order, CONFIG).kernels]
                correct += ranked == ["1.00x", "1.05x", "1.20x"]
            print(
                f"(e) {condition}: 1.00/1.05/1.20x ordered correctly in {correct}/{trials} "
                f"(target >= {trials - 1}: {verdict(correct >= trials - 1)})"
            )
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
            if pool is not None:
                pool.close()


ACCELOPT = str(Path(sys.executable).parent / "accelopt")


def _one_profile(kernel: Path, task: Path) -> tuple[float, str]:
    """One `accelopt profile --no-store --json`: (wall s, the timing line)."""
    started = time.perf_counter()
    out = subprocess.run(
        [ACCELOPT, "profile", str(kernel), "--task", str(task), "--no-store", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    evaluation = json.loads(out.stdout)["evaluation"]
    line = next((t for t in evaluation["log"].splitlines() if t.startswith("timing:")), "")
    return wall, line


def _one_evaluation(backend: CpuBackend, task: Task, solution: Solution) -> tuple[float, float]:
    """One in-process evaluation: (wall s, of it s outside the timed calls)."""
    started = time.perf_counter()
    evaluation = backend.evaluate(task, solution, CONFIG)
    wall = time.perf_counter() - started
    timed = (evaluation.measurement or {}).get("all_timed_total_ms", 0.0) / 1e3
    return wall, wall - timed


def bench_wall(repeats: int) -> None:
    """(f) what a user waits for: `accelopt profile` of the ~1 ms softmax kernel (clearly faster
    than its reference) and of a copy of the reference (indistinguishable from it), quiet and
    with a busy loop on every core, side by side; the same evaluations in process (no CLI
    start-up), with the time outside timed calls; evaluations per minute at the defaults."""
    task_path = EXAMPLES / "reference" / "softmax_M256_N1024_numpy_0.py"
    task = load_task(task_path)
    twin_dir = Path(tempfile.mkdtemp(prefix="accelopt-bench-"))
    twin_path = twin_dir / "twin.py"
    twin_path.write_text(task_path.read_text() + "\n\ndef kernel(x):\n    return forward(x)\n")
    fast_path = EXAMPLES / "kernels" / "softmax_M256_N1024_fast.py"
    kernels = {
        "fast softmax": (fast_path, load_solution(fast_path, task)),
        "copy of the reference": (twin_path, _twin(task, "twin")),
    }
    backend = CpuBackend(cpus={min(os.sched_getaffinity(0))})
    for condition in ("quiet", "busy"):
        hogs = _load(condition)
        try:
            for name, (path, solution) in kernels.items():
                runs = [_one_profile(path, task_path) for _ in range(repeats)]
                walls = [r[0] for r in runs]
                inside = [_one_evaluation(backend, task, solution) for _ in range(repeats)]
                evaluation_s = statistics.median(w for w, _ in inside)
                outside_s = statistics.median(o for _, o in inside)
                wall = statistics.median(walls)
                clear = name == "fast softmax"
                print(
                    f"(f) {name}, {condition}: accelopt profile median {wall:.2f} s "
                    f"({min(walls):.2f}..{max(walls):.2f}); the evaluation alone "
                    f"{evaluation_s:.2f} s ({60 / evaluation_s:.0f}/min), {outside_s * 1e3:.0f} ms "
                    "of it outside timed calls"
                    + (
                        f"; target <= 1.5 s: {verdict(evaluation_s <= 1.5)}, overhead <= 300 ms: "
                        f"{verdict(outside_s <= 0.3)}"
                        if clear
                        else ""
                    )
                )
                print(f"    {runs[0][1]}")
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--only", default="a,b,c,d,e,f")
    args = parser.parse_args()
    wanted = set(args.only.split(","))
    print(
        f"host: {CpuBackend().hardware}, {len(os.sched_getaffinity(0))} usable cores; defaults: "
        f"target ±{CONFIG.target_ci:.0%}, {CONFIG.min_processes}-{CONFIG.max_processes} process "
        f"sets, cap {CONFIG.max_timing_seconds:g} s"
    )
    if "a" in wanted:
        bench_precision(args.repeats)
    if "b" in wanted:
        bench_identical(args.trials)
    if "c" in wanted:
        bench_cost(args.repeats)
    if "d" in wanted:
        bench_ranking(args.trials)
    if "e" in wanted:
        bench_calibration(args.repeats, args.trials)
    if "f" in wanted:
        bench_wall(max(3, args.repeats // 2))


if __name__ == "__main__":
    main()
