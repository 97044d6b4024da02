"""This host's peak rates, measured per core count and kept: what a `cpu` evaluation's percent
of peak is taken against (the figures for as many cores as it ran on).

`measure_peaks` runs cpu_peaks_probe in child processes (the caller's BLAS threads and CPU
affinity are never touched). Every figure for a number of cores comes from that many cores
working at once; none is another count's figure relabelled or scaled:

- one core (pinned, BLAS and OpenMP limited to one thread): fp32 and fp64 matmul through
  NumPy's BLAS, the elementwise figure (the best of a ufunc multiply-add and a dot product over
  arrays in cache, fp32 and fp64) and memory bandwidth (the best of a copy and a read) at one
  working set per cache level: half of L2, half of L3, and a streaming size well beyond L3;
- k cores (every usable one up front with `PeakSizes.all_cores`; any other count the first
  time an evaluation on that many cores needs it, on that evaluation's cores): one pinned
  child per core, one BLAS thread each, all running the same kernels in lockstep (the same
  matmuls, elementwise forms, copies and reads, the total working set of each cache level
  shared out between them), their rates added up over the stretch in which every one of them
  was working (`crowd_total`); and the matmuls once more in one child with the BLAS on all k
  cores. The matmul figure is the higher of the two (`CorePeaks.by_method` keeps both): small
  GEMMs in k processes can beat one k-thread GEMM, and the other way round.

Each figure is the best of several samples. With the default sizes it takes a few seconds
(`accelopt backends` prints how long); `PeakSizes.tiny()` takes a fraction of one, for tests.
Every set of figures records the cores it was measured on, when, and how busy the host was
(`HostLoad`); a set taken under load is measured again when next needed on a quieter host, and
the best of the measurements is kept (PeakSource.peaks).

`PeakSource.peaks` finds the figures for a hardware id: this process's memory, then the
kernel store when one is given (`put_hardware_peaks` / `get_hardware_peaks`: one record per
hardware id, shared by every host with the same CPU model), then a small JSON file next to the
default database, and measures only what none of them has (same sizes, same NumPy and BLAS).
The file is for the processes that have no store at hand (a profile with --no-store, the
engine's pooled backends, the MCP tools with store=false): without it each such process would
measure again, taking seconds and disturbing any evaluation running beside it. A lock file lets
one process on the host measure while the others wait for its figures.

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
from collections.abc import Collection, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from accelopt_mcp.backends.host_facts import host_facts
from accelopt_mcp.backends.roofline import (
    ComputeUnit,
    HardwarePeak,
    compute_peak_name,
    memory_peak_name,
    percent_counters,
    percent_of_peak,
)
from accelopt_mcp.isolation.sandbox import THREAD_VARS
from accelopt_mcp.models import Roofline

log = logging.getLogger(__name__)

PEAKS_FORMAT = 2
"""Bumped when what is measured changes; a record of another format is measured again. 2: a
set of figures per core count, each measured with that many cores working, with its load."""
PROBE_MODULE = "accelopt_mcp.backends.cpu_peaks_probe"
PEAKS_FILE_NAME = "hardware_peaks.json"
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
BUSY_SHARE = 0.05
"""Figures are taken under load when more than this share of the time went to other programs
(the share cpu_session's timing calls a busy host, CONTENDED_SHARE)."""
RETRY_AFTER_S = 600.0
"""A set of figures taken under load is measured again once it is this old (and the host is
quieter); a measurement that is under load again waits as long once more."""
CHECK_EVERY_S = 60.0
"""How often one process looks (QUIET_WINDOW_S of /proc/stat) whether the host has become
quiet enough to measure a set taken under load again."""
QUIET_WINDOW_S = 0.25

Level = Literal["L1d", "L2", "L3", "memory"]


class PeakMeasurementError(RuntimeError):
    """A measuring child failed (it says why)."""


class PeakSizes(BaseModel):
    """How big and how long the measurements are. The defaults give meaningful figures in a
    few seconds; `tiny()` gives rough ones in a fraction of a second (tests)."""

    model_config = ConfigDict(frozen=True)

    matmul_n: int = Field(default=1024, ge=8)
    """Side of the square matmul each core times (the BLAS on k threads: up to twice it)."""
    vector_elements: tuple[int, ...] = (4096, 16384, 65536)
    """Array lengths of the elementwise figure (kept in cache); the best one counts."""
    working_sets: tuple[int, ...] | None = None
    """Working sets of the bandwidth figures, in bytes, ascending; the last is the streaming
    figure. None: half of L2, half of L3 and max(64 MiB, 4 x L3) from this host's caches."""
    min_repeats: int = Field(default=3, ge=1)
    seconds: float = Field(default=0.2, gt=0)
    """Least time spent on each matmul figure (less on the others)."""
    all_cores: bool = True
    """Measure every usable core's figures with the one-core ones (they take about a third
    of the time). False: only one core's up front; the figures of any other core count are
    measured when an evaluation on that many cores first needs them."""

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


class HostLoad(BaseModel):
    """How busy the host was while one set of figures was measured.

    A measured peak is a lower bound: whatever else runs on the host (another program on the
    measuring core, or on the others, sharing their caches and memory bus; a hypervisor
    stealing time) can only lower it. So figures measured on a busy host are kept (they are
    still lower bounds, and better than none) but marked: `busy`. They are measured again the
    next time they are needed once the host is quieter than it was (PeakSource.peaks), and the
    higher of the two figures is kept, figure by figure (CorePeaks.best_of): the best of
    several lower bounds is a lower bound too, and the closest one.

    The shares come from the kernel's own accounting (Linux; 0.0 where it cannot be read):
    /proc/stat's busy time on every usable core over the measurement, less the CPU time the
    measuring processes used themselves (others_share); the time the measuring processes were
    runnable but waited for their core (wait_share, from schedstat: another program had it);
    and the hypervisor's steal time (steal_share). /proc/stat counts in clock ticks (1/100 s),
    so over a tiny measurement (tests) others_share is good to a few percent only."""

    load_average: float = Field(default=0.0, ge=0)
    """The one-minute load average when measuring began (runnable tasks; for the record)."""
    others_share: float = Field(default=0.0, ge=0)
    """Share of the usable cores' time that went to other programs."""
    wait_share: float = Field(default=0.0, ge=0)
    """Share of the measuring processes' time spent waiting for their core."""
    steal_share: float = Field(default=0.0, ge=0)
    """Share of the usable cores' time the hypervisor gave to other guests."""
    together: bool = True
    """Several cores: every measuring process took its samples while all of them were working
    (False: one was held up, and what it did then is left out of the sum: some figure is short
    of what the cores do together)."""

    @property
    def share(self) -> float:
        """The largest of the three shares: how much of the host was not ours."""
        return max(self.others_share, self.wait_share, self.steal_share)

    @property
    def busy(self) -> bool:
        """Taken under load: more than BUSY_SHARE of the time went elsewhere, or the processes
        of a several-core measurement did not all work at once."""
        return self.share > BUSY_SHARE or not self.together

    def describe(self) -> str:
        """'quiet host (1.2% of the time to other programs)' or 'under load (...)'."""
        parts = [f"{self.others_share:.0%} of the cores' time went to other programs"]
        if self.wait_share > 0.005:
            parts.append(f"the probes waited {self.wait_share:.0%} of theirs for a core")
        if self.steal_share > 0.005:
            parts.append(f"steal {self.steal_share:.0%}")
        if not self.together:
            parts.append("the cores' probes did not all run at once")
        parts.append(f"load average {self.load_average:.1f}")
        return f"{'under load' if self.busy else 'quiet host'} ({', '.join(parts)})"


class BandwidthPoint(BaseModel):
    working_set_bytes: int = Field(gt=0)
    """The working set it was measured with (bytes read plus bytes written; several cores:
    all of theirs together)."""
    level: Level
    """Where a working set of this size lives: the cache that holds it, or memory."""
    holds_bytes: int | None = None
    """How much that level holds (None: memory, no limit)."""
    bytes_per_s: float = Field(gt=0)


RATE_FIELDS = (
    "matmul_fp32_flops_per_s",
    "matmul_fp64_flops_per_s",
    "vector_fp32_flops_per_s",
    "vector_fp64_flops_per_s",
    "memory_bytes_per_s",
)


class CorePeaks(BaseModel):
    """The peak rates of `cores` cores working at once, FLOP/s and bytes/s, and how and when
    they were measured."""

    cores: int = Field(ge=1)
    matmul_fp32_flops_per_s: float = Field(gt=0)
    matmul_fp64_flops_per_s: float = Field(gt=0)
    vector_fp32_flops_per_s: float = Field(gt=0)
    vector_fp64_flops_per_s: float = Field(gt=0)
    memory_bytes_per_s: float = Field(gt=0)
    """Streaming bandwidth: a working set far larger than the last cache."""
    bandwidth: list[BandwidthPoint] = Field(default_factory=list)
    """Bandwidth by working set, smallest first: one point per cache level and streaming."""
    cpus: list[int] = Field(default_factory=list)
    """The logical CPUs that did the work (one process pinned to each)."""
    by_method: dict[str, dict[str, float]] = Field(default_factory=dict)
    """Several cores: what each way of keeping them busy reached, by figure: 'processes' (one
    pinned process per core, one BLAS thread each, rates added up) and 'blas' (one process,
    the BLAS on `cores` threads; matmul only). Each figure above is the highest of these."""
    measured_at: str = ""
    measure_seconds: float = Field(default=0.0, ge=0)
    """How long measuring these figures took (the last time)."""
    load: HostLoad = Field(default_factory=HostLoad)
    """How busy the host was while they were measured (the last time)."""
    measurements: int = Field(default=1, ge=1)
    """How many measurements each figure is the best of (more than one: re-measured after a
    measurement under load)."""

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

    def best_of(self, fresh: CorePeaks) -> CorePeaks:
        """These figures and a fresh measurement of the same cores merged, figure by figure
        the higher (each is a lower bound of the true peak, so the higher is too, and the
        closer); how and when is the fresh one's, and the count of measurements adds up."""
        rates = {name: max(getattr(self, name), getattr(fresh, name)) for name in RATE_FIELDS}
        same_curve = [(p.working_set_bytes, p.level) for p in self.bandwidth] == [
            (p.working_set_bytes, p.level) for p in fresh.bandwidth
        ]
        curve = (
            [
                new.model_copy(update={"bytes_per_s": max(old.bytes_per_s, new.bytes_per_s)})
                for old, new in zip(self.bandwidth, fresh.bandwidth, strict=True)
            ]
            if same_curve
            else fresh.bandwidth
        )
        methods = {
            method: {
                name: max(value, self.by_method.get(method, {}).get(name, 0.0))
                for name, value in figures.items()
            }
            for method, figures in fresh.by_method.items()
        }
        return fresh.model_copy(
            update={
                **rates,
                "bandwidth": curve,
                "by_method": methods,
                "measurements": self.measurements + fresh.measurements,
            }
        )


class CpuPeaks(BaseModel):
    """One host's measured peaks (a store's hardware-peaks record holds `model_dump`): a set of
    figures per core count measured so far, one core's always among them."""

    format: int = PEAKS_FORMAT
    hardware: str
    by_cores: list[CorePeaks] = Field(min_length=1)
    """One entry per core count, fewest cores first; the first is one core's: one pinned
    core, one BLAS thread, what a pooled (pinned) evaluation can reach."""
    measured_at: str
    """When the latest of these figures were measured."""
    measure_seconds: float
    """How long the latest measurement took."""
    numpy: str
    blas: str | None = None
    sizes: PeakSizes

    @model_validator(mode="after")
    def _one_set_per_count(self) -> CpuPeaks:
        counts = [entry.cores for entry in self.by_cores]
        if counts != sorted(set(counts)) or counts[0] != 1:
            raise ValueError(f"one set of figures per core count, one core's first: {counts}")
        return self

    @property
    def one_core(self) -> CorePeaks:
        return self.by_cores[0]

    @property
    def most_cores(self) -> CorePeaks:
        """The figures of the most cores measured (every usable one, with sizes.all_cores)."""
        return self.by_cores[-1]

    def for_cores(self, cores: int) -> CorePeaks | None:
        """The figures measured with `cores` cores working (None: not measured yet;
        PeakSource.peaks(cores=...) measures them)."""
        return next((entry for entry in self.by_cores if entry.cores == max(1, cores)), None)

    def with_entry(self, entry: CorePeaks, *, best_of_kept: bool = False) -> CpuPeaks:
        """These peaks with `entry` as its core count's figures (`best_of_kept`: merged with
        the figures kept for that count, CorePeaks.best_of)."""
        kept = self.for_cores(entry.cores)
        if kept is not None and best_of_kept:
            entry = kept.best_of(entry)
        others = [e for e in self.by_cores if e.cores != entry.cores]
        return self.model_copy(
            update={
                "by_cores": sorted([*others, entry], key=lambda e: e.cores),
                "measured_at": entry.measured_at or self.measured_at,
                "measure_seconds": entry.measure_seconds,
            }
        )

    def hardware_peak(self, cores: int, working_set: float) -> HardwarePeak:
        """These figures as roofline.HardwarePeak, for a kernel on `cores` cores whose data is
        `working_set` bytes (the memory peak is that of the level holding it). KeyError when
        that many cores' figures were not measured."""
        peaks = self.for_cores(cores)
        if peaks is None:
            raise KeyError(f"no {cores}-core peaks measured for {self.hardware}")
        memory, _ = peaks.bandwidth_at(working_set)
        return HardwarePeak(
            name=f"{self.hardware} ({peaks.cores}-core peaks, measured)",
            memory_bytes_per_s=memory,
            matmul_fp32_flops_per_s=peaks.matmul_fp32_flops_per_s,
            matmul_bf16_flops_per_s=peaks.matmul_fp32_flops_per_s,
            vector_flops_per_s=peaks.vector_fp32_flops_per_s,
            source=f"measured on this host's {_cpu_list(peaks.cpus)} at "
            f"{peaks.measured_at}, {peaks.load.describe()}",
        )


def _cpu_list(cpus: Collection[int]) -> str:
    """'core 3', 'cores 0,1'."""
    return f"core{'s' if len(cpus) > 1 else ''} {','.join(map(str, sorted(cpus))) or '?'}"


def _age_s(stamp: str) -> float:
    """Seconds since an ISO time stamp (inf when unreadable: as good as never)."""
    try:
        then = datetime.fromisoformat(stamp)
    except ValueError:
        return math.inf
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    return (datetime.now(UTC) - then).total_seconds()


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
_looked: dict[tuple[str, PeakSizes], float] = {}
"""When this process last looked whether the host is quiet enough to measure figures taken
under load again (time.monotonic), by hardware and sizes."""


def forget_peaks() -> None:
    """Drop this process's copies (the store and the file keep theirs)."""
    with _lock:
        _memory.clear()
        _looked.clear()


class PeakSource:
    """Where a backend gets a host's peaks: memory, the store, the file, else a measurement.

    store: a KernelStore (or anything with its two peak methods); None: none at hand.
    sizes: what to measure with (and which records count: only those measured with the same).
    peaks_file: the JSON cache; None: no file (default: `default_peaks_file()`, read when
    asked so ACCELOPT_HOME set later is honoured).
    retry_after_s: how old figures taken under load must be before they are measured again
    (RETRY_AFTER_S)."""

    def __init__(
        self,
        store: PeakStore | None = None,
        *,
        sizes: PeakSizes | None = None,
        peaks_file: Path | Literal["default"] | None = "default",
        retry_after_s: float = RETRY_AFTER_S,
    ) -> None:
        self.store = store
        self.sizes = sizes or PeakSizes()
        self._peaks_file = peaks_file
        self.retry_after_s = retry_after_s

    @property
    def peaks_file(self) -> Path | None:
        return default_peaks_file() if self._peaks_file == "default" else self._peaks_file

    def known(self, hardware: str) -> CpuPeaks | None:
        """The figures if they are kept anywhere; never measures."""
        with _lock:
            return self._kept(hardware)

    def peaks(
        self,
        hardware: str,
        *,
        cores: int | None = None,
        cpus: Collection[int] | None = None,
        remeasure: bool = False,
    ) -> CpuPeaks:
        """The figures for `hardware` (this host's cpu backend hardware string), with those of
        one core, of every usable core (sizes.all_cores) and of `cores` cores among them.

        What is not kept is measured now: a core count's figures on `cpus` when they are that
        many (the evaluation's own cores), else on the last usable cores. Figures kept from a
        measurement under load (HostLoad.busy) that is RETRY_AFTER_S old are measured again
        when the host is quieter now than it was then (looked at once a minute at most, for
        QUIET_WINDOW_S) and merged with the kept ones, the best of each figure kept
        (CorePeaks.best_of): a busy host never replaces good figures with worse ones, and a
        quiet one lifts those a busy one left low. `remeasure`: measure everything afresh and
        keep only the new figures (`accelopt backends --remeasure`). PeakMeasurementError when
        measuring fails."""
        wanted = self._wanted(cores)
        with _lock:
            found = None if remeasure else self._kept(hardware)
            again = self._due_again(hardware, found, wanted) if found is not None else []
            if found is not None and not again and not _missing(found, wanted):
                return found
            with self._host_lock():
                # Another process may have measured while this one waited for the lock.
                latest = None if remeasure else (self._kept(hardware, memory=False) or found)
                if latest is None:
                    latest = measure_peaks(hardware, self.sizes, counts=wanted, cpus=cpus)
                else:
                    for count in _missing(latest, wanted):
                        latest = latest.with_entry(
                            measure_cores(_cores_for(count, cpus), self.sizes)
                        )
                    for count, stamp in again:
                        kept = latest.for_cores(count)
                        if kept is None or kept.measured_at != stamp:
                            continue  # measured again by another process meanwhile
                        entry = measure_cores(_cores_for(count, cpus), self.sizes)
                        latest = latest.with_entry(entry, best_of_kept=True)
                        log.info(
                            "re-measured the %d-core peaks taken under load; now %s",
                            count,
                            entry.load.describe(),
                        )
                self._keep(latest, in_store=True, in_file=True)
            _memory[(hardware, self.sizes)] = latest
            return latest

    # ------------------------------------------------------------------ internals

    def _wanted(self, cores: int | None) -> list[int]:
        usable = len(os.sched_getaffinity(0))
        wanted = {1}
        if self.sizes.all_cores:
            wanted.add(usable)
        if cores is not None:
            wanted.add(max(1, min(cores, usable)))
        return sorted(wanted)

    def _due_again(
        self, hardware: str, peaks: CpuPeaks, wanted: list[int]
    ) -> list[tuple[int, str]]:
        """The wanted core counts whose figures were taken under load, are RETRY_AFTER_S old
        and may be measured again now: the host is quiet (at most BUSY_SHARE busy over
        QUIET_WINDOW_S), or half as busy as it was then. With the time stamp of the figures
        kept (which a merge must still find). Looks at most once every CHECK_EVERY_S."""
        stale = [
            entry
            for count in wanted
            if (entry := peaks.for_cores(count)) is not None
            and entry.load.busy
            and _age_s(entry.measured_at) >= self.retry_after_s
        ]
        if not stale:
            return []
        key = (hardware, self.sizes)
        looked = _looked.get(key)
        if looked is not None and time.monotonic() - looked < CHECK_EVERY_S:
            return []
        _looked[key] = time.monotonic()
        now = host_busy_share()
        if now is None:
            return []
        return [
            (entry.cores, entry.measured_at)
            for entry in stale
            if now <= BUSY_SHARE or now <= entry.load.share / 2
        ]

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


# --------------------------------------------------------------------------- the host's load


def _cpu_ticks() -> dict[int, tuple[int, int, int]] | None:
    """(busy, steal, total) clock ticks of each logical CPU so far (/proc/stat); None when
    unreadable."""
    found: dict[int, tuple[int, int, int]] = {}
    try:
        with open("/proc/stat") as f:
            for line in f:
                name, *fields = line.split()
                if not (name.startswith("cpu") and name[3:].isdigit()) or len(fields) < 8:
                    continue
                user, nice, system, idle, iowait, irq, softirq, steal = map(int, fields[:8])
                total = user + nice + system + idle + iowait + irq + softirq + steal
                found[int(name[3:])] = (total - idle - iowait, steal, total)
    except (OSError, ValueError):
        return None
    return found or None


def _ticks_over(
    before: dict[int, tuple[int, int, int]] | None,
    after: dict[int, tuple[int, int, int]] | None,
    cpus: Collection[int],
) -> tuple[float, float, float] | None:
    """(busy, steal, total) seconds on `cpus` between two readings."""
    if before is None or after is None:
        return None
    tick = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
    sums = [0, 0, 0]
    for cpu in cpus:
        if cpu in before and cpu in after:
            for i in range(3):
                sums[i] += after[cpu][i] - before[cpu][i]
    if sums[2] <= 0:
        return None
    busy, steal, total = (value / tick for value in sums)
    return busy, steal, total


def host_busy_share(window_s: float = QUIET_WINDOW_S) -> float | None:
    """The share of the usable cores' time that was busy over the next `window_s` seconds
    (/proc/stat; this thread sleeps meanwhile); None when it cannot be read."""
    usable = os.sched_getaffinity(0)
    before = _cpu_ticks()
    time.sleep(window_s)
    over = _ticks_over(before, _cpu_ticks(), usable)
    if over is None:
        return None
    busy, _, total = over
    return min(1.0, max(0.0, busy / total))


def _load_average() -> float:
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0


class _LoadMeter:
    """How busy the host was from its creation to `reading`: HostLoad's shares."""

    def __init__(self) -> None:
        self.usable = os.sched_getaffinity(0)
        self.load_average = _load_average()
        self.ticks = _cpu_ticks()
        self.own = time.thread_time()

    def reading(self, children: list[dict[str, Any]], *, together: bool = True) -> HostLoad:
        ours = math.fsum(float(c.get("cpu_s", 0.0)) for c in children)
        ours += time.thread_time() - self.own
        ran = sum(int(c.get("run_ns", 0)) for c in children)
        waited = sum(int(c.get("wait_ns", 0)) for c in children)
        over = _ticks_over(self.ticks, _cpu_ticks(), self.usable)
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


# --------------------------------------------------------------------------- measuring


def _all_cores_n(sizes: PeakSizes, cores: int) -> int:
    """A matmul side that keeps k cores busy in one BLAS call: the one-core side times the
    cube root of the core count (as much work per core), at most twice it."""
    return int(sizes.matmul_n * min(2.0, cores ** (1 / 3)))


def _cores_for(count: int, cpus: Collection[int] | None) -> list[int]:
    """The cores to measure `count` cores' figures on: `cpus` when they are that many (an
    evaluation's own), else the last usable ones (the first usually takes more of the host's
    interrupts)."""
    if cpus is not None and len(cpus) == count:
        return sorted(cpus)
    return sorted(os.sched_getaffinity(0))[-count:]


def _missing(peaks: CpuPeaks, wanted: list[int]) -> list[int]:
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
    meter = _LoadMeter()
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
    meter = _LoadMeter()
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
    entries = [measure_cores(_cores_for(count, cpus), sizes) for count in sorted(wanted)]
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


# --------------------------------------------------------------------------- percent of peak


def _size(count: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{count:.0f} B"


def measured_roofline(
    peaks: CpuPeaks, cores: int, roofline: Roofline, latency_ms: float
) -> tuple[dict[str, float], str, dict[str, float | str]]:
    """A cpu evaluation's percent of peak: its counters (roofline.PERCENT_COUNTERS, the
    achieved and peak rates, and PEAK_NAME_COUNTERS naming the peak), the text of its log
    line, which names each peak it is against ('34.0% of the 1-core fp32 matmul peak (96.8
    GFLOP/s)'), how and when that peak was measured and whether under load, and the
    roofline.percent_of_peak report. The peaks are those measured with `cores` cores working
    (KeyError when they were not: PeakSource.peaks(cores=...) measures them)."""
    entry = peaks.for_cores(cores)
    if entry is None:
        raise KeyError(f"no {cores}-core peaks measured for {peaks.hardware}")
    unit = roofline.compute_unit
    _, point = entry.bandwidth_at(roofline.bytes_moved)
    peak = peaks.hardware_peak(cores, roofline.bytes_moved)
    report = percent_of_peak(latency_ms, roofline, peak, unit=unit)
    gflops = float(report["achieved_tflops_per_s"]) * 1e3
    gbytes = float(report["achieved_gbytes_per_s"])
    peak_gflops = peak.flops_per_s(unit) / 1e9
    peak_gbytes = peak.memory_bytes_per_s / 1e9
    counters = {
        "gflops": gflops,
        "gbytes_per_s": gbytes,
        "peak_gflops": peak_gflops,
        "peak_gbytes_per_s": peak_gbytes,
        "peak_cores": float(entry.cores),
        "peak_matmul": 0.0 if unit == "vector" else 1.0,
        **percent_counters(report),
    }
    where = (
        f"data in {point.level}"
        if point is not None and point.holds_bytes is not None
        else "streamed from memory"
    )
    compute = compute_peak_name(entry.cores, unit != "vector")
    if unit == "matmul_bf16":
        compute += ", NumPy has no bf16 matmul"
    line = (
        f"{gflops:.3g} GFLOP/s = {counters['flops_pct_of_peak']:.1f}% of the {compute} "
        f"({peak_gflops:.3g} GFLOP/s); {gbytes:.3g} GB/s = "
        f"{counters['bandwidth_pct_of_peak']:.1f}% of the {memory_peak_name(entry.cores)} for "
        f"a {_size(roofline.bytes_moved)} working set ({peak_gbytes:.3g} GB/s, {where}); "
        f"{report['bound']}-bound, at {counters['roofline_pct_of_peak']:.1f}% of its roofline "
        f"(the {entry.cores}-core peaks were measured on {_cpu_list(entry.cpus)} at "
        f"{entry.measured_at}, {entry.load.describe()}"
    )
    if entry.measurements > 1:
        line += f", the best of {entry.measurements} measurements"
    if entry.load.busy:
        line += "; measured again when the host is quieter"
    return counters, line + ")", report
