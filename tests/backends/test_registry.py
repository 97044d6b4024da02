"""A backend describes itself once (BackendInfo), and adding one is a module plus one registry
line: help texts, settings validation, the prompt family, the device pool and loaded kernels'
target hardware all follow without another edit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from accelopt_mcp.backends import registry
from accelopt_mcp.backends.base import BackendUnavailableError
from accelopt_mcp.backends.pool import DevicePool
from accelopt_mcp.engine.config import RunSettingsError, resolve_optimize_config
from accelopt_mcp.engine.prompts import FAMILIES, family_for
from accelopt_mcp.tasks.kernels import load_solution
from accelopt_mcp.tasks.loader import load_task
from tests.bench import quick_bench

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "cpu" / "nkibench"
FAST = quick_bench(seeds=[0, 21], max_measurement_rounds=1)


@pytest.fixture
def copied_backend() -> Iterator[str]:
    # The one line a new backend adds to registry._BACKENDS.
    registry._BACKENDS["cpu-copy"] = ("tests.backends.copied_backend", "CopiedCpuBackend")
    try:
        yield "cpu-copy"
    finally:
        del registry._BACKENDS["cpu-copy"]


def test_every_registered_backend_describes_itself() -> None:
    for name in registry.backend_names():
        info = registry.backend_info(name)
        assert info.name == name
        assert info.summary and info.target_hardware
        assert info.prompt_family in FAMILIES
        assert f"{name} ({info.summary})" in registry.backend_help()


def test_a_class_registered_under_another_name_is_refused(copied_backend: str) -> None:
    registry._BACKENDS["impostor"] = registry._BACKENDS[copied_backend]
    try:
        with pytest.raises(BackendUnavailableError, match="calls itself 'cpu-copy'"):
            registry.backend_info("impostor")
    finally:
        del registry._BACKENDS["impostor"]


def test_a_new_backend_needs_only_its_module_and_one_line(copied_backend: str) -> None:
    assert "cpu-copy (the cpu backend again, registered by a test)" in registry.backend_help()
    settings = resolve_optimize_config("quick", {"backend": copied_backend})
    assert settings.backend == copied_backend
    assert family_for(copied_backend) == "cpu"

    task = load_task(EXAMPLES / "reference" / "silu_M512_N1024_numpy_0.py")
    info = registry.backend_info(copied_backend)
    kernel = load_solution(
        EXAMPLES / "kernels" / "silu_M512_N1024_fast.py",
        task,
        target_hardware=list(info.target_hardware),
    )
    assert kernel.spec.target_hardware == ["cpu-copy"]
    with DevicePool.for_backend(info, 1) as pool:
        (evaluation,) = pool.map(registry.backend_class(copied_backend), [(task, kernel)], FAST)
    assert evaluation.evaluation.passed, evaluation.evaluation.log


def test_an_unknown_backend_is_one_clear_error() -> None:
    with pytest.raises(RunSettingsError, match="unknown backend 'tpu'; choose one of cpu, nki"):
        resolve_optimize_config(None, {"backend": "tpu"})
