"""This host's peak rates, measured once per hardware id and kept: what a `cpu` evaluation's
percent of peak is taken against.

`measure_peaks` runs cpu_peaks_probe in child processes (the caller's BLAS threads and CPU
affinity are never touched):

- one core (pinned, BLAS and OpenMP limited to one thread): fp32 and fp64 matmul through
  NumPy's BLAS, the elementwise figure (the best of a ufunc multiply-add and a dot product over
  arrays in cache, fp32 and fp64) and memory bandwidth (the best of a copy and a read) at one
  working set per cache level: half of L2, half of L3, and a streaming size well beyond L3;
- every usable core: the same matmuls with the BLAS on all of them, and the elementwise and
  streaming figures of one pinned child per core run at the same moment, added up.

Each figure is the best of several samples. With the default sizes it takes a few seconds
(`accelopt backends` prints how long); `PeakSizes.tiny()` takes a fraction of one, for tests.

`PeakSource.peaks` finds the figures for a hardware id: this process's memory, then the
kernel store when one is given (`put_hardware_peaks` / `get_hardware_peaks`: one record per
hardware id, shared by every host with the same CPU model), then a small JSON file next to the
default database, and measures only when none has usable figures (same sizes, same NumPy and
BLAS). The file is for the processes that have no store at hand (a profile with --no-store,
the engine's pooled backends, the MCP tools with store=false): without it each such process
would measure again, taking seconds and disturbing any evaluation running beside it. A lock
file lets one process on the host measure while the others wait for its figures.

The memory figure a kernel is held against depends on its working set (`bandwidth_at`): data
that fits in a cache streams at that cache's rate, and holding an L2-sized kernel to DRAM
bandwidth would call it above peak when it is only in cache.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from accelopt_mcp.backends.host_facts import host_facts
from accelopt_mcp.backends.roofline import ComputeUnit, HardwarePeak
from accelopt_mcp.isolation.sandbox import THREAD_VARS

log = logging.getLogger(__name__)

PEAKS_FORMAT = 1
"""Bumped when what is measured changes; a record of another format is measured again."""
PROBE_MODULE = "accelopt_mcp.backends.cpu_peaks_probe"
PEAKS_FILE_NAME = "hardware_peaks.json"
CHILD_TIMEOUT_S = 300.0
MAX_STREAMING_BYTES = 1 << 30
MIN_STREAMING_BYTES = 64 << 20

Level = Literal["L1d", "L2", "L3", "memory"]


class PeakMeasurementError(RuntimeError):
    """A measuring child failed (it says why)."""


class PeakSizes(BaseModel):
    """How big and how long the measurements are. The defaults give meaningful figures in a
    few seconds; `tiny()` gives rough ones in a fraction of a second (tests)."""

    model_config = ConfigDict(frozen=True)

    matmul_n: int = Field(default=1024, ge=8)
    """Side of the square matmul timed on one core (all cores: up to twice as long a side)."""
    vector_elements: tuple[int, ...] = (4096, 16384, 65536)
    """Array lengths of the elementwise figure (kept in cache); the best one counts."""
    working_sets: tuple[int, ...] | None = None
    """Working sets of the bandwidth figures, in bytes, ascending; the last is the streaming
    figure. None: half of L2, half of L3 and max(64 MiB, 4 x L3) from this host's caches."""
    min_repeats: int = Field(default=3, ge=1)
    seconds: float = Field(default=0.2, gt=0)
    """Least time spent on each matmul figure (less on the others)."""
    all_cores: bool = True
    """Measure the every-core figures too (they take about a third of the time). False: the
    every-core record is the one-core one (cores=1); for_cores scales it."""

    @classmethod
    def tiny(cls, *, all_cores: bool = True) -> PeakSizes:
        """Rough figures in well under a second (tests); `all_cores=False` leaves out the
        every-core figures (one child process instead of one per core and one more)."""
        return cls(
            matmul_n=64,
            vector_elements=(16384,),
            working_sets=(256 << 10, 4 << 20),
            min_repeats=2,
            seconds=0.01,
            all_cores=all_cores,
        )


class BandwidthPoint(BaseModel):
    working_set_bytes: int = Field(gt=0)
    """The working set it was measured with (bytes read plus bytes written)."""
    level: Level
    """Where a working set of this size lives: the cache that holds it, or memory."""
    holds_bytes: int | None = None
    """How much that level holds (None: memory, no limit)."""
    bytes_per_s: float = Field(gt=0)


class CorePeaks(BaseModel):
    """The peak rates of `cores` cores, FLOP/s and bytes/s."""

    cores: int = Field(ge=1)
    matmul_fp32_flops_per_s: float = Field(gt=0)
    matmul_fp64_flops_per_s: float = Field(gt=0)
    vector_fp32_flops_per_s: float = Field(gt=0)
    vector_fp64_flops_per_s: float = Field(gt=0)
    memory_bytes_per_s: float = Field(gt=0)
    """Streaming bandwidth: a working set far larger than the last cache."""
    bandwidth: list[BandwidthPoint] = Field(default_factory=list)
    """Bandwidth by working set, smallest first (one core: one point per cache level)."""

    def flops_per_s(self, unit: ComputeUnit) -> float:
        """The compute peak for a roofline's unit. Tasks are fp32 or narrower; NumPy has no
        bf16 matmul, so a bf16 task is bounded by the fp32 figure."""
        if unit == "vector":
            return self.vector_fp32_flops_per_s
        return self.matmul_fp32_flops_per_s

    def bandwidth_at(self, working_set: float) -> tuple[float, BandwidthPoint | None]:
        """The memory peak for a kernel whose data is `working_set` bytes: the fastest level
        that can hold it (its cache or a slower one; the streaming figure when none was
        measured), and the point it comes from."""
        fitting = [
            p for p in self.bandwidth if p.holds_bytes is None or working_set <= p.holds_bytes
        ]
        if not fitting:
            return self.memory_bytes_per_s, None
        best = max(fitting, key=lambda p: p.bytes_per_s)
        return max(best.bytes_per_s, self.memory_bytes_per_s), best


class CpuPeaks(BaseModel):
    """One host's measured peaks (a store's hardware-peaks record holds `model_dump`)."""

    format: int = PEAKS_FORMAT
    hardware: str
    one_core: CorePeaks
    """One pinned core, one BLAS thread: what a pooled (pinned) evaluation can reach."""
    all_cores: CorePeaks
    """Every core this process may use."""
    measured_at: str
    measure_seconds: float
    """How long measuring took."""
    numpy: str
    blas: str | None = None
    sizes: PeakSizes

    def for_cores(self, cores: int) -> CorePeaks:
        """The peaks of an evaluation on `cores` cores: one core's or every core's, and in
        between the one-core figures times `cores`, capped by every core's."""
        one, every = self.one_core, self.all_cores
        if cores <= 1:
            return one
        if cores == every.cores:
            # Every core streams from memory together; a working set in cache is one core's
            # (NumPy's elementwise loops run on one thread).
            curve = every.bandwidth or _streaming(one.bandwidth, every.memory_bytes_per_s)
            return every.model_copy(update={"bandwidth": curve})
        scale = float(cores)

        def bound(name: str) -> float:
            single = float(getattr(one, name)) * scale
            return min(single, float(getattr(every, name))) if cores < every.cores else single

        return CorePeaks(
            cores=cores,
            matmul_fp32_flops_per_s=bound("matmul_fp32_flops_per_s"),
            matmul_fp64_flops_per_s=bound("matmul_fp64_flops_per_s"),
            vector_fp32_flops_per_s=bound("vector_fp32_flops_per_s"),
            vector_fp64_flops_per_s=bound("vector_fp64_flops_per_s"),
            memory_bytes_per_s=max(one.memory_bytes_per_s, every.memory_bytes_per_s),
            bandwidth=_streaming(one.bandwidth, every.memory_bytes_per_s),
        )

    def hardware_peak(self, cores: int, working_set: float) -> HardwarePeak:
        """These figures as roofline.HardwarePeak, for a kernel on `cores` cores whose data is
        `working_set` bytes (the memory peak is that of the level holding it)."""
        peaks = self.for_cores(cores)
        memory, _ = peaks.bandwidth_at(working_set)
        return HardwarePeak(
            name=f"{self.hardware} ({cores} core{'s' if cores > 1 else ''}, measured)",
            memory_bytes_per_s=memory,
            matmul_fp32_flops_per_s=peaks.matmul_fp32_flops_per_s,
            matmul_bf16_flops_per_s=peaks.matmul_fp32_flops_per_s,
            vector_flops_per_s=peaks.vector_fp32_flops_per_s,
            source=f"measured on this host at {self.measured_at}",
        )


def _streaming(curve: list[BandwidthPoint], memory: float) -> list[BandwidthPoint]:
    """One core's bandwidth curve with its streaming point raised to `memory` (several
    cores stream from memory together)."""
    return [
        p.model_copy(update={"bytes_per_s": max(p.bytes_per_s, memory)})
        if p.holds_bytes is None
        else p
        for p in curve
    ]


# --------------------------------------------------------------------------- where they live


class StoredPeaks(Protocol):
    """What a store returns for a hardware id (store.base.HardwarePeaksRecord)."""

    @property
    def peaks(self) -> Mapping[str, Any]: ...


class PeakStore(Protocol):
    """The part of a KernelStore that keeps hardware peaks (backends know nothing of the
    store; any KernelStore fits)."""

    def put_hardware_peaks(self, hardware: str, peaks: dict[str, Any]) -> None: ...

    def get_hardware_peaks(self, hardware: str) -> StoredPeaks | None: ...


def data_dir() -> Path:
    """The per-user data directory, the one the default SQLite store lives in
    (store.url.default_sqlite_path; backends may not import the store)."""
    home = os.environ.get("ACCELOPT_HOME")
    if home:
        return Path(home).expanduser()
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "accelopt"


def default_peaks_file() -> Path:
    return data_dir() / PEAKS_FILE_NAME


_lock = threading.Lock()
_memory: dict[tuple[str, PeakSizes], CpuPeaks] = {}


def forget_peaks() -> None:
    """Drop this process's copies (the store and the file keep theirs)."""
    with _lock:
        _memory.clear()


class PeakSource:
    """Where a backend gets a host's peaks: memory, the store, the file, else a measurement.

    store: a KernelStore (or anything with its two peak methods); None: none at hand.
    sizes: what to measure with (and which records count: only those measured with the same).
    peaks_file: the JSON cache; None: no file (default: `default_peaks_file()`, read when
    asked so ACCELOPT_HOME set later is honoured)."""

    def __init__(
        self,
        store: PeakStore | None = None,
        *,
        sizes: PeakSizes | None = None,
        peaks_file: Path | Literal["default"] | None = "default",
    ) -> None:
        self.store = store
        self.sizes = sizes or PeakSizes()
        self._peaks_file = peaks_file

    @property
    def peaks_file(self) -> Path | None:
        return default_peaks_file() if self._peaks_file == "default" else self._peaks_file

    def known(self, hardware: str) -> CpuPeaks | None:
        """The figures if they are kept anywhere; never measures."""
        with _lock:
            return self._kept(hardware)

    def peaks(self, hardware: str, *, remeasure: bool = False) -> CpuPeaks:
        """The figures for `hardware` (this host's cpu backend hardware string), measured
        here if nothing usable is kept (or `remeasure`). PeakMeasurementError when measuring
        fails."""
        with _lock:
            if not remeasure:
                found = self._kept(hardware)
                if found is not None:
                    return found
            with self._host_lock():
                # Another process may have measured while this one waited for the lock.
                found = None if remeasure else self._kept(hardware, memory=False)
                if found is None:
                    found = measure_peaks(hardware, self.sizes)
                    self._keep(found, in_store=True, in_file=True)
            _memory[(hardware, self.sizes)] = found
            return found

    # ------------------------------------------------------------------ internals

    def _kept(self, hardware: str, *, memory: bool = True) -> CpuPeaks | None:
        key = (hardware, self.sizes)
        if memory and key in _memory:
            return _memory[key]
        found = self._from_store(hardware)
        if found is not None:
            self._keep(found, in_store=False, in_file=True)
        else:
            found = self._from_file(hardware)
            if found is not None:
                self._keep(found, in_store=True, in_file=False)
        if found is not None:
            _memory[key] = found
        return found

    def _usable(self, data: Mapping[str, Any] | None, hardware: str) -> CpuPeaks | None:
        if not data:
            return None
        try:
            found = CpuPeaks.model_validate(dict(data))
        except ValidationError:
            return None
        facts = host_facts()
        if (
            found.format != PEAKS_FORMAT
            or found.hardware != hardware
            or found.sizes != self.sizes
            or found.numpy != facts.numpy
            or found.blas != facts.blas
            # The same CPU model on a host with other cores (a shared store): not these peaks.
            or (found.sizes.all_cores and found.all_cores.cores != len(os.sched_getaffinity(0)))
        ):
            return None
        return found

    def _from_store(self, hardware: str) -> CpuPeaks | None:
        if self.store is None:
            return None
        try:
            record = self.store.get_hardware_peaks(hardware)
        except Exception as exc:  # a store that cannot answer must not fail a profile
            log.warning("could not read hardware peaks from the store: %s", exc)
            return None
        return self._usable(record.peaks if record is not None else None, hardware)

    def _from_file(self, hardware: str) -> CpuPeaks | None:
        path = self.peaks_file
        if path is None:
            return None
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        entry = data.get(hardware) if isinstance(data, dict) else None
        return self._usable(entry if isinstance(entry, dict) else None, hardware)

    def _keep(self, peaks: CpuPeaks, *, in_store: bool, in_file: bool) -> None:
        dumped = peaks.model_dump(mode="json")
        if in_store and self.store is not None:
            try:
                self.store.put_hardware_peaks(peaks.hardware, dumped)
            except Exception as exc:  # kept elsewhere all the same
                log.warning("could not store hardware peaks: %s", exc)
        path = self.peaks_file
        if in_file and path is not None:
            try:
                _write_entry(path, peaks.hardware, dumped)
            except OSError as exc:
                log.warning("could not write %s: %s", path, exc)

    @contextlib.contextmanager
    def _host_lock(self) -> Iterator[None]:
        """One measurement at a time on this host (those sharing the peaks file)."""
        path = self.peaks_file
        if path is None:
            yield
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handle = open(path.with_name(path.name + ".lock"), "a")  # noqa: SIM115
        except OSError:
            yield
            return
        with handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _write_entry(path: Path, hardware: str, entry: dict[str, Any]) -> None:
    """Replace one hardware id's entry, atomically (a reader sees the old file or the new)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    data[hardware] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(data, out, indent=1, sort_keys=True)
        os.replace(name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise


# --------------------------------------------------------------------------- measuring


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


def _run_streams(cores: list[int], job: dict[str, Any]) -> list[dict[str, Any]]:
    """One pinned child per core, started together once every one has loaded NumPy."""
    children: list[subprocess.Popen[str]] = []
    try:
        for core in cores:
            children.append(
                subprocess.Popen(
                    _probe_argv({**job, "cpus": [core]}),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=_child_env(1),
                )
            )
        for child in children:
            assert child.stdout is not None
            # A child that never says "ready" must not hold the host's measurement lock (and
            # every evaluation waiting on the peaks) for ever.
            ready, _, _ = select.select([child.stdout], [], [], CHILD_TIMEOUT_S)
            if not ready or child.stdout.readline().strip() != "ready":
                child.kill()
                child.wait(timeout=CHILD_TIMEOUT_S)
                assert child.stderr is not None
                raise PeakMeasurementError(
                    f"a streaming peak probe did not start: {child.stderr.read()[-800:]}"
                )
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        results = []
        for child in children:
            out, err = child.communicate(timeout=CHILD_TIMEOUT_S)
            results.append(_parse("streaming", child.returncode, out, err))
        return results
    except subprocess.TimeoutExpired as exc:
        raise PeakMeasurementError("the streaming peak probes did not finish") from exc
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()


def _all_cores_n(sizes: PeakSizes, cores: int) -> int:
    """A matmul side that keeps every core busy: the one-core side times the cube root of
    the core count (as much work per core), at most twice it."""
    return int(sizes.matmul_n * min(2.0, cores ** (1 / 3)))


def measure_peaks(hardware: str, sizes: PeakSizes | None = None) -> CpuPeaks:
    """Measure this host's peaks now (seconds with the default sizes); nothing is kept."""
    sizes = sizes or PeakSizes()
    began = time.perf_counter()
    cores = sorted(os.sched_getaffinity(0))
    levels = bandwidth_levels(sizes)
    base = {
        "min_repeats": sizes.min_repeats,
        "seconds": sizes.seconds,
        "vector_elements": list(sizes.vector_elements),
    }
    # The last usable core: the first usually takes more of the host's interrupts.
    single = _run_probe(
        {
            **base,
            "mode": "single",
            "cpus": [cores[-1]],
            "matmul_n": sizes.matmul_n,
            "working_sets": [size for size, _, _ in levels],
        },
        threads=1,
    )
    points = [
        BandwidthPoint(working_set_bytes=size, level=level, holds_bytes=holds, bytes_per_s=rate)
        for (size, level, holds), (_, rate) in zip(levels, single["bandwidth"], strict=True)
    ]
    one_core = CorePeaks(
        cores=1,
        matmul_fp32_flops_per_s=single["matmul_fp32_flops_per_s"],
        matmul_fp64_flops_per_s=single["matmul_fp64_flops_per_s"],
        vector_fp32_flops_per_s=single["vector_fp32_flops_per_s"],
        vector_fp64_flops_per_s=single["vector_fp64_flops_per_s"],
        memory_bytes_per_s=points[-1].bytes_per_s,
        bandwidth=points,
    )
    all_cores = one_core
    if len(cores) > 1 and sizes.all_cores:
        blas = _run_probe(
            {**base, "mode": "blas", "cpus": cores, "matmul_n": _all_cores_n(sizes, len(cores))},
            threads=len(cores),
        )
        streaming = levels[-1][0]
        streams = _run_streams(
            cores,
            {
                **base,
                "mode": "stream",
                "window": sizes.seconds,
                # Together far beyond the last cache, however many cores share it.
                "working_set": max(streaming // len(cores), min(streaming, 8 << 20)),
            },
        )

        def total(name: str) -> float:
            return math.fsum(float(s[name]) for s in streams)

        all_cores = CorePeaks(
            cores=len(cores),
            matmul_fp32_flops_per_s=max(
                blas["matmul_fp32_flops_per_s"], one_core.matmul_fp32_flops_per_s
            ),
            matmul_fp64_flops_per_s=max(
                blas["matmul_fp64_flops_per_s"], one_core.matmul_fp64_flops_per_s
            ),
            vector_fp32_flops_per_s=max(
                total("vector_fp32_flops_per_s"), one_core.vector_fp32_flops_per_s
            ),
            vector_fp64_flops_per_s=max(
                total("vector_fp64_flops_per_s"), one_core.vector_fp64_flops_per_s
            ),
            memory_bytes_per_s=max(total("memory_bytes_per_s"), one_core.memory_bytes_per_s),
        )
    facts = host_facts()
    return CpuPeaks(
        hardware=hardware,
        one_core=one_core,
        all_cores=all_cores,
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        measure_seconds=time.perf_counter() - began,
        numpy=facts.numpy,
        blas=facts.blas,
        sizes=sizes,
    )
