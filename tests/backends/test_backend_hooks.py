"""The hooks through which the engine and profiling reach backend-specific work without
naming a backend: `options_from_store` (what a backend keeps in the kernel database) and
`before_run` (work done once before a run's first evaluation). Real SQLite store, real
CpuBackend class, the real registry."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelopt_mcp.backends.base import Backend
from accelopt_mcp.backends.cpu import CpuBackend
from accelopt_mcp.backends.cpu_peaks import PeakSource, forget_peaks
from accelopt_mcp.backends.host_facts import host_hardware
from accelopt_mcp.backends.registry import backend_class, backend_names
from accelopt_mcp.models import Roofline
from accelopt_mcp.store.sqlite import SqliteStore
from tests.backends.test_cpu_backend import scale_task


def test_the_cpu_backend_keeps_its_peaks_in_the_given_store(tmp_path: Path) -> None:
    with SqliteStore(str(tmp_path / "kernels.db")) as store:
        options = CpuBackend.options_from_store(store)
        assert set(options) == {"peaks"}
        assert isinstance(options["peaks"], PeakSource) and options["peaks"].store is store


@pytest.mark.parametrize("name", [n for n in backend_names() if n != "cpu"])
def test_other_backends_take_nothing_from_the_store_and_do_nothing_before_a_run(
    name: str, tmp_path: Path
) -> None:
    cls = backend_class(name)
    # The base class's defaults, not an override that happens to return nothing.
    assert cls.options_from_store.__func__ is Backend.options_from_store.__func__  # type: ignore[attr-defined]
    assert cls.before_run.__func__ is Backend.before_run.__func__  # type: ignore[attr-defined]
    with SqliteStore(str(tmp_path / "kernels.db")) as store:
        assert cls.options_from_store(store) == {}
        cls.before_run(store, scale_task())
        assert store.get_hardware_peaks(host_hardware()) is None


def test_before_a_run_the_cpu_backend_measures_peaks_only_for_a_task_with_a_roofline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCELOPT_HOME", str(tmp_path / "home"))  # no peaks file kept yet
    forget_peaks()  # nor any in this process's memory (an earlier test may have measured)
    with SqliteStore(str(tmp_path / "kernels.db")) as store:
        CpuBackend.before_run(store, scale_task())
        assert store.get_hardware_peaks(host_hardware()) is None
        roofline = Roofline(flops=64 * 1024, bytes_moved=3 * 4 * 64 * 1024, compute_unit="vector")
        CpuBackend.before_run(store, scale_task().model_copy(update={"roofline": roofline}))
        kept = store.get_hardware_peaks(host_hardware())
        assert kept is not None and kept.peaks
