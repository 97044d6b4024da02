"""A backend added the documented way (a module with a Backend subclass that declares its
`info`), for tests/backends/test_registry.py: the cpu backend under another name."""

from __future__ import annotations

from accelopt_mcp.backends.base import BackendInfo
from accelopt_mcp.backends.cpu import CpuBackend


class CopiedCpuBackend(CpuBackend):
    info = BackendInfo(
        name="cpu-copy",
        summary="the cpu backend again, registered by a test",
        prompt_family="cpu",
        device_kind="cpu",
        target_hardware=("cpu-copy",),
    )
