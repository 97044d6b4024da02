"""This host's peaks: measured for real with tiny sizes, per core count with that many cores
working, with the host's load; kept in a real SQLite store and in the peaks file, found again
without measuring, measured again after a measurement under load, shown by `accelopt backends`
and the planner's hardware block."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from accelopt_mcp.backends import cpu_peaks, cpu_peaks_records
from accelopt_mcp.backends.cpu_peaks import (
    PeakSource,
    default_peaks_file,
    forget_peaks,
    measured_roofline,
)
from accelopt_mcp.backends.cpu_peaks_measure import crowd_total, measure_cores, measure_peaks
from accelopt_mcp.backends.cpu_peaks_records import (
    BUSY_SHARE,
    BandwidthPoint,
    CorePeaks,
    CpuPeaks,
    HostLoad,
    PeakSizes,
)
from accelopt_mcp.backends.host_facts import host_hardware
from accelopt_mcp.backends.host_load import host_busy_share
from accelopt_mcp.cli import _register, app
from accelopt_mcp.engine.hardware_block import describe_hardware
from accelopt_mcp.models import Environment, Roofline
from accelopt_mcp.store.sqlite import SqliteStore
from accelopt_mcp.store.url import default_sqlite_path

TINY = PeakSizes.tiny()
ONE_CORE = PeakSizes.tiny(all_cores=False)
"""For the tests of where figures are kept: one measuring child instead of several."""
HARDWARE = host_hardware()
USABLE = sorted(os.sched_getaffinity(0))
several_cores = pytest.mark.skipif(len(USABLE) < 2, reason="needs two usable cores")
ACCELOPT = str(Path(sys.executable).parent / "accelopt")
_register()
runner = CliRunner()


@pytest.fixture(autouse=True)
def _fresh_memory() -> Iterator[None]:
    """No figures carried between tests (or into other test modules) in this process."""
    forget_peaks()
    yield
    forget_peaks()


@pytest.fixture(scope="module")
def tiny_peaks() -> CpuPeaks:
    """One real measurement with tiny sizes (a fraction of a second), shared by the tests
    that only read figures."""
    return measure_peaks(HARDWARE, TINY)


def test_tiny_measurement_gives_positive_ordered_figures(tiny_peaks: CpuPeaks) -> None:
    one, every = tiny_peaks.one_core, tiny_peaks.most_cores
    assert [e.cores for e in tiny_peaks.by_cores] == sorted({1, len(USABLE)})
    assert one.cores == 1 and one.cpus == [USABLE[-1]]
    assert every.cores == len(USABLE) and every.cpus == USABLE
    for peaks in (one, every):
        for rate in (
            peaks.matmul_fp32_flops_per_s,
            peaks.matmul_fp64_flops_per_s,
            peaks.vector_fp32_flops_per_s,
            peaks.vector_fp64_flops_per_s,
            peaks.memory_bytes_per_s,
        ):
            assert 1e6 < rate < 1e15
        # Every set says when it was measured and how busy the host was meanwhile.
        assert peaks.measured_at and peaks.measure_seconds > 0 and peaks.measurements == 1
        assert 0 <= peaks.load.share <= 1 and peaks.load.load_average >= 0
        assert peaks.memory_bytes_per_s == peaks.bandwidth[-1].bytes_per_s
    # One bandwidth point per working set asked for, the largest one the streaming figure.
    assert [p.working_set_bytes for p in one.bandwidth] == list(TINY.working_sets or ())
    assert [p.level for p in one.bandwidth] == ["L2", "memory"]
    assert 0 < tiny_peaks.measure_seconds < 30
    assert tiny_peaks.sizes == TINY and tiny_peaks.hardware == HARDWARE


@pytest.mark.serial
def test_on_a_quiet_host_fp64_is_no_faster_than_fp32(tiny_peaks: CpuPeaks) -> None:
    """Twice the bytes per element: fp64 is not faster than fp32 (10 % for noise). A comparison
    of two timed figures, so it runs alone (marked serial; the serial stage runs no other test
    of this module, so the shared measurement is taken there, on a quiet host): in the parallel
    stage a tiny measurement taken while the other workers ran once read fp64 vectors at 2.2x
    fp32 (its load record said the host was 80 % busy), which says nothing about the code."""
    for figures in (tiny_peaks.one_core, tiny_peaks.most_cores):
        assert figures.matmul_fp64_flops_per_s <= 1.1 * figures.matmul_fp32_flops_per_s
        assert figures.vector_fp64_flops_per_s <= 1.1 * figures.vector_fp32_flops_per_s


@several_cores
def test_the_every_core_figures_come_from_every_core_working(tiny_peaks: CpuPeaks) -> None:
    """Not one core's figures relabelled (the old max(blas, one_core)): each comes from the
    cores working at once, the matmul from the better of one process per core and the BLAS on
    all of them, both kept; the bandwidth curve is the cores' own."""
    one, every = tiny_peaks.one_core, tiny_peaks.most_cores
    assert set(every.by_method) == {"processes", "blas"}
    for name in ("matmul_fp32_flops_per_s", "matmul_fp64_flops_per_s"):
        measured = [every.by_method[m][name] for m in ("processes", "blas")]
        assert getattr(every, name) == max(measured) and min(measured) > 0
    assert one.by_method == {}
    # Each core's share of a level's working set; together at least the level's.
    assert [p.level for p in every.bandwidth] == ["L2", "memory"]
    for mine, theirs in zip(one.bandwidth, every.bandwidth, strict=True):
        assert theirs.working_set_bytes >= mine.working_set_bytes
    assert every.bandwidth[-1].working_set_bytes % every.cores == 0
    if not every.load.busy:
        # On a quiet host two cores of small GEMMs do clearly more than one.
        assert every.matmul_fp32_flops_per_s > 1.3 * one.matmul_fp32_flops_per_s


def _sample(start: float, end: float, rate: float, waited_ns: float = 0.0) -> list[float]:
    return [start, end, rate, waited_ns]


def test_several_cores_count_only_while_all_of_them_work() -> None:
    # Two children sampling 0.0-1.0 s: the sum of each one's best sample.
    first = [_sample(0.0, 0.5, 10.0), _sample(0.5, 1.0, 12.0)]
    second = [_sample(0.0, 0.5, 9.0), _sample(0.5, 1.0, 8.0)]
    assert crowd_total([first, second]) == (21.0, True)
    # The second began late: the first's sample from before it started does not count.
    late = [_sample(0.4, 0.7, 9.0), _sample(0.7, 1.0, 9.0)]
    fast_alone = [_sample(0.0, 0.3, 50.0), _sample(0.4, 0.7, 10.0), _sample(0.7, 1.0, 11.0)]
    assert crowd_total([fast_alone, late]) == (20.0, True)
    # The second was held up (another program had its core) from 0.4 to 0.7: the first's
    # sample beside that does not count, nor does the second's own.
    held = [_sample(0.0, 0.4, 9.0), _sample(0.4, 0.7, 3.0, 0.2e9), _sample(0.7, 1.0, 9.5)]
    beside = [_sample(0.0, 0.4, 10.0), _sample(0.4, 0.7, 30.0), _sample(0.7, 1.0, 11.0)]
    assert crowd_total([beside, held]) == (20.5, True)
    # A child held up through all of it adds only what it did over the stretch (work over
    # wall time), as does the one beside it, and the total is marked not together (taken
    # under load).
    stuck = [_sample(0.0, 0.5, 4.0, 0.4e9), _sample(0.5, 1.0, 2.0, 0.4e9)]
    total, together = crowd_total([[_sample(0.0, 1.0, 10.0)], stuck])
    assert not together and total == pytest.approx(10.0 + 3.0)
    # Never working at the same time: nothing.
    assert crowd_total([[_sample(0.0, 0.1, 5.0)], [_sample(0.2, 0.3, 5.0)]]) == (0.0, False)


def test_peaks_are_measured_once_and_kept_in_the_store(tmp_path: Path) -> None:
    with SqliteStore(str(tmp_path / "kernels.db")) as store:
        first = PeakSource(store, sizes=ONE_CORE, peaks_file=tmp_path / "a.json").peaks(HARDWARE)
        record = store.get_hardware_peaks(HARDWARE)
        assert record is not None and CpuPeaks.model_validate(record.peaks) == first
        stamp = record.measured_at
        forget_peaks()
        # Another process (nothing in memory, another peaks file): the store's figures, not a
        # new measurement; the store's record is not even written again.
        other_file = tmp_path / "b.json"
        again = PeakSource(store, sizes=ONE_CORE, peaks_file=other_file).peaks(HARDWARE)
        assert again == first
        kept = store.get_hardware_peaks(HARDWARE)
        assert kept is not None and kept.measured_at == stamp
        # ... and copied into that process's file for the store-less processes beside it.
        assert CpuPeaks.model_validate(json.loads(other_file.read_text())[HARDWARE]) == first
        # Asked to measure again: new figures, stored.
        fresh = PeakSource(store, sizes=ONE_CORE, peaks_file=None).peaks(HARDWARE, remeasure=True)
        newer = store.get_hardware_peaks(HARDWARE)
        assert newer is not None and newer.measured_at > stamp
        assert CpuPeaks.model_validate(newer.peaks) == fresh != first


def test_the_peaks_file_serves_processes_without_a_store(tmp_path: Path) -> None:
    path = tmp_path / "peaks.json"
    source = PeakSource(None, sizes=ONE_CORE, peaks_file=path)
    assert source.known(HARDWARE) is None  # nothing kept: known() never measures
    measured = source.peaks(HARDWARE)
    forget_peaks()
    assert PeakSource(None, sizes=ONE_CORE, peaks_file=path).known(HARDWARE) == measured
    # A record taken with other sizes, or under another NumPy, is not used.
    assert PeakSource(None, peaks_file=path).known(HARDWARE) is None
    assert PeakSource(None, sizes=TINY, peaks_file=path).known(HARDWARE) is None
    stale = json.loads(path.read_text())
    stale[HARDWARE]["numpy"] = "0.0.1"
    path.write_text(json.dumps(stale))
    forget_peaks()
    assert PeakSource(None, sizes=ONE_CORE, peaks_file=path).known(HARDWARE) is None
    # A store that cannot answer (closed) does not stop a profile: the figures are measured
    # and kept in the file all the same.
    store = SqliteStore(str(tmp_path / "closed.db"))
    store.close()
    found = PeakSource(store, sizes=ONE_CORE, peaks_file=path).peaks(HARDWARE)
    assert found.numpy != "0.0.1" and found.sizes == ONE_CORE


def test_the_peaks_file_sits_next_to_the_default_database(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ACCELOPT_HOME", str(tmp_path / "home"))
    assert default_peaks_file().parent == default_sqlite_path().parent
    monkeypatch.delenv("ACCELOPT_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_peaks_file().parent == default_sqlite_path().parent


@several_cores
def test_a_core_count_is_measured_when_first_needed_on_the_evaluations_cores(
    tmp_path: Path,
) -> None:
    path = tmp_path / "peaks.json"
    source = PeakSource(None, sizes=ONE_CORE, peaks_file=path)
    first = source.peaks(HARDWARE)
    assert [e.cores for e in first.by_cores] == [1]
    assert first.for_cores(2) is None  # never made up from one core's
    cpus = set(USABLE[:2])
    found = source.peaks(HARDWARE, cores=2, cpus=cpus)
    two = found.for_cores(2)
    assert (
        two is not None
        and two.cpus == sorted(cpus)
        and set(two.by_method)
        == {
            "processes",
            "blas",
        }
    )
    assert found.one_core == first.one_core  # one core's figures are kept as they were
    # Kept for the next process, which measures nothing more.
    forget_peaks()
    again = PeakSource(None, sizes=ONE_CORE, peaks_file=path).peaks(HARDWARE, cores=2)
    assert again == found


def _spin(core: int) -> subprocess.Popen[bytes]:
    spin = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass\n"
    return subprocess.Popen([sys.executable, "-c", spin, str(core)])


@pytest.fixture
def spinning() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Busy loops the test starts (each pinned to a core), killed after it."""
    spinners: list[subprocess.Popen[bytes]] = []
    yield spinners
    for spinner in spinners:
        spinner.kill()
        spinner.wait()


def test_figures_taken_beside_another_program_are_marked_under_load(
    spinning: list[subprocess.Popen[bytes]],
) -> None:
    core = USABLE[-1]
    spinning.append(_spin(core))
    time.sleep(0.2)  # running
    peaks = measure_cores([core], ONE_CORE)
    # The probe shared its core with the busy loop: it waited for it about half the time.
    assert peaks.load.wait_share > 0.2 and peaks.load.others_share > BUSY_SHARE
    assert peaks.load.busy and peaks.load.describe().startswith("under load")
    spinning.extend(_spin(other) for other in USABLE if other != core)
    time.sleep(0.2)
    share = host_busy_share()
    assert share is not None and share > 0.8


def _with_load(path: Path, load: HostLoad, measured_at: str | None = None) -> CpuPeaks:
    """The file's record, its one-core figures said to be taken under `load`."""
    data = json.loads(path.read_text())
    entry = data[HARDWARE]["by_cores"][0]
    entry["load"] = load.model_dump()
    if measured_at is not None:
        entry["measured_at"] = measured_at
    path.write_text(json.dumps(data))
    forget_peaks()
    return CpuPeaks.model_validate(data[HARDWARE])


def test_figures_taken_under_load_are_measured_again_on_a_quieter_host(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "peaks.json"
    PeakSource(None, sizes=ONE_CORE, peaks_file=path).peaks(HARDWARE)
    loaded = _with_load(path, HostLoad(others_share=0.6, load_average=3.0))
    kept = loaded.one_core
    assert kept.load.busy
    # How busy the host is now: what /proc/stat would say (counted, so the test sees when
    # it is asked).
    asked: list[float] = []
    now = {"share": 0.5}

    def busy_share(window_s: float = 0.0) -> float:
        asked.append(window_s)
        return now["share"]

    monkeypatch.setattr(cpu_peaks, "host_busy_share", busy_share)
    # Not old enough yet: kept as it is, the host not even looked at.
    young = PeakSource(None, sizes=ONE_CORE, peaks_file=path)
    assert young.peaks(HARDWARE) == loaded and asked == []
    # Old enough, but the host is about as busy as it was (0.5 of 0.6): kept, and this
    # process does not look again for a while.
    source = PeakSource(None, sizes=ONE_CORE, peaks_file=path, retry_after_s=0)
    assert source.peaks(HARDWARE) == loaded and len(asked) == 1
    assert source.peaks(HARDWARE) == loaded and len(asked) == 1
    # Quiet now: measured again, and the best of both measurements kept, figure by figure.
    forget_peaks()
    now["share"] = 0.01
    found = source.peaks(HARDWARE)
    again = found.one_core
    assert len(asked) == 2 and again.measurements == 2 and again.measured_at >= kept.measured_at
    for name in cpu_peaks_records.RATE_FIELDS:
        assert getattr(again, name) >= getattr(kept, name)
    pairs = zip(again.bandwidth, kept.bandwidth, strict=True)
    assert all(p.bytes_per_s >= q.bytes_per_s for p, q in pairs)
    assert again.load != kept.load  # the new measurement's load
    # ... and kept for the next process.
    forget_peaks()
    assert PeakSource(None, sizes=ONE_CORE, peaks_file=path).known(HARDWARE) == found


def _point(size: int, level: str, holds: int | None, rate: float) -> BandwidthPoint:
    return BandwidthPoint.model_validate(
        {"working_set_bytes": size, "level": level, "holds_bytes": holds, "bytes_per_s": rate}
    )


def _core(
    cores: int,
    scale: float,
    bandwidth: list[BandwidthPoint],
    *,
    cpus: list[int] | None = None,
    load: HostLoad | None = None,
) -> CorePeaks:
    return CorePeaks(
        cores=cores,
        matmul_fp32_flops_per_s=100e9 * scale,
        matmul_fp64_flops_per_s=50e9 * scale,
        vector_fp32_flops_per_s=20e9 * scale,
        vector_fp64_flops_per_s=10e9 * scale,
        memory_bytes_per_s=20e9 * scale,
        bandwidth=bandwidth,
        cpus=cpus or [3],
        measured_at="2026-01-01T00:00:00+00:00",
        load=load or HostLoad(),
    )


def test_the_memory_peak_is_that_of_the_level_holding_the_working_set() -> None:
    curve = [
        _point(512 << 10, "L2", 1 << 20, 80e9),
        _point(16 << 20, "L3", 32 << 20, 30e9),
        _point(256 << 20, "memory", None, 20e9),
    ]
    one = _core(1, 1.0, curve)
    assert one.bandwidth_at(100 << 10)[0] == 80e9  # in L2
    assert one.bandwidth_at(2 << 20)[0] == 30e9  # too big for L2, fits L3
    rate, point = one.bandwidth_at(1 << 30)
    assert rate == 20e9 and point is not None and point.level == "memory"
    assert one.flops_per_s("vector") == 20e9 and one.flops_per_s("matmul_bf16") == 100e9
    peaks = _record(one, _core(8, 6.0, [_point(256 << 20, "memory", None, 120e9)]))
    assert peaks.for_cores(1) == one and peaks.for_cores(8) == peaks.most_cores
    every = peaks.for_cores(8)
    assert every is not None and every.matmul_fp32_flops_per_s == 600e9
    assert every.bandwidth_at(1 << 30)[0] == 120e9
    # Counts never measured are not made up from others (no scaling, no relabelling).
    assert peaks.for_cores(2) is None and peaks.for_cores(7) is None
    with pytest.raises(KeyError, match="no 2-core peaks"):
        peaks.hardware_peak(2, 1 << 20)
    hardware_peak = peaks.hardware_peak(1, 2 << 20)
    assert hardware_peak.memory_bytes_per_s == 30e9
    assert hardware_peak.vector_flops_per_s == 20e9
    assert hardware_peak.name == "cpu/test (1-core peaks, measured)"
    assert hardware_peak.source.startswith("measured on this host's core 3 at 2026-01-01")
    # One set per count, one core's first.
    with pytest.raises(ValueError, match="one set of figures per core count"):
        CpuPeaks.model_validate(peaks.model_dump() | {"by_cores": [every.model_dump()]})


def _record(*entries: CorePeaks) -> CpuPeaks:
    return CpuPeaks(
        hardware="cpu/test",
        by_cores=list(entries),
        measured_at="2026-01-01T00:00:00+00:00",
        measure_seconds=1.0,
        numpy="x",
        sizes=TINY,
    )


def test_a_percent_of_peak_names_the_peak_of_the_cores_it_ran_on() -> None:
    curve = [_point(512 << 10, "L2", 1 << 20, 80e9), _point(256 << 20, "memory", None, 20e9)]
    busy = HostLoad(others_share=0.3, load_average=2.5)
    two = _core(2, 1.8, [_point(256 << 20, "memory", None, 36e9)], cpus=[0, 1], load=busy)
    peaks = _record(_core(1, 1.0, curve), two)
    # 34 GFLOP in one second of a matmul, 1 GB moved (streamed from memory).
    work = Roofline(flops=34e9, bytes_moved=1e9, compute_unit="matmul_fp32")
    counters, line, report = measured_roofline(peaks, 1, work, 1000.0)
    assert counters["flops_pct_of_peak"] == pytest.approx(34.0)
    assert counters["peak_cores"] == 1.0 and counters["peak_matmul"] == 1.0
    assert counters["peak_gflops"] == pytest.approx(100.0)
    assert report["bound"] == "compute"
    assert "34.0% of the 1-core fp32 matmul peak (100 GFLOP/s)" in line
    assert "5.0% of the 1-core memory peak for a 954 MiB working set (20 GB/s" in line
    assert "the 1-core peaks were measured on core 3 at 2026-01-01" in line
    assert "quiet host" in line and "quieter" not in line
    # On two cores: against the figures measured with two cores working, said so, and that
    # they were taken under load.
    counters, line, _ = measured_roofline(peaks, 2, work, 1000.0)
    assert counters["peak_cores"] == 2.0 and counters["peak_gflops"] == pytest.approx(180.0)
    assert "18.9% of the 2-core fp32 matmul peak (180 GFLOP/s)" in line
    assert "2-core memory peak for a 954 MiB working set (36 GB/s" in line
    assert "on cores 0,1" in line and "under load (30% of the cores' time" in line
    assert "measured again when the host is quieter" in line
    elementwise = Roofline(flops=2e9, bytes_moved=1e9, compute_unit="vector")
    counters, line, _ = measured_roofline(peaks, 1, elementwise, 1000.0)
    assert counters["peak_matmul"] == 0.0 and "of the 1-core elementwise fp32 peak" in line
    with pytest.raises(KeyError):
        measured_roofline(peaks, 4, work, 1000.0)


def test_the_best_of_two_measurements_keeps_each_higher_figure() -> None:
    curve = [_point(512 << 10, "L2", 1 << 20, 80e9), _point(256 << 20, "memory", None, 20e9)]
    busy = _core(1, 1.0, curve, load=HostLoad(others_share=0.4))
    quieter = _core(
        1, 1.2, [_point(512 << 10, "L2", 1 << 20, 70e9), _point(256 << 20, "memory", None, 24e9)]
    )
    quieter = quieter.model_copy(update={"vector_fp32_flops_per_s": 10e9})
    best = busy.best_of(quieter)
    assert best.matmul_fp32_flops_per_s == 120e9 and best.vector_fp32_flops_per_s == 20e9
    assert [p.bytes_per_s for p in best.bandwidth] == [80e9, 24e9]
    assert best.memory_bytes_per_s == 24e9
    assert best.measurements == 2 and best.load == quieter.load and not best.load.busy
    assert busy.load.busy and HostLoad(others_share=BUSY_SHARE).busy is False
    assert HostLoad(together=False).busy


def _as_default_sizes(peaks: CpuPeaks) -> CpuPeaks:
    """A kept record as a default-size measurement leaves it (the figures are tiny ones:
    these tests check what is shown, not the figures)."""
    return peaks.model_copy(update={"sizes": PeakSizes()})


def test_backends_shows_the_kept_peaks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tiny_peaks: CpuPeaks
) -> None:
    db = tmp_path / "kernels.db"
    with SqliteStore(str(db)) as store:
        store.put_hardware_peaks(HARDWARE, _as_default_sizes(tiny_peaks).model_dump(mode="json"))
    env = {**os.environ, "ACCELOPT_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    env.pop("ACCELOPT_STORE", None)
    # As a user runs it: the installed console script.
    found = subprocess.run(
        [ACCELOPT, "backends", "--store", str(db), "--no-measure", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert found.returncode == 0, found.stderr
    cpu = next(b for b in json.loads(found.stdout) if b["name"] == "cpu")
    shown = CpuPeaks.model_validate(cpu["peaks"])
    assert shown.one_core == tiny_peaks.one_core and shown.measured_at == tiny_peaks.measured_at
    # The store's figures were copied into this home's peaks file: a store-less process (or
    # one on another store) finds them there.
    assert HARDWARE in json.loads((tmp_path / "home" / "hardware_peaks.json").read_text())

    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("ACCELOPT_HOME", str(tmp_path / "home"))
    text = runner.invoke(app, ["backends", "--store", str(db), "--no-measure"])
    assert text.exit_code == 0, text.output
    assert "cpu peaks: " + HARDWARE in text.output
    gflops = f"{tiny_peaks.one_core.matmul_fp32_flops_per_s / 1e9:.4g} GFLOP/s"
    assert "fp32 matmul (BLAS)" in text.output and gflops in text.output
    # A column per core count measured, saying on which cores, and how busy the host was.
    every = tiny_peaks.most_cores
    assert f"{every.cores} cores (cpus {','.join(map(str, every.cpus))})" in text.output
    assert "1 core (cpus" in text.output
    assert tiny_peaks.one_core.load.describe().split(" (")[0] in text.output
    if len(USABLE) > 1:
        # (The console's width is fixed when it is first made: a narrow one wraps the label.)
        assert "fp32 matmul, one" in text.output and "process per core" in text.output
    # Nothing kept anywhere and measuring switched off: it says so instead of measuring.
    forget_peaks()
    monkeypatch.setenv("ACCELOPT_HOME", str(tmp_path / "empty_home"))
    empty = runner.invoke(
        app, ["backends", "--store", str(tmp_path / "empty.db"), "--no-measure", "--json"]
    )
    cpu = next(b for b in json.loads(empty.stdout) if b["name"] == "cpu")
    assert cpu["peaks"] is None and "not measured yet" in cpu["peaks_problem"]


def test_the_planner_sees_the_measured_peaks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tiny_peaks: CpuPeaks
) -> None:
    monkeypatch.setenv("ACCELOPT_HOME", str(tmp_path))
    pinned = Environment(hardware=HARDWARE, libs={"cores_per_evaluation": "1"})
    assert "Measured peaks" not in describe_hardware("cpu", pinned)  # none kept: none shown
    # Kept in a store: the first lookup copies them into the peaks file, which a prompt reads.
    with SqliteStore(str(tmp_path / "kernels.db")) as store:
        store.put_hardware_peaks(HARDWARE, _as_default_sizes(tiny_peaks).model_dump(mode="json"))
        assert PeakSource(store).known(HARDWARE) is not None
    forget_peaks()
    assert default_peaks_file().is_file()
    text = describe_hardware("cpu", pinned)
    one = tiny_peaks.one_core
    assert "- Measured peaks of one core" in text
    assert f"fp32 matmul {one.matmul_fp32_flops_per_s / 1e9:.3g} GFLOP/s" in text
    assert f"{one.bandwidth[-1].bytes_per_s / 1e9:.3g} GB/s streaming from memory" in text
    # Another CPU model's evaluation: this host's figures are not borrowed.
    other = Environment(hardware="cpu/aarch64/Some Other Core")
    assert "Measured peaks" not in describe_hardware("cpu", other)
