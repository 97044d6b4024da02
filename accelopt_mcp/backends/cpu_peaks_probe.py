"""The measuring half of cpu_peaks: NumPy loops that find this host's peak rates, run in a
child process (`python -I -m accelopt_mcp.backends.cpu_peaks_probe JOB`) so that the caller's
BLAS thread pool and CPU affinity stay as they are.

The child pins itself to the cores it is given and is started with the BLAS thread counts
already in its environment (OpenBLAS and MKL read them when NumPy is imported, so NumPy is
imported only after pinning). It prints one JSON object on its last line of stdout.

Modes (JOB is a JSON object with "mode" and the sizes):
- "single": one core, one BLAS thread: matmul (fp32, fp64), the elementwise figure (fp32,
  fp64) and memory bandwidth at each working-set size;
- "blas": several cores, the BLAS with as many threads: matmul (fp32, fp64);
- "crowd": one of several pinned children (one per core, one BLAS thread each) that run the
  same list of phases (a matmul, an elementwise form, a copy or a read) in lockstep: before each
  phase the child prepares its arrays, prints "ready" and waits for "go T" on stdin, T being
  the time.monotonic() instant (the same clock in every process) at which all of them start;
  it then samples until T plus the phase's seconds and keeps every sample's start, end, rate
  and the time it waited for its core meanwhile.
  The parent adds up, phase by phase, what the children reached while all of them were working
  (cpu_peaks.crowd_total).

Every figure is the best of several timed samples: a peak is a maximum, and what slows a sample
down (an interrupt, another process) only ever lowers it. In "single", samples are timed by the
thread's CPU time, so time spent descheduled on a busy host does not count. In "blas" and
"crowd" they are timed by the wall clock: a figure for several cores is what they did at once,
and a core that was lent to another program for part of a sample did not work then.

Every mode also says how the process fared: `run_ns` and `wait_ns`, the time its threads ran
and the time they were runnable but waited for a core (/proc/<pid>/task/*/schedstat) over the
measurement, and `cpu_s`, the CPU time it used in all (getrusage): what cpu_peaks reads the
host's load from.
"""

from __future__ import annotations

import json
import math
import os
import resource
import sys
import time
from collections.abc import Callable
from typing import Any

from accelopt_mcp.backends.host_load import thread_wait_ns

SAMPLE_SECONDS = 2e-3
"""A sample of a short call repeats it until the sample lasts about this long: the timer's
resolution and the loop's own cost stay negligible."""
MAX_INNER = 100_000
CROWD_SAMPLES = 5
"""The fewest samples a crowd child takes of each phase, however long its window."""


CLOCK: Callable[[], float] = time.perf_counter
"""What best_seconds times samples with: wall-clock time, or ("single") this thread's CPU
time, which leaves out the time the thread was not running: another process on the core (a
busy host) lowers no figure."""


def best_seconds(call: Callable[[], object], *, min_repeats: int, seconds: float) -> float:
    """The shortest time of one call (by CLOCK) over samples taken for at least `min_repeats`
    samples and `seconds` of wall-clock time, after one warm-up call."""
    clock = CLOCK
    call()
    began = clock()
    call()
    single = clock() - began
    inner = max(1, min(MAX_INNER, math.ceil(SAMPLE_SECONDS / max(single, 1e-9))))
    best = math.inf
    count = 0
    end = time.perf_counter() + seconds
    while count < min_repeats or time.perf_counter() < end:
        began = clock()
        for _ in range(inner):
            call()
        spent = clock() - began
        if spent > 0:
            best = min(best, spent / inner)
        count += 1
    return best


def matmul_flops_per_s(n: int, dtype: str, *, min_repeats: int, seconds: float) -> float:
    """2 n^3 FLOPs of an n x n matmul through NumPy's BLAS."""
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(dtype)
    b = rng.standard_normal((n, n)).astype(dtype)
    out = np.empty((n, n), dtype=dtype)

    def call() -> None:
        np.matmul(a, b, out=out)

    return 2.0 * n**3 / best_seconds(call, min_repeats=min_repeats, seconds=seconds)


def vector_flops_per_s(
    elements: list[int],
    dtype: str,
    *,
    min_repeats: int,
    seconds: float,
) -> float:
    """The best elementwise rate over arrays of each size (kept in cache): a multiply-add
    through ufuncs (a * b + c, two FLOPs an element, in place) and a dot product (two FLOPs an
    element, the BLAS's fused multiply-add loop). The dot product is what a reduction such as
    einsum or a norm can reach; the ufunc pair what elementwise arithmetic can."""
    import numpy as np

    rng = np.random.default_rng(0)
    best = 0.0
    for size in elements:
        a, b, c = (rng.standard_normal(size).astype(dtype) for _ in range(3))
        for call in _vector_forms(a, b, c):
            spent = best_seconds(call, min_repeats=min_repeats, seconds=seconds)
            best = max(best, 2.0 * size / spent)
    return best


def _vector_forms(a: Any, b: Any, c: Any) -> tuple[Callable[[], None], Callable[[], None]]:
    import numpy as np

    scratch = np.empty_like(a)

    def fma() -> None:
        np.multiply(a, b, out=scratch)
        np.add(scratch, c, out=scratch)

    def dot() -> None:
        np.dot(a, b)

    return fma, dot


def bandwidth_bytes_per_s(working_set: int, *, min_repeats: int, seconds: float) -> float:
    """The best of a copy (read and write half the working set each: np.copyto, the C
    library's memcpy) and a read (sum over the whole working set), in bytes moved per second,
    counted as a roofline counts them: bytes read plus bytes written."""
    copy, read, moved = _bandwidth_forms(working_set)
    copied = best_seconds(copy, min_repeats=min_repeats, seconds=seconds)
    was_read = best_seconds(read, min_repeats=min_repeats, seconds=seconds)
    return max(moved / copied, moved / was_read)


def _bandwidth_forms(
    working_set: int,
) -> tuple[Callable[[], None], Callable[[], None], float]:
    """A copy and a read over `working_set` bytes, and the bytes each moves."""
    import numpy as np

    half = max(1, working_set // 16)  # float64 elements in half the working set
    source = np.ones(half, dtype=np.float64)
    target = np.empty(half, dtype=np.float64)
    whole = np.ones(2 * half, dtype=np.float64)

    def copy() -> None:
        np.copyto(target, source)

    def read() -> None:
        np.add.reduce(whole)

    return copy, read, 16.0 * half


def _single(job: dict[str, Any]) -> dict[str, Any]:
    repeats, seconds = int(job["min_repeats"]), float(job["seconds"])
    n = int(job["matmul_n"])
    elements = [int(e) for e in job["vector_elements"]]
    return {
        "matmul_fp32_flops_per_s": matmul_flops_per_s(
            n, "float32", min_repeats=repeats, seconds=seconds
        ),
        "matmul_fp64_flops_per_s": matmul_flops_per_s(
            n, "float64", min_repeats=repeats, seconds=seconds
        ),
        "vector_fp32_flops_per_s": vector_flops_per_s(
            elements, "float32", min_repeats=repeats, seconds=seconds / 4
        ),
        "vector_fp64_flops_per_s": vector_flops_per_s(
            elements, "float64", min_repeats=repeats, seconds=seconds / 4
        ),
        "bandwidth": [
            [size, bandwidth_bytes_per_s(size, min_repeats=repeats, seconds=seconds / 2)]
            for size in job["working_sets"]
        ],
    }


def _blas(job: dict[str, Any]) -> dict[str, Any]:
    repeats, seconds = int(job["min_repeats"]), float(job["seconds"])
    n = int(job["matmul_n"])
    return {
        "matmul_fp32_flops_per_s": matmul_flops_per_s(
            n, "float32", min_repeats=repeats, seconds=seconds
        ),
        "matmul_fp64_flops_per_s": matmul_flops_per_s(
            n, "float64", min_repeats=repeats, seconds=seconds
        ),
    }


def timed_samples(call: Callable[[], object], until: float) -> list[list[float]]:
    """[start, end, seconds per call, waited] of every sample taken until the time.monotonic()
    instant `until` (at least CROWD_SAMPLES, so that slow calls, a streaming copy of hundreds
    of MiB, still overlap between processes), after a warm-up call: timed by the wall clock on
    time.monotonic, which every process on the host shares; `waited` is how many nanoseconds
    of it (a little more: the reads around it) this thread was runnable but off its core."""
    began = time.monotonic()
    call()
    single = time.monotonic() - began
    if single < SAMPLE_SECONDS:  # the first call (page faults, caches) only warmed up
        began = time.monotonic()
        call()
        single = time.monotonic() - began
    inner = max(1, min(MAX_INNER, math.ceil(SAMPLE_SECONDS / max(single, 1e-9))))
    samples: list[list[float]] = []
    while len(samples) < CROWD_SAMPLES or time.monotonic() < until:
        waited = thread_wait_ns()
        began = time.monotonic()
        for _ in range(inner):
            call()
        ended = time.monotonic()
        waited = thread_wait_ns() - waited
        if ended > began:
            samples.append([began, ended, (ended - began) / inner, float(max(0, waited))])
    return samples


def _phase_call(phase: dict[str, Any]) -> tuple[Callable[[], object], float]:
    """A crowd phase's call, its arrays allocated, and the work one call does (FLOPs or
    bytes)."""
    import numpy as np

    kind = phase["kind"]
    if kind == "matmul":
        n = int(phase["n"])
        rng = np.random.default_rng(0)
        a = rng.standard_normal((n, n)).astype(phase["dtype"])
        b = rng.standard_normal((n, n)).astype(phase["dtype"])
        out = np.empty((n, n), dtype=phase["dtype"])

        def matmul() -> None:
            np.matmul(a, b, out=out)

        return matmul, 2.0 * n**3
    if kind in ("fma", "dot"):
        size = int(phase["elements"])
        rng = np.random.default_rng(0)
        x, y, z = (rng.standard_normal(size).astype(phase["dtype"]) for _ in range(3))
        fma, dot = _vector_forms(x, y, z)
        return (fma if kind == "fma" else dot), 2.0 * size
    if kind in ("copy", "read"):
        copy, read, moved = _bandwidth_forms(int(phase["working_set"]))
        return (copy if kind == "copy" else read), moved
    raise ValueError(f"unknown phase kind {kind!r}")


def _crowd(job: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    np.ones(1)  # NumPy loaded before the first phase
    found: list[list[list[float]]] = []
    before: dict[str, tuple[int, int]] | None = None
    for phase in job["phases"]:
        call, work = _phase_call(phase)
        print("ready", flush=True)
        words = sys.stdin.readline().split()
        if len(words) != 2 or words[0] != "go":
            raise SystemExit(f"expected 'go T', got {words!r}")
        start = float(words[1])
        if before is None:
            before = schedstat()
        pause = start - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        samples = timed_samples(call, start + float(phase["seconds"]))
        found.append([[b, e, work / s, w] for b, e, s, w in samples])
        del call
    return {"phases": found, **_waited(before or schedstat(), schedstat())}


def schedstat() -> dict[str, tuple[int, int]]:
    """(ran, waited) nanoseconds of each of this process's threads so far: the time it ran on
    a core and the time it was runnable but waited for one (another program had it)."""
    found: dict[str, tuple[int, int]] = {}
    try:
        threads = os.listdir("/proc/self/task")
    except OSError:
        return found
    for tid in threads:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                fields = f.read().split()
            found[tid] = (int(fields[0]), int(fields[1]))
        except (OSError, ValueError, IndexError):
            continue
    return found


def _waited(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
) -> dict[str, int]:
    ran = waited = 0
    for tid, (run, wait) in after.items():
        run0, wait0 = before.get(tid, (0, 0))
        ran += max(0, run - run0)
        waited += max(0, wait - wait0)
    return {"run_ns": ran, "wait_ns": waited}


def main(argv: list[str]) -> int:
    job = json.loads(argv[1])
    cpus = job.get("cpus")
    if cpus:
        os.sched_setaffinity(0, set(cpus))
    mode = job["mode"]
    global CLOCK
    # One BLAS thread (single): all the work is this thread's, its CPU time is exact.
    CLOCK = time.thread_time if mode == "single" else time.perf_counter
    if mode == "crowd":
        result = _crowd(job)
    elif mode in ("single", "blas"):
        before = schedstat()
        result = _single(job) if mode == "single" else _blas(job)
        result |= _waited(before, schedstat())
    else:
        print(f"unknown mode {mode!r}", file=sys.stderr)
        return 2
    usage = resource.getrusage(resource.RUSAGE_SELF)
    result["cpu_s"] = usage.ru_utime + usage.ru_stime
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
