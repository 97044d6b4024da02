"""The records of this host's peak rates (cpu_peaks.py keeps and finds them,
cpu_peaks_measure.py measures them): how big the measurements are (`PeakSizes`), how busy the
host was (`HostLoad`), one core count's figures (`CorePeaks`) and a hardware id's sets of them
(`CpuPeaks`), with the rule that picks the memory figure a working set is held against."""

from __future__ import annotations

import logging
import math
from collections.abc import Collection
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from accelopt_mcp.backends.roofline import (
    ComputeUnit,
    HardwarePeak,
)

log = logging.getLogger(__name__)

PEAKS_FORMAT = 2
"""Bumped when what is measured changes; a record of another format is measured again. 2: a
set of figures per core count, each measured with that many cores working, with its load."""
BUSY_SHARE = 0.05
"""Figures are taken under load when more than this share of the time went to other programs
(the share cpu_session's timing calls a busy host, CONTENDED_SHARE)."""


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
            source=f"measured on this host's {cpu_list(peaks.cpus)} at "
            f"{peaks.measured_at}, {peaks.load.describe()}",
        )


def cpu_list(cpus: Collection[int]) -> str:
    """'core 3', 'cores 0,1'."""
    return f"core{'s' if len(cpus) > 1 else ''} {','.join(map(str, sorted(cpus))) or '?'}"


def age_s(stamp: str) -> float:
    """Seconds since an ISO time stamp (inf when unreadable: as good as never)."""
    try:
        then = datetime.fromisoformat(stamp)
    except ValueError:
        return math.inf
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    return (datetime.now(UTC) - then).total_seconds()
