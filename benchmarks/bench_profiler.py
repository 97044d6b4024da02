"""How good is the cpu profiler itself? One command, prints figures and whether targets are met.

(a) overhead: wall time of one evaluation minus the time spent inside the timed calls of the
    kernel and of the reference (timed alongside it in its own jail), with the bubblewrap jail
    and without it (ACCELOPT_JAIL=none), side by side; targets: the jail adds < 100 ms, total
    < 300 ms. Also the harness's round trip per timed call (an empty call, subtracted from
    every sample).
(b) precision: relative spread (max - min) / median of the median latencies of 10 repeated
    evaluations of the same kernel; target < 5 %.
(c) throughput: 20 evaluations on a 2-worker device pool vs a 1-worker pool; target >= 1.7x.
(d) contention: latency of a kernel pinned to a core that a busy loop shares, vs alone
    (no target; shows that waiting for the core is taken out of the figures).

    .venv/bin/python benchmarks/bench_profiler.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from accelopt_mcp.backends.cpu import CpuBackend
from accelopt_mcp.backends.pool import DevicePool
from accelopt_mcp.models import BenchmarkConfig, Solution, Task
from accelopt_mcp.tasks.kernels import load_solution
from accelopt_mcp.tasks.loader import load_task

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "cpu" / "nkibench"
CONFIG = BenchmarkConfig()


def example(task_stem: str, kernel_stem: str) -> tuple[Task, Solution]:
    task = load_task(EXAMPLES / "reference" / f"{task_stem}_numpy_0.py")
    return task, load_solution(EXAMPLES / "kernels" / f"{kernel_stem}.py", task)


def verdict(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


def _overheads(repeats: int) -> tuple[list[float], list[float]]:
    """(overheads in ms, harness round trips in us) of `repeats` evaluations in this mode."""
    task, solution = example("softmax_M256_N1024", "softmax_M256_N1024_fast")
    backend = CpuBackend(cpus={min(os.sched_getaffinity(0))})
    overheads, round_trips = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        evaluation = backend.evaluate(task, solution, CONFIG)
        wall_ms = (time.perf_counter() - started) * 1e3
        assert evaluation.passed, evaluation.log
        counters = evaluation.hardware_counters
        overheads.append(
            wall_ms - counters["timed_total_ms"] - counters["reference_timed_total_ms"]
        )
        round_trips.append(counters["harness_overhead_us"])
    return overheads, round_trips


def bench_overhead(repeats: int) -> float:
    # Alternate the two modes so that machine load hits both alike; ACCELOPT_JAIL is read each
    # time a backend is made.
    results: dict[str, tuple[list[float], list[float]]] = {"bwrap": ([], []), "none": ([], [])}
    for _ in range(repeats):
        for mode in ("bwrap", "none"):
            os.environ["ACCELOPT_JAIL"] = mode
            overheads, trips = _overheads(1)
            results[mode][0].extend(overheads)
            results[mode][1].extend(trips)
    os.environ.pop("ACCELOPT_JAIL", None)
    jailed = statistics.median(results["bwrap"][0])
    plain = statistics.median(results["none"][0])
    added = jailed - plain
    print(
        f"(a) overhead per evaluation over {repeats} runs each: jailed median {jailed:.0f} ms, "
        f"without a jail {plain:.0f} ms -- the jail adds {added:.0f} ms (target < 100 ms: "
        f"{verdict(added < 100)}); total with the jail {jailed:.0f} ms (target < 300 ms: "
        f"{verdict(jailed < 300)})"
    )
    print(
        f"    harness round trip per timed call (empty call, subtracted): jailed median "
        f"{statistics.median(results['bwrap'][1]):.1f} us, without a jail "
        f"{statistics.median(results['none'][1]):.1f} us"
    )
    return jailed


def bench_precision(repeats: int) -> dict[str, float]:
    spreads = {}
    for task_stem, kernel_stem in (
        ("softmax_M256_N1024", "softmax_M256_N1024_fast"),
        ("softmax_M256_N1024", "softmax_M256_N1024_0"),
    ):
        task, solution = example(task_stem, kernel_stem)
        backend = CpuBackend()
        medians = []
        for _ in range(repeats):
            evaluation = backend.evaluate(task, solution, CONFIG)
            assert evaluation.passed, evaluation.log
            medians.append(evaluation.performance.latency_ms)
        spread = (max(medians) - min(medians)) / statistics.median(medians)
        spreads[kernel_stem] = spread
        print(
            f"(b) precision, {kernel_stem}: medians {min(medians):.4f}..{max(medians):.4f} ms, "
            f"spread {spread:.1%} over {repeats} evaluations "
            f"-- target < 5 %: {verdict(spread < 0.05)}"
        )
    return spreads


def bench_throughput(jobs_count: int) -> float:
    pairs = [
        ("rmsnorm_M256_N1024", "rmsnorm_M256_N1024_fast"),
        ("softmax_M256_N1024", "softmax_M256_N1024_0"),
        ("silu_M512_N1024", "silu_M512_N1024_0"),
        ("matmul_bias_M128_K256_N256", "matmul_bias_M128_K256_N256_0"),
        ("layernorm_M256_N1024", "layernorm_M256_N1024_0"),
    ]
    loaded = [example(*pair) for pair in pairs]
    jobs = [loaded[i % len(loaded)] for i in range(jobs_count)]
    walls = {}
    for workers in (1, 2):
        with DevicePool.for_cpu(workers=workers) as pool:
            started = time.perf_counter()
            results = pool.map(CpuBackend, jobs, CONFIG)
            walls[workers] = time.perf_counter() - started
        assert all(r.evaluation.passed for r in results)
    ratio = walls[1] / walls[2]
    print(
        f"(c) throughput, {jobs_count} evaluations: 1 worker {walls[1]:.2f} s, "
        f"2 workers {walls[2]:.2f} s, ratio {ratio:.2f}x -- target >= 1.7x: "
        f"{verdict(ratio >= 1.7)}"
    )
    return ratio


def bench_contention() -> float:
    task, solution = example("softmax_M256_N1024", "softmax_M256_N1024_0")
    core = max(os.sched_getaffinity(0))
    backend = CpuBackend(cpus={core})
    alone = backend.evaluate(task, solution, CONFIG).performance.latency_ms
    hog = subprocess.Popen(
        [sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True: pass"]
    )
    try:
        time.sleep(0.2)
        shared = backend.evaluate(task, solution, CONFIG).performance.latency_ms
    finally:
        hog.kill()
        hog.wait()
    ratio = shared / alone
    print(
        f"(d) contention: {alone:.3f} ms alone, {shared:.3f} ms sharing core {core} with a busy "
        f"loop ({ratio:.2f}x; the harness times wall clock: a shared core shows as such)"
    )
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=20)
    args = parser.parse_args()
    print(f"host: {CpuBackend().hardware}, {len(os.sched_getaffinity(0))} usable cores")
    bench_overhead(args.repeats)
    bench_precision(args.repeats)
    if len(os.sched_getaffinity(0)) >= 2:
        bench_throughput(args.jobs)
    else:
        print("(c) throughput: skipped, needs at least 2 cores")
    bench_contention()


if __name__ == "__main__":
    main()
