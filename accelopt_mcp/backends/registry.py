"""Backends by name: the one list to extend when adding a backend.

Adding a backend:
1. Write `accelopt_mcp/backends/<name>.py` with a `Backend` subclass that sets `info`
   (`BackendInfo`: name, one-line summary, prompt family, device kind, target hardware) and
   implements `availability()` and `evaluate()`. Run the candidate in a child process
   (`accelopt_mcp.isolation.sandbox`), never in this one.
2. Add one line to `_BACKENDS` below.
Help texts, `--backend` validation, the engine's prompt family, the device pool and the
target hardware of loaded kernels all read the class's `info`; nothing else needs an edit
(a new prompt family needs its templates in engine/prompt_templates/, a new device kind its
constructor in backends/pool.py).

Modules are imported on first use, so a host without the Neuron SDK or CUDA still lists every
backend and says why one is unusable.
"""

from __future__ import annotations

import importlib
from typing import Any

from accelopt_mcp.backends.base import Availability, Backend, BackendInfo, BackendUnavailableError

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
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise BackendUnavailableError(f"{module_name}.{class_name} is not a Backend")
    if cls.info.name != name:
        raise BackendUnavailableError(
            f"{module_name}.{class_name} calls itself {cls.info.name!r}, registered as {name!r}"
        )
    return cls


def backend_info(name: str) -> BackendInfo:
    """What a backend declares about itself (ValueError for an unknown name)."""
    return backend_class(name).info


def backend_help() -> str:
    """'cpu (this host's CPU: ...), nki (...), ...' for help texts; a backend whose module is
    missing from this build is listed by name only."""
    parts = []
    for name in _BACKENDS:
        try:
            parts.append(f"{name} ({backend_info(name).summary})")
        except BackendUnavailableError:
            parts.append(name)
    return ", ".join(parts)


def get_backend(name: str, **kwargs: Any) -> Backend:
    """A backend instance, e.g. get_backend("cpu", cpus={0})."""
    return backend_class(name)(**kwargs)


def list_backends() -> list[Availability]:
    """Every known backend and whether it can run here; never raises."""
    found = []
    for name in _BACKENDS:
        try:
            found.append(get_backend(name).availability())
        except Exception as exc:  # a backend that cannot even start is reported, not raised
            found.append(Availability(name=name, usable=False, reason=str(exc) or repr(exc)))
    return found


def require_backend(name: str) -> Availability:
    """The backend's availability when it can run here; else BackendUnavailableError with the
    reason it gives (what is missing, what to install or where to run)."""
    try:
        availability = get_backend(name).availability()
    except BackendUnavailableError:
        raise
    except Exception as exc:  # a backend that cannot even start says why, in one line
        raise BackendUnavailableError(f"backend {name!r} cannot start here: {exc}") from exc
    if not availability.usable:
        raise BackendUnavailableError(f"backend {name!r} cannot run here: {availability.reason}")
    return availability
