"""Measuring this host's peaks: the probe children (cpu_peaks_probe), one core at a time or
several in lockstep, and the figures they add up to (`measure_peaks`, `measure_cores`). The
rules of what is measured and how are in cpu_peaks' docstring."""

from __future__ import annotations

import json
import logging
import math
import os
import select
import subprocess
import sys
import time
from collections.abc import Collection
from datetime import UTC, datetime
from typing import Any

from accelopt_mcp.backends.cpu_peaks_records import (
    RATE_FIELDS,
    BandwidthPoint,
    CorePeaks,
    CpuPeaks,
    HostLoad,
    Level,
    PeakMeasurementError,
    PeakSizes,
)
from accelopt_mcp.backends.host_facts import host_facts
from accelopt_mcp.backends.host_load import cpu_ticks, load_average, ticks_over
from accelopt_mcp.isolation.sandbox import THREAD_VARS

log = logging.getLogger(__name__)

PROBE_MODULE = "accelopt_mcp.backends.cpu_peaks_probe"
CHILD_TIMEOUT_S = 300.0
MAX_STREAMING_BYTES = 1 << 30
MIN_STREAMING_BYTES = 64 << 20
MIN_STREAM_PER_CORE = 8 << 20
"""Each core's share of the streaming working set is at least this (beyond its own caches)."""
MIN_CACHE_PER_CORE = 192 << 10
"""Each core's share of a cache level's working set is at least this, or four L1d's where
known: smaller, it would be held in L1 and read as the level's rate."""
MIN_PHASE_S = 0.02
"""The least time all the cores of a several-core measurement spend on each kernel together."""
START_LEAD_S = 0.005
"""How far ahead of now a phase's common start time is set (every child has read it by then)."""


# --------------------------------------------------------------------------- the probes


def _bytes_of(text: str) -> int | None:
    """'1.25 MiB' -> 1310720 (host_facts' cache sizes); None if unreadable."""
    number, _, unit = text.strip().partition(" ")
    scale = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}.get(unit.strip())
    try:
        return int(float(number) * scale) if scale else None
    except ValueError:
        return None


def bandwidth_levels(sizes: PeakSizes) -> list[tuple[int, Level, int | None]]:
    """(working set, level, what the level holds) for each bandwidth figure."""
    if sizes.working_sets is not None:
        explicit = sorted(sizes.working_sets)
        # Given sizes: each stands for a level twice its size; the last for memory.
        levels: list[tuple[int, Level, int | None]] = [
            (size, "L2", 2 * size) for size in explicit[:-1]
        ]
        return [*levels, (explicit[-1], "memory", None)]
    caches = {name: _bytes_of(text) for name, text in host_facts().caches.items()}
    l2, l3 = caches.get("L2"), caches.get("L3")
    levels = []
    if l2:
        levels.append((l2 // 2, "L2", l2))
    if l3:
        levels.append((l3 // 2, "L3", l3))
    streaming = min(MAX_STREAMING_BYTES, max(MIN_STREAMING_BYTES, 4 * (l3 or 0)))
    return [*levels, (streaming, "memory", None)]


def _child_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    for name in (*THREAD_VARS, "VECLIB_MAXIMUM_THREADS", "GOTO_NUM_THREADS"):
        env[name] = str(threads)
    env.pop("PYTHONPATH", None)
    return env


def _probe_argv(job: dict[str, Any]) -> list[str]:
    return [sys.executable, "-I", "-m", PROBE_MODULE, json.dumps(job)]


def _run_probe(job: dict[str, Any], threads: int) -> dict[str, Any]:
    try:
        done = subprocess.run(
            _probe_argv(job),
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT_S,
            env=_child_env(threads),
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        raise PeakMeasurementError(
            f"measuring the {job['mode']} peaks took over {CHILD_TIMEOUT_S:g} s"
        ) from exc
    return _parse(job["mode"], done.returncode, done.stdout, done.stderr)


def _parse(mode: str, code: int | None, stdout: str, stderr: str) -> dict[str, Any]:
    lines = stdout.strip().splitlines()
    if code != 0 or not lines:
        raise PeakMeasurementError(
            f"measuring the {mode} peaks failed (exit {code}): {stderr.strip()[-800:]}"
        )
    try:
        found = json.loads(lines[-1])
    except ValueError as exc:
        raise PeakMeasurementError(f"the {mode} peak probe printed {lines[-1][:200]!r}") from exc
    if not isinstance(found, dict):
        raise PeakMeasurementError(f"the {mode} peak probe printed {lines[-1][:200]!r}")
    return found


def _ready(child: subprocess.Popen[str]) -> None:
    """Wait for a crowd child's "ready" (PeakMeasurementError if it never comes: a child that
    hangs must not hold the host's measurement lock, and every evaluation waiting on the
    peaks, for ever)."""
    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout], [], [], CHILD_TIMEOUT_S)
    line = child.stdout.readline().strip() if ready else ""
    if line != "ready":
        child.kill()
        child.wait(timeout=CHILD_TIMEOUT_S)
        assert child.stderr is not None
        raise PeakMeasurementError(
            f"a several-core peak probe stopped ({line[:200]!r}): {child.stderr.read()[-800:]}"
        )


def _run_crowd(cpus: list[int], phases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One pinned child per core running `phases` in lockstep: each phase starts in every
    child at the same time.monotonic() instant, once all have prepared its arrays."""
    children: list[subprocess.Popen[str]] = []
    try:
        for core in cpus:
            children.append(
                subprocess.Popen(
                    _probe_argv({"mode": "crowd", "cpus": [core], "phases": phases}),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=_child_env(1),
                )
            )
        for _ in phases:
            for child in children:
                _ready(child)
            start = time.monotonic() + START_LEAD_S
            for child in children:
                assert child.stdin is not None
                child.stdin.write(f"go {start!r}\n")
                child.stdin.flush()
        results = []
        for child in children:
            out, err = child.communicate(timeout=CHILD_TIMEOUT_S)
            results.append(_parse("several-core", child.returncode, out, err))
        return results
    except subprocess.TimeoutExpired as exc:
        raise PeakMeasurementError("the several-core peak probes did not finish") from exc
    except OSError as exc:  # a child that died: its pipe is closed
        raise PeakMeasurementError(f"a several-core peak probe died: {exc}") from exc
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()


HELD_SHARE = 0.01
"""A sample during which its process waited for its core for more than this share of it was
held up (another program had the core); a shorter wait (a kernel thread) is noise."""


def crowd_total(per_child: list[list[list[float]]]) -> tuple[float, bool]:
    """What several cores reached together on one phase. Each child's samples are [start,
    end, rate, waited ns] (time.monotonic, shared by every process on the host).

    Only the stretch in which every child was sampling counts, from the last first start to
    the first last end, and in it only the samples of a child that overlap no sample in which
    another child was held up (HELD_SHARE): no core's figure is taken while another sat idle
    or was lent to another program, which would leave it more of the shared caches, memory
    bus and clock than when all work. The total is the sum of each child's best such sample;
    True when every child has one. A child without one adds what it did over the whole
    stretch (its work over the stretch's wall time: what a busy host let it do), and the
    result is marked not together (HostLoad.together), i.e. taken under load."""
    if not per_child or any(not samples for samples in per_child):
        return 0.0, False
    start = max(samples[0][0] for samples in per_child)
    end = min(samples[-1][1] for samples in per_child)
    if end <= start:
        return 0.0, False

    def held(sample: list[float]) -> bool:
        return sample[3] > HELD_SHARE * (sample[1] - sample[0]) * 1e9

    gaps = [[(s[0], s[1]) for s in samples if held(s)] for samples in per_child]
    total, together = 0.0, True
    for index, samples in enumerate(per_child):
        inside = [s for s in samples if s[0] >= start and s[1] <= end]
        others = [gap for other, found in enumerate(gaps) if other != index for gap in found]
        clean = [
            s[2]
            for s in inside
            if not held(s) and not any(b < s[1] and e > s[0] for b, e in others)
        ]
        if clean:
            total += max(clean)
        else:
            together = False
            total += math.fsum(s[2] * (s[1] - s[0]) for s in inside) / (end - start)
    return total, together


# --------------------------------------------------------------------------- measuring


def _all_cores_n(sizes: PeakSizes, cores: int) -> int:
    """A matmul side that keeps k cores busy in one BLAS call: the one-core side times the
    cube root of the core count (as much work per core), at most twice it."""
    return int(sizes.matmul_n * min(2.0, cores ** (1 / 3)))


def cores_for(count: int, cpus: Collection[int] | None) -> list[int]:
    """The cores to measure `count` cores' figures on: `cpus` when they are that many (an
    evaluation's own), else the last usable ones (the first usually takes more of the host's
    interrupts)."""
    if cpus is not None and len(cpus) == count:
        return sorted(cpus)
    return sorted(os.sched_getaffinity(0))[-count:]


def missing_core_counts(peaks: CpuPeaks, wanted: list[int]) -> list[int]:
    return [count for count in wanted if peaks.for_cores(count) is None]


def _shared_levels(sizes: PeakSizes, cores: int) -> list[tuple[int, Level, int | None]]:
    """Each bandwidth level as `cores` cores measure it: (each one's working set, level,
    what the level holds). The level's working set is shared out between them, each share at
    least MIN_CACHE_PER_CORE (four L1d's where known) in a cache level and MIN_STREAM_PER_CORE
    streaming; where those floors make the total larger than one core's cache, it is the
    cores' caches of that level together that hold it."""
    l1 = _bytes_of(host_facts().caches.get("L1d", ""))
    floor = max(MIN_CACHE_PER_CORE, 4 * l1) if l1 else MIN_CACHE_PER_CORE
    shared: list[tuple[int, Level, int | None]] = []
    for size, level, holds in bandwidth_levels(sizes):
        least = MIN_STREAM_PER_CORE if holds is None else floor
        each = max(size // cores, min(size, least))
        shared.append((each, level, None if holds is None else max(holds, each * cores)))
    return shared


def _measure_one(core: int, sizes: PeakSizes) -> CorePeaks:
    began = time.perf_counter()
    levels = bandwidth_levels(sizes)
    meter = LoadMeter()
    single = _run_probe(
        {
            "mode": "single",
            "cpus": [core],
            "min_repeats": sizes.min_repeats,
            "seconds": sizes.seconds,
            "vector_elements": list(sizes.vector_elements),
            "matmul_n": sizes.matmul_n,
            "working_sets": [size for size, _, _ in levels],
        },
        threads=1,
    )
    load = meter.reading([single])
    points = [
        BandwidthPoint(working_set_bytes=size, level=level, holds_bytes=holds, bytes_per_s=rate)
        for (size, level, holds), (_, rate) in zip(levels, single["bandwidth"], strict=True)
    ]
    return CorePeaks(
        cores=1,
        matmul_fp32_flops_per_s=single["matmul_fp32_flops_per_s"],
        matmul_fp64_flops_per_s=single["matmul_fp64_flops_per_s"],
        vector_fp32_flops_per_s=single["vector_fp32_flops_per_s"],
        vector_fp64_flops_per_s=single["vector_fp64_flops_per_s"],
        memory_bytes_per_s=points[-1].bytes_per_s,
        bandwidth=points,
        cpus=[core],
        measured_at=_now(),
        measure_seconds=time.perf_counter() - began,
        load=load,
    )


def _crowd_phases(
    sizes: PeakSizes, levels: list[tuple[int, Level, int | None]]
) -> list[tuple[str, dict[str, Any]]]:
    """(figure, phase) for each kernel the cores run together, in the single probe's order
    and with its share of time (never under MIN_PHASE_S)."""
    matmul_s = max(MIN_PHASE_S, sizes.seconds)
    vector_s = max(MIN_PHASE_S, sizes.seconds / 4)
    memory_s = max(MIN_PHASE_S, sizes.seconds / 2)
    phases: list[tuple[str, dict[str, Any]]] = []
    for dtype, short in (("float32", "fp32"), ("float64", "fp64")):
        phases.append(
            (
                f"matmul_{short}_flops_per_s",
                {"kind": "matmul", "dtype": dtype, "n": sizes.matmul_n, "seconds": matmul_s},
            )
        )
    for dtype, short in (("float32", "fp32"), ("float64", "fp64")):
        for elements in sizes.vector_elements:
            for kind in ("fma", "dot"):
                phases.append(
                    (
                        f"vector_{short}_flops_per_s",
                        {"kind": kind, "dtype": dtype, "elements": elements, "seconds": vector_s},
                    )
                )
    for index, (each, _, _) in enumerate(levels):
        for kind in ("copy", "read"):
            phases.append(
                (f"level_{index}", {"kind": kind, "working_set": each, "seconds": memory_s})
            )
    return phases


def _measure_several(cpus: list[int], sizes: PeakSizes) -> CorePeaks:
    """`len(cpus)` cores' figures: one pinned process per core running every kernel at once,
    and the matmuls in one process with the BLAS on every core (crowd_total, by_method)."""
    count = len(cpus)
    began = time.perf_counter()
    levels = _shared_levels(sizes, count)
    phases = _crowd_phases(sizes, levels)
    meter = LoadMeter()
    blas = _run_probe(
        {
            "mode": "blas",
            "cpus": cpus,
            "min_repeats": sizes.min_repeats,
            "seconds": sizes.seconds,
            "matmul_n": _all_cores_n(sizes, count),
        },
        threads=count,
    )
    crowd = _run_crowd(cpus, [phase for _, phase in phases])
    figures: dict[str, float] = {}
    together = True
    for index, (figure, _) in enumerate(phases):
        total, complete = crowd_total([child["phases"][index] for child in crowd])
        together = together and complete
        figures[figure] = max(figures.get(figure, 0.0), total)
    load = meter.reading([blas, *crowd], together=together)
    matmuls = ("matmul_fp32_flops_per_s", "matmul_fp64_flops_per_s")
    rates = {name: figures[name] for name in RATE_FIELDS[:4]}
    for name in matmuls:
        rates[name] = max(figures[name], float(blas[name]))
    zero = [name for name, rate in rates.items() if rate <= 0] + [
        f"bandwidth of {level}"
        for index, (_, level, _) in enumerate(levels)
        if figures[f"level_{index}"] <= 0
    ]
    if zero:
        raise PeakMeasurementError(
            f"the {count}-core probes never worked at once on {', '.join(zero)} (the host is "
            "too busy to measure several cores' peaks)"
        )
    points = [
        BandwidthPoint(
            working_set_bytes=each * count,
            level=level,
            holds_bytes=holds,
            bytes_per_s=figures[f"level_{index}"],
        )
        for index, (each, level, holds) in enumerate(levels)
    ]
    return CorePeaks(
        cores=count,
        matmul_fp32_flops_per_s=rates["matmul_fp32_flops_per_s"],
        matmul_fp64_flops_per_s=rates["matmul_fp64_flops_per_s"],
        vector_fp32_flops_per_s=rates["vector_fp32_flops_per_s"],
        vector_fp64_flops_per_s=rates["vector_fp64_flops_per_s"],
        memory_bytes_per_s=points[-1].bytes_per_s,
        bandwidth=points,
        cpus=cpus,
        by_method={
            "processes": {name: figures[name] for name in matmuls},
            "blas": {name: float(blas[name]) for name in matmuls},
        },
        measured_at=_now(),
        measure_seconds=time.perf_counter() - began,
        load=load,
    )


def measure_cores(cpus: list[int], sizes: PeakSizes | None = None) -> CorePeaks:
    """The figures of `cpus` (one core, or several working at once), measured now."""
    sizes = sizes or PeakSizes()
    if not cpus:
        raise ValueError("no cores to measure on")
    return _measure_one(cpus[0], sizes) if len(cpus) == 1 else _measure_several(cpus, sizes)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def measure_peaks(
    hardware: str,
    sizes: PeakSizes | None = None,
    *,
    counts: Collection[int] = (),
    cpus: Collection[int] | None = None,
) -> CpuPeaks:
    """Measure this host's peaks now (seconds with the default sizes); nothing is kept. One
    core's figures, every usable core's with `sizes.all_cores`, and those of each of `counts`
    cores (on `cpus` when they are that many, else on the last usable cores)."""
    sizes = sizes or PeakSizes()
    began = time.perf_counter()
    usable = sorted(os.sched_getaffinity(0))
    wanted = {1, *(max(1, min(count, len(usable))) for count in counts)}
    if sizes.all_cores:
        wanted.add(len(usable))
    entries = [measure_cores(cores_for(count, cpus), sizes) for count in sorted(wanted)]
    facts = host_facts()
    return CpuPeaks(
        hardware=hardware,
        by_cores=entries,
        measured_at=entries[-1].measured_at,
        measure_seconds=time.perf_counter() - began,
        numpy=facts.numpy,
        blas=facts.blas,
        sizes=sizes,
    )


class LoadMeter:
    """How busy the host was from its creation to `reading`: HostLoad's shares."""

    def __init__(self) -> None:
        self.usable = os.sched_getaffinity(0)
        self.load_average = load_average()
        self.ticks = cpu_ticks()
        self.own = time.thread_time()

    def reading(self, children: list[dict[str, Any]], *, together: bool = True) -> HostLoad:
        ours = math.fsum(float(c.get("cpu_s", 0.0)) for c in children)
        ours += time.thread_time() - self.own
        ran = sum(int(c.get("run_ns", 0)) for c in children)
        waited = sum(int(c.get("wait_ns", 0)) for c in children)
        over = ticks_over(self.ticks, cpu_ticks(), self.usable)
        others = steal = 0.0
        if over is not None:
            busy, stolen, total = over
            others = min(1.0, max(0.0, (busy - stolen - ours) / total))
            steal = min(1.0, max(0.0, stolen / total))
        return HostLoad(
            load_average=self.load_average,
            others_share=others,
            wait_share=waited / (ran + waited) if ran + waited > 0 else 0.0,
            steal_share=steal,
            together=together,
        )
