"""Backends by name. Modules are imported on first use, so a host without the Neuron SDK or
CUDA still lists every backend and says why one is unusable."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from accelopt_mcp.backends.base import Availability, Backend, BackendUnavailableError

_BACKENDS: dict[str, tuple[str, str]] = {
    "cpu": ("accelopt_mcp.backends.cpu", "CpuBackend"),
    "nki": ("accelopt_mcp.backends.nki", "NkiBackend"),
    "flashinfer": ("accelopt_mcp.backends.flashinfer", "FlashInferBackend"),
}


def backend_names() -> list[str]:
    return list(_BACKENDS)


def backend_class(name: str) -> type[Backend]:
    """The class behind a backend name. ValueError for an unknown name; BackendUnavailableError
    when this build does not ship that backend's module."""
    if name not in _BACKENDS:
        raise ValueError(f"unknown backend {name!r}; valid backends: {', '.join(_BACKENDS)}")
    module_name, class_name = _BACKENDS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        raise BackendUnavailableError(
            f"backend {name!r} is not part of this build ({module_name} is missing)"
        ) from exc
    cls = getattr(module, class_name, None)
    if cls is None:
        raise BackendUnavailableError(f"{module_name} defines no {class_name}")
    return cls


def get_backend(name: str, **kwargs: Any) -> Backend:
    """A backend instance, e.g. get_backend("cpu", cpus={0})."""
    return backend_class(name)(**kwargs)


def backend_factory(name: str) -> Callable[..., Backend]:
    """A constructor taking per-device keyword arguments, for DevicePool."""
    cls = backend_class(name)
    return cls


def list_backends() -> list[Availability]:
    """Every known backend and whether it can run here; never raises."""
    found = []
    for name in _BACKENDS:
        try:
            found.append(get_backend(name).availability())
        except Exception as exc:  # a backend that cannot even start is reported, not raised
            found.append(Availability(name=name, usable=False, reason=str(exc) or repr(exc)))
    return found
