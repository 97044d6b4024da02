"""This host's peaks: measured for real with tiny sizes, kept in a real SQLite store and in the
peaks file, found again without measuring, shown by `accelopt backends` and the planner's
hardware block."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from accelopt_mcp.backends.cpu import host_hardware
from accelopt_mcp.backends.cpu_peaks import (
    BandwidthPoint,
    CorePeaks,
    CpuPeaks,
    PeakSizes,
    PeakSource,
    default_peaks_file,
    forget_peaks,
    measure_peaks,
)
from accelopt_mcp.cli import _register, app
from accelopt_mcp.engine.hardware_block import describe_hardware
from accelopt_mcp.models import Environment
from accelopt_mcp.store.sqlite import SqliteStore
from accelopt_mcp.store.url import default_sqlite_path

TINY = PeakSizes.tiny()
ONE_CORE = PeakSizes.tiny(all_cores=False)
"""For the tests of where figures are kept: one measuring child instead of several."""
HARDWARE = host_hardware()
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
    one, every = tiny_peaks.one_core, tiny_peaks.all_cores
    assert one.cores == 1 and every.cores == len(os.sched_getaffinity(0))
    for peaks in (one, every):
        for rate in (
            peaks.matmul_fp32_flops_per_s,
            peaks.matmul_fp64_flops_per_s,
            peaks.vector_fp32_flops_per_s,
            peaks.vector_fp64_flops_per_s,
            peaks.memory_bytes_per_s,
        ):
            assert 1e6 < rate < 1e15
        # Twice the bytes per element: fp64 is not faster than fp32 (10 % for noise).
        assert peaks.matmul_fp64_flops_per_s <= 1.1 * peaks.matmul_fp32_flops_per_s
        assert peaks.vector_fp64_flops_per_s <= 1.1 * peaks.vector_fp32_flops_per_s
    assert one.matmul_fp32_flops_per_s <= every.matmul_fp32_flops_per_s
    assert one.vector_fp32_flops_per_s <= every.vector_fp32_flops_per_s
    assert one.memory_bytes_per_s <= every.memory_bytes_per_s
    # One bandwidth point per working set asked for, the largest one the streaming figure.
    assert [p.working_set_bytes for p in one.bandwidth] == list(TINY.working_sets or ())
    assert [p.level for p in one.bandwidth] == ["L2", "memory"]
    assert one.memory_bytes_per_s == one.bandwidth[-1].bytes_per_s
    assert 0 < tiny_peaks.measure_seconds < 30
    assert tiny_peaks.sizes == TINY and tiny_peaks.hardware == HARDWARE


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


def _point(size: int, level: str, holds: int | None, rate: float) -> BandwidthPoint:
    return BandwidthPoint.model_validate(
        {"working_set_bytes": size, "level": level, "holds_bytes": holds, "bytes_per_s": rate}
    )


def _core(cores: int, scale: float, bandwidth: list[BandwidthPoint]) -> CorePeaks:
    return CorePeaks(
        cores=cores,
        matmul_fp32_flops_per_s=100e9 * scale,
        matmul_fp64_flops_per_s=50e9 * scale,
        vector_fp32_flops_per_s=20e9 * scale,
        vector_fp64_flops_per_s=10e9 * scale,
        memory_bytes_per_s=20e9 * scale,
        bandwidth=bandwidth,
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
    peaks = CpuPeaks(
        hardware="cpu/test",
        one_core=one,
        all_cores=_core(8, 6.0, []),
        measured_at="2026-01-01T00:00:00+00:00",
        measure_seconds=1.0,
        numpy="x",
        sizes=TINY,
    )
    assert peaks.for_cores(1) == one
    every = peaks.for_cores(8)
    assert every.matmul_fp32_flops_per_s == 600e9
    # Every core streams from memory together; data in cache streams at one core's rate.
    assert every.bandwidth_at(1 << 30)[0] == 120e9 and every.bandwidth_at(100 << 10)[0] == 120e9
    assert [p.bytes_per_s for p in every.bandwidth] == [80e9, 30e9, 120e9]
    assert [p.bytes_per_s for p in peaks.for_cores(2).bandwidth] == [80e9, 30e9, 120e9]
    # In between: one core's figures times the cores, capped by every core's.
    assert peaks.for_cores(2).matmul_fp32_flops_per_s == 200e9
    assert peaks.for_cores(7).matmul_fp32_flops_per_s == 600e9
    hardware_peak = peaks.hardware_peak(1, 2 << 20)
    assert hardware_peak.memory_bytes_per_s == 30e9
    assert hardware_peak.vector_flops_per_s == 20e9


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
