"""What the time breakdown and the stress sets cost a cpu evaluation (issue 22).

Each evaluation reports its untimed extras in Evaluation.measurement, timed by the harness
around them: `breakdown_s` (fresh inputs, the one call under the line tracer, reading its
report) and `stress_s` (drawing the stress sets, the reference's and the kernel's calls on
them, the comparisons). Whole-evaluation wall times are printed beside them, but they vary by
seconds from one evaluation to the next (sampling stops when its question is answered), far
more than either extra, so the extras are read from the harness's own figures.

(a) breakdown: the softmax example's slow kernel (a Python loop over 256 rows, ~10 ms a call)
    and its fast kernel (~1 ms), BenchmarkConfig.breakdown on;
(b) stress sets: the same, on the softmax task as shipped (two stress sets, x6 and x100).

    .venv/bin/python benchmarks/bench_breakdown.py [--repeats 3] [--max-timing 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from accelopt_mcp.backends.cpu import CpuBackend
from accelopt_mcp.models import BenchmarkConfig
from accelopt_mcp.tasks.kernels import load_solution
from accelopt_mcp.tasks.loader import load_task

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "cpu" / "nkibench"
TASK = EXAMPLES / "reference" / "softmax_M256_N1024_numpy_0.py"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-timing", type=float, default=5.0)
    args = parser.parse_args()
    task = load_task(TASK)
    config = BenchmarkConfig(max_timing_seconds=args.max_timing, breakdown=True)
    backend = CpuBackend()
    for kernel in ("softmax_M256_N1024_0", "softmax_M256_N1024_fast"):
        solution = load_solution(EXAMPLES / "kernels" / f"{kernel}.py", task)
        walls, breakdowns, stresses = [], [], []
        for _ in range(args.repeats):
            started = time.perf_counter()
            evaluation = backend.evaluate(task, solution, config)
            walls.append(time.perf_counter() - started)
            if not evaluation.passed or not evaluation.breakdown:
                raise SystemExit(f"{kernel}: {evaluation.status.value}\n{evaluation.log}")
            breakdowns.append(evaluation.measurement["breakdown_s"])
            stresses.append(evaluation.measurement["stress_s"])
        assert evaluation.performance is not None
        wall = statistics.median(walls)
        breakdown, stress = statistics.median(breakdowns), statistics.median(stresses)
        print(
            f"{kernel} ({evaluation.performance.latency_ms:.2f} ms a call), median of "
            f"{args.repeats}: evaluation {wall:.2f} s; (a) breakdown {1e3 * breakdown:.1f} ms "
            f"({breakdown / wall:.1%}); (b) 2 stress sets {1e3 * stress:.1f} ms "
            f"({stress / wall:.1%})"
        )


if __name__ == "__main__":
    main()
