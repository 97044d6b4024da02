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

Four modules: this one finds and keeps the figures (`PeakSource`) and takes a percent of peak
against them (`measured_roofline`); cpu_peaks_records.py holds the records, cpu_peaks_measure.py
measures, host_load.py says how busy the host is.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import ValidationError

from accelopt_mcp.backends.cpu_peaks_measure import (
    cores_for,
    measure_cores,
    measure_peaks,
    missing_core_counts,
)
from accelopt_mcp.backends.cpu_peaks_records import (
    BUSY_SHARE,
    PEAKS_FORMAT,
    CpuPeaks,
    PeakSizes,
    age_s,
    cpu_list,
)
from accelopt_mcp.backends.host_facts import host_facts
from accelopt_mcp.backends.host_load import host_busy_share
from accelopt_mcp.backends.roofline import (
    ComputeUnit,
    compute_peak_name,
    memory_peak_name,
    percent_counters,
    percent_of_peak,
)
from accelopt_mcp.models import Roofline

log = logging.getLogger(__name__)

PEAKS_FILE_NAME = "hardware_peaks.json"
RETRY_AFTER_S = 600.0
"""A set of figures taken under load is measured again once it is this old (and the host is
quieter); a measurement that is under load again waits as long once more."""
CHECK_EVERY_S = 60.0
"""How often one process looks (QUIET_WINDOW_S of /proc/stat) whether the host has become
quiet enough to measure a set taken under load again."""


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
            if found is not None and not again and not missing_core_counts(found, wanted):
                return found
            with self._host_lock():
                # Another process may have measured while this one waited for the lock.
                latest = None if remeasure else (self._kept(hardware, memory=False) or found)
                if latest is None:
                    latest = measure_peaks(hardware, self.sizes, counts=wanted, cpus=cpus)
                else:
                    for count in missing_core_counts(latest, wanted):
                        latest = latest.with_entry(
                            measure_cores(cores_for(count, cpus), self.sizes)
                        )
                    for count, stamp in again:
                        kept = latest.for_cores(count)
                        if kept is None or kept.measured_at != stamp:
                            continue  # measured again by another process meanwhile
                        entry = measure_cores(cores_for(count, cpus), self.sizes)
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
            and age_s(entry.measured_at) >= self.retry_after_s
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


# --------------------------------------------------------------------------- percent of peak


def _compute_name(cores: int, unit: ComputeUnit) -> str:
    """The compute peak a unit's FLOPs are held against; NumPy has no bf16 matmul, so a bf16
    one is the fp32 figure, said so."""
    name = compute_peak_name(cores, unit != "vector")
    return name + (", NumPy has no bf16 matmul" if unit == "matmul_bf16" else "")


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
    (KeyError when they were not: PeakSource.peaks(cores=...) measures them).

    A roofline in AccelOpt's form is held against both compute peaks measured here, the fp32
    matmul one for its matmul FLOPs and the elementwise one for its vector FLOPs; the counters'
    compute figures (gflops, peak_gflops, peak_matmul) are the binding engine's, and the line
    gives both engines' and says which of the three terms binds."""
    entry = peaks.for_cores(cores)
    if entry is None:
        raise KeyError(f"no {cores}-core peaks measured for {peaks.hardware}")
    _, point = entry.bandwidth_at(roofline.bytes_moved)
    peak = peaks.hardware_peak(cores, roofline.bytes_moved)
    report = percent_of_peak(latency_ms, roofline, peak)
    # The binding compute engine: the roofline's own unit, or the vector one it also counts.
    unit: ComputeUnit = "vector" if report["unit"] == "vector" else roofline.compute_unit
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
    memory = (
        f"{gbytes:.3g} GB/s = {counters['bandwidth_pct_of_peak']:.1f}% of the "
        f"{memory_peak_name(entry.cores)} for a {_size(roofline.bytes_moved)} working set "
        f"({peak_gbytes:.3g} GB/s, {where})"
    )
    if roofline.split:
        engines = {
            roofline.compute_unit: (roofline.matmul_flops or 0.0, report["matmul_fraction"]),
            "vector": (roofline.vector_flops or 0.0, report["vector_fraction"]),
        }
        parts = [
            f"{flops / latency_ms / 1e6:.3g} GFLOP/s {'matmul' if engine != 'vector' else 'other'}"
            f" = {100 * float(fraction):.1f}% of the {_compute_name(entry.cores, engine)} "
            f"({peak.flops_per_s(engine) / 1e9:.3g} GFLOP/s)"
            for engine, (flops, fraction) in engines.items()
        ]
        binding = (
            memory_peak_name(entry.cores)
            if report["bound"] == "memory"
            else _compute_name(entry.cores, unit)
        )
        line = (
            f"{'; '.join(parts)}; {memory}; {report['bound']}-bound (the {binding} binds), at "
            f"{counters['roofline_pct_of_peak']:.1f}% of its roofline"
        )
    else:
        line = (
            f"{gflops:.3g} GFLOP/s = {counters['flops_pct_of_peak']:.1f}% of the "
            f"{_compute_name(entry.cores, unit)} ({peak_gflops:.3g} GFLOP/s); {memory}; "
            f"{report['bound']}-bound, at {counters['roofline_pct_of_peak']:.1f}% of its roofline"
        )
    line += (
        f" (the {entry.cores}-core peaks were measured on {cpu_list(entry.cpus)} at "
        f"{entry.measured_at}, {entry.load.describe()}"
    )
    if entry.measurements > 1:
        line += f", the best of {entry.measurements} measurements"
    if entry.load.busy:
        line += "; measured again when the host is quieter"
    return counters, line + ")", report
