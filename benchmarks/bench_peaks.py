"""This host's CPU peaks as `accelopt backends` measures them, how long measuring takes, and how
much the figures move from one measurement to the next.

    .venv/bin/python benchmarks/bench_peaks.py [--repeat 3] [--tiny]

Nothing is kept (no store, no peaks file): each repetition is a fresh measurement
(accelopt_mcp.backends.cpu_peaks.measure_peaks). The spread column is (max - min) / median over
the repetitions; a figure that moves by more than a few percent was measured on a busy host.
Target: a default measurement within 15 s (it is taken once per CPU model, then kept).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from accelopt_mcp.backends.cpu import host_hardware
from accelopt_mcp.backends.cpu_peaks import CorePeaks, CpuPeaks, PeakSizes, measure_peaks

TARGET_SECONDS = 15.0


def _figures(peaks: CorePeaks, prefix: str) -> dict[str, tuple[float, str]]:
    found = {
        f"{prefix} fp32 matmul": (peaks.matmul_fp32_flops_per_s / 1e9, "GFLOP/s"),
        f"{prefix} fp64 matmul": (peaks.matmul_fp64_flops_per_s / 1e9, "GFLOP/s"),
        f"{prefix} elementwise fp32": (peaks.vector_fp32_flops_per_s / 1e9, "GFLOP/s"),
        f"{prefix} elementwise fp64": (peaks.vector_fp64_flops_per_s / 1e9, "GFLOP/s"),
    }
    for point in peaks.bandwidth:
        where = "streaming" if point.holds_bytes is None else f"in {point.level}"
        name = f"{prefix} memory {where} ({point.working_set_bytes / (1 << 20):.3g} MiB)"
        found[name] = (point.bytes_per_s / 1e9, "GB/s")
    if not peaks.bandwidth:
        found[f"{prefix} memory streaming"] = (peaks.memory_bytes_per_s / 1e9, "GB/s")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="measurements to take")
    parser.add_argument("--tiny", action="store_true", help="the tests' tiny sizes")
    args = parser.parse_args()
    sizes = PeakSizes.tiny() if args.tiny else PeakSizes()
    hardware = host_hardware()
    runs: list[CpuPeaks] = [measure_peaks(hardware, sizes) for _ in range(args.repeat)]
    print(f"{hardware}: {args.repeat} measurement(s), {'tiny' if args.tiny else 'default'} sizes")
    print(f"numpy {runs[0].numpy}, BLAS {runs[0].blas}, {runs[0].all_cores.cores} usable cores")
    table: dict[str, list[float]] = {}
    units: dict[str, str] = {}
    for run in runs:
        for name, (value, unit) in (
            _figures(run.one_core, "1 core") | _figures(run.all_cores, "all cores")
        ).items():
            table.setdefault(name, []).append(value)
            units[name] = unit
    width = max(len(name) for name in table)
    print(f"{'figure':<{width}}  {'best':>10}  {'median':>10}  {'spread':>7}")
    for name, values in table.items():
        median = statistics.median(values)
        spread = (max(values) - min(values)) / median if median > 0 else 0.0
        print(
            f"{name:<{width}}  {max(values):>10.4g}  {median:>10.4g}  {spread:>6.1%}  {units[name]}"
        )
    seconds = [run.measure_seconds for run in runs]
    worst = max(seconds)
    print(
        f"measuring took {statistics.median(seconds):.2f} s (median), {worst:.2f} s at most; "
        f"target {TARGET_SECONDS:g} s: {'met' if worst <= TARGET_SECONDS else 'MISSED'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
