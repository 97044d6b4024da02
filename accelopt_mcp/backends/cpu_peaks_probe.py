"""The measuring half of cpu_peaks: NumPy loops that find this host's peak rates, run in a
child process (`python -I -m accelopt_mcp.backends.cpu_peaks_probe JOB`) so that the caller's
BLAS thread pool and CPU affinity stay as they are.

The child pins itself to the cores it is given and is started with the BLAS thread counts
already in its environment (OpenBLAS and MKL read them when NumPy is imported, so NumPy is
imported only after pinning). It prints one JSON object on its last line of stdout.

Modes (JOB is a JSON object with "mode" and the sizes):
- "single": one core, one BLAS thread: matmul (fp32, fp64), the elementwise figure (fp32,
  fp64) and memory bandwidth at each working-set size;
- "blas": every core given, the BLAS with as many threads: matmul (fp32, fp64);
- "stream": one of several pinned children started together: prints "ready", waits for a line
  on stdin, then measures the elementwise figures and the streaming bandwidth over fixed
  windows of time, so that all children run each measurement at once and their rates add up.

Every figure is the best of several timed samples: a peak is a maximum, and what slows a sample
down (an interrupt, another process) only ever lowers it. Where one thread does all the work
(single, stream), samples are timed by that thread's CPU time, so time spent descheduled on a
busy host does not count; the every-core BLAS figure is timed by the wall clock and is only as
good as the host is quiet.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any

SAMPLE_SECONDS = 2e-3
"""A sample of a short call repeats it until the sample lasts about this long: the timer's
resolution and the loop's own cost stay negligible."""
MAX_INNER = 100_000


CLOCK: Callable[[], float] = time.perf_counter
"""What samples are timed with: wall-clock time, or (single-threaded modes) this thread's CPU
time, which leaves out the time the thread was not running: another process on the core (a
busy host) lowers no figure."""


def best_seconds(
    call: Callable[[], object], *, min_repeats: int, seconds: float, until: float | None = None
) -> float:
    """The shortest time of one call (by CLOCK) over samples taken for at least `min_repeats`
    samples and `seconds` of wall-clock time (or until the perf_counter time `until`), after
    one warm-up call."""
    clock = CLOCK
    call()
    began = clock()
    call()
    single = clock() - began
    inner = max(1, min(MAX_INNER, math.ceil(SAMPLE_SECONDS / max(single, 1e-9))))
    best = math.inf
    count = 0
    start = time.perf_counter()
    end = until if until is not None else start + seconds
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
    until: float | None = None,
) -> float:
    """The best elementwise rate over arrays of each size (kept in cache): a multiply-add
    through ufuncs (a * b + c, two FLOPs an element, in place) and a dot product (two FLOPs an
    element, the BLAS's fused multiply-add loop). The dot product is what a reduction such as
    einsum or a norm can reach; the ufunc pair what elementwise arithmetic can."""
    import numpy as np

    rng = np.random.default_rng(0)
    best = 0.0
    forms = 2 * len(elements)
    for size in elements:
        a, b, c = (rng.standard_normal(size).astype(dtype) for _ in range(3))
        for call in _vector_forms(a, b, c):
            # In a window (stream mode) every form gets its share of what is left of it.
            share = None
            if until is not None:
                share = time.perf_counter() + max(0.0, until - time.perf_counter()) / forms
            forms -= 1
            spent = best_seconds(call, min_repeats=min_repeats, seconds=seconds, until=share)
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


def bandwidth_bytes_per_s(
    working_set: int, *, min_repeats: int, seconds: float, until: float | None = None
) -> float:
    """The best of a copy (read and write half the working set each: np.copyto, the C
    library's memcpy) and a read (sum over the whole working set), in bytes moved per second,
    counted as a roofline counts them: bytes read plus bytes written."""
    import numpy as np

    half = max(1, working_set // 16)  # float64 elements in half the working set
    source = np.ones(half, dtype=np.float64)
    target = np.empty(half, dtype=np.float64)
    whole = np.ones(2 * half, dtype=np.float64)

    def copy() -> None:
        np.copyto(target, source)

    def read() -> None:
        np.add.reduce(whole)

    middle = None
    if until is not None:
        middle = time.perf_counter() + max(0.0, until - time.perf_counter()) / 2
    copied = best_seconds(copy, min_repeats=min_repeats, seconds=seconds, until=middle)
    was_read = best_seconds(read, min_repeats=min_repeats, seconds=seconds, until=until)
    moved = 16.0 * half
    return max(moved / copied, moved / was_read)


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


def _stream(job: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    np.ones(1)  # NumPy loaded before the start signal
    print("ready", flush=True)
    sys.stdin.readline()
    window = float(job["window"])
    elements = [int(e) for e in job["vector_elements"]]
    start = time.perf_counter()
    found: dict[str, Any] = {}
    for index, dtype in enumerate(("float32", "float64")):
        found[f"vector_{dtype.replace('float', 'fp')}_flops_per_s"] = vector_flops_per_s(
            elements, dtype, min_repeats=1, seconds=0.0, until=start + (index + 1) * window
        )
    found["memory_bytes_per_s"] = bandwidth_bytes_per_s(
        int(job["working_set"]), min_repeats=1, seconds=0.0, until=start + 3 * window
    )
    return found


def main(argv: list[str]) -> int:
    job = json.loads(argv[1])
    cpus = job.get("cpus")
    if cpus:
        os.sched_setaffinity(0, set(cpus))
    mode = job["mode"]
    global CLOCK
    # One BLAS thread (single, stream): all the work is this thread's, its CPU time is exact.
    CLOCK = time.perf_counter if mode == "blas" else time.thread_time
    if mode == "single":
        result = _single(job)
    elif mode == "blas":
        result = _blas(job)
    elif mode == "stream":
        result = _stream(job)
    else:
        print(f"unknown mode {mode!r}", file=sys.stderr)
        return 2
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
