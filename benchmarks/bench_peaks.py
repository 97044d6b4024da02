"""This host's CPU peaks as `accelopt backends` measures them, how long measuring takes, how
much the figures move from one measurement to the next, and how busy the host was each time.

    .venv/bin/python benchmarks/bench_peaks.py [--repeat 3] [--tiny] [--cores 1,2]

Nothing is kept (no store, no peaks file): each repetition is a fresh measurement
(accelopt_mcp.backends.cpu_peaks.measure_peaks): one core's figures and every usable core's
(or those of each count in --cores), each set measured with that many cores working at once.
For several cores the fp32/fp64 matmul rows also show both ways of keeping them busy (one
pinned process per core, one BLAS thread each, added up; one process with the BLAS on every
core): the figure is the higher. The spread column is (max - min) / median over the
repetitions; a figure that moves by more than a few percent was measured on a busy host, and
the "host" lines say how busy (HostLoad: the share of the cores' time that went to other
programs, how long the probes waited for a core). Target: a default measurement within 15 s
(it is taken once per CPU model, then kept).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from accelopt_mcp.backends.cpu_peaks_measure import measure_peaks
from accelopt_mcp.backends.cpu_peaks_records import CorePeaks, CpuPeaks, PeakSizes
from accelopt_mcp.backends.host_facts import host_hardware

TARGET_SECONDS = 15.0


def _figures(peaks: CorePeaks) -> dict[str, tuple[float, str]]:
    prefix = f"{peaks.cores} core{'s' if peaks.cores > 1 else ''}"
    found = {
        f"{prefix} fp32 matmul": (peaks.matmul_fp32_flops_per_s / 1e9, "GFLOP/s"),
        f"{prefix} fp64 matmul": (peaks.matmul_fp64_flops_per_s / 1e9, "GFLOP/s"),
    }
    for method, label in (("processes", "processes"), ("blas", "BLAS threads")):
        for short in ("fp32", "fp64"):
            value = peaks.by_method.get(method, {}).get(f"matmul_{short}_flops_per_s")
            if value is not None:
                found[f"{prefix} {short} matmul, {label}"] = (value / 1e9, "GFLOP/s")
    found |= {
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
    parser.add_argument(
        "--cores", default="", help="core counts to measure besides one (default: all usable)"
    )
    args = parser.parse_args()
    counts = [int(c) for c in args.cores.split(",") if c.strip()]
    sizes = PeakSizes.tiny(all_cores=not counts) if args.tiny else PeakSizes(all_cores=not counts)
    hardware = host_hardware()
    runs: list[CpuPeaks] = [
        measure_peaks(hardware, sizes, counts=counts) for _ in range(args.repeat)
    ]
    print(f"{hardware}: {args.repeat} measurement(s), {'tiny' if args.tiny else 'default'} sizes")
    print(
        f"numpy {runs[0].numpy}, BLAS {runs[0].blas}, {len(os.sched_getaffinity(0))} usable "
        f"cores; core counts measured: {', '.join(str(e.cores) for e in runs[0].by_cores)}"
    )
    table: dict[str, list[float]] = {}
    units: dict[str, str] = {}
    for run in runs:
        for entry in run.by_cores:
            for name, (value, unit) in _figures(entry).items():
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
    for index, run in enumerate(runs):
        for entry in run.by_cores:
            print(
                f"run {index + 1}, {entry.cores} core(s) on cpus {entry.cpus}: "
                f"{entry.measure_seconds:.2f} s, {entry.load.describe()}"
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
